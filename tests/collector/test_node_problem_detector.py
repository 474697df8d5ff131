"""node-problem-detector, as it really reports: its node conditions in `kubectl describe node`
and the events it emits, diagnosed from a paste.

Condition types, reasons and event sources are those of its config/*.json (kernel-monitor,
readonly-monitor, systemd-monitor, health-checker); a permanent rule's event reads
`Node condition %s is now: %s, reason: %s, message: %q` (pkg/util), a temporary rule's event
is the matched kernel line.
"""

from __future__ import annotations

import pytest

from whyjob.cli.pasted import diagnose_text
from whyjob.collector.ingest.base import IngestOptions
from whyjob.explain.ruleset import load_rules

_STAMPS = "Tue, 05 May 2026 10:20:31 +0000   Tue, 05 May 2026 10:14:07 +0000"
_HEALTHY = [
    ("KernelDeadlock", "False", "KernelHasNoDeadlock", "kernel has no deadlock"),
    ("ReadonlyFilesystem", "False", "FilesystemIsNotReadOnly", "Filesystem is not read-only"),
    (
        "KubeletUnhealthy",
        "False",
        "KubeletIsHealthy",
        "kubelet on the node is functioning properly",
    ),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
]
# (condition, reason, message, event source, category)
PROBLEMS = [
    ("KernelDeadlock", "DockerHung", "INFO: task docker:1234 blocked for more than 120 seconds.", "kernel-monitor", "node.not_ready"),
    ("CperHardwareErrorFatal", "CperHardwareErrorFatal", "{1}[Hardware Error]: event severity: fatal", "kernel-monitor", "node.not_ready"),
    ("KubeletUnhealthy", "KubeletUnhealthy", "kubelet:10248 health check failed", "health-checker", "node.not_ready"),
    ("ContainerRuntimeUnhealthy", "ContainerdUnhealthy", "containerd health check failed", "health-checker", "node.not_ready"),
    ("FrequentKubeletRestart", "FrequentKubeletRestart", "Found 5 matching logs, which meets the threshold of 5", "systemd-monitor", "node.not_ready"),
    ("ReadonlyFilesystem", "FilesystemIsReadOnly", "EXT4-fs (nvme1n1): Remounting filesystem read-only", "readonly-monitor", "storage.io"),
    ("XfsShutdown", "XfsHasShutdown", "XFS (sdb1): Log I/O Error Detected. Shutting down filesystem", "kernel-monitor", "storage.io"),
]  # fmt: skip
# Temporary rules: an event whose message is the kernel line (reason, line, category).
EVENTS = [
    ("OOMKilling", "Memory cgroup out of memory: Killed process 41234 (pt_main_thread) total-vm:98765432kB, anon-rss:65432100kB, file-rss:123456kB, shmem-rss:4096kB, UID:0 pgtables:130000kB oom_score_adj:999", "container.oom_killed"),
    ("KernelOops", "BUG: unable to handle kernel NULL pointer dereference at 0000000000000008", "node.not_ready"),
    ("KernelOops", "divide error: 0000 [#1] SMP", "node.not_ready"),
    ("IOError", "Buffer I/O error on dev nvme1n1, logical block 1234, lost async page write", "storage.io"),
    ("Ext4Error", "EXT4-fs error (device sda1): ext4_find_entry:1455: inode #2: comm python3: reading directory lblock 0", "storage.io"),
]  # fmt: skip
_EVENTS_HEADER = (
    "Events:\n"
    "  Type     Reason                Age               From              Message\n"
    "  ----     ------                ----              ----              -------\n"
)


def _row(condition: str, status: str, reason: str, message: str) -> str:
    return f"  {condition:<24}{status:<8}{_STAMPS}   {reason:<28} {message}\n"


def describe_node(condition: str, reason: str, message: str, source: str) -> str:
    rows = [_row(c, s, r, m) for c, s, r, m in _HEALTHY if c != condition]
    event = (
        f"  Warning  {reason}  7m  {source}  Node condition {condition} is now: True, "
        f'reason: {reason}, message: "{message}"\n'
    )
    return (
        "$ kubectl describe node gpu-node-17\nName:               gpu-node-17\nConditions:\n"
        "  Type                    Status  LastHeartbeatTime                 LastTransitionTime"
        "                Reason                       Message\n"
        "  ----                    ------  -----------------                 ------------------"
        "                ------                       -------\n"
        + "".join(rows)
        + _row(condition, "True", reason, message)
        + _EVENTS_HEADER
        + event
    )


def _diagnose(paste: str) -> tuple[str, str]:
    found = diagnose_text(paste, load_rules([]), IngestOptions(at=1_780_000_000_000))
    return found.category, found.summary


@pytest.mark.parametrize(("condition", "reason", "message", "source", "category"), PROBLEMS)
def test_a_problem_condition_names_its_cause(
    condition: str, reason: str, message: str, source: str, category: str
) -> None:
    got, summary = _diagnose(describe_node(condition, reason, message, source))
    assert got == category, summary


@pytest.mark.parametrize(("reason", "line", "category"), EVENTS)
def test_a_temporary_event_names_its_cause(reason: str, line: str, category: str) -> None:
    paste = _EVENTS_HEADER + f"  Warning  {reason}  12m  kernel-monitor  {line}\n"
    got, summary = _diagnose(paste)
    assert got == category, summary


def test_healthy_conditions_say_nothing() -> None:
    paste = "Conditions:\n" + "".join(_row(*healthy) for healthy in _HEALTHY)
    got, summary = _diagnose(paste)
    assert got == "unknown", summary  # "Filesystem is not read-only" is no storage fault
