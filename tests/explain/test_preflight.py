"""Preflight: safe, unsafe or unknown to start a job on a node, and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.entities import Binding
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.core.timeutil import parse_ts
from whyjob.explain.preflight import preflight
from whyjob.explain.ruleset import load_rules
from whyjob.sim import simulate

NOW = 1_772_625_600_000
HOUR = 3_600_000
NODE = "gpu-node-7"
INSTANCE = "i-0abc123def4567890"
RULES = load_rules()


def _ev(n: int, kind: str, ts: int, message: str, **fields: object) -> Evidence:
    return Evidence(evidence_id("test", NODE, str(n)), ts, "test", kind, message, **fields)  # type: ignore[arg-type]


def _maintenance(n: int, start: int, end: int | None, state: str = "scheduled") -> Evidence:
    return _ev(n, "maintenance.scheduled", start, f"EC2 system-reboot {state} for {INSTANCE}",
               ts_end=end, instance_id=INSTANCE, attrs={"provider": "aws", "code": "system-reboot", "state": state})  # fmt: skip


def _ready(n: int, ts: int) -> Evidence:
    return _ev(n, "node.condition", ts, "Node condition Ready=True (KubeletReady)", node=NODE,
               attrs={"condition": "Ready", "status": "True", "reason": "KubeletReady"})  # fmt: skip


@pytest.fixture
def node_index(index: SqliteIndex) -> SqliteIndex:
    index.bind([Binding("node.instance", NODE, INSTANCE, NOW - 10 * 24 * HOUR, NOW)])
    index.write([_ready(0, NOW - 2 * HOUR)])
    return index


def _verdict(index: SqliteIndex, node: str = NODE, **kw: int) -> tuple[str, list[str]]:
    found = preflight(index, RULES, node, now=NOW, **kw)
    return found.verdict, [c.code for c in found.checks if c.blocking]


def test_a_node_with_evidence_and_no_reason_is_safe(node_index: SqliteIndex) -> None:
    assert _verdict(node_index) == ("safe", [])


def test_a_node_the_index_never_heard_of_is_unknown(node_index: SqliteIndex) -> None:
    found = preflight(node_index, RULES, "gpu-node-99", now=NOW)
    assert (found.verdict, found.exit_code, found.records) == ("unknown", 2, 0)
    # Pods ran on it before, though nothing about it falls in the look-back: known, and clean.
    node_index.bind(
        [Binding("pod.node", "uid-9", "gpu-node-99", NOW - 3 * 24 * HOUR, NOW - 2 * 24 * HOUR)]
    )
    assert preflight(node_index, RULES, "gpu-node-99", now=NOW).verdict == "safe"
    assert preflight(node_index, RULES, "gpu-node-99", now=NOW - 4 * 24 * HOUR).verdict == "unknown"


def test_maintenance_inside_the_window_is_unsafe_and_after_it_only_a_note(
    node_index: SqliteIndex,
) -> None:
    node_index.write([_maintenance(1, NOW + 40 * 60_000, NOW + 3 * HOUR)])
    assert _verdict(node_index) == ("unsafe", ["notice.maintenance"])
    assert _verdict(node_index, window_ms=30 * 60_000) == ("safe", [])  # a shorter window
    later = preflight(node_index, RULES, NODE, now=NOW, window_ms=30 * 60_000)
    assert [c.code for c in later.checks] == ["notice.maintenance"]
    assert "after the window, in 40m 00s" in later.checks[0].message


def test_maintenance_under_way_is_unsafe_and_one_over_or_canceled_is_not(
    node_index: SqliteIndex,
) -> None:
    node_index.write([_maintenance(2, NOW - 3 * HOUR, NOW - 2 * HOUR)])  # over
    node_index.write([_maintenance(3, NOW + 10 * 60_000, NOW + HOUR, state="canceled")])
    assert _verdict(node_index) == ("safe", [])
    node_index.write([_maintenance(4, NOW - 10 * 60_000, NOW + HOUR)])
    found = preflight(node_index, RULES, NODE, now=NOW)
    assert found.verdict == "unsafe" and "under way" in found.checks[0].message


def test_one_event_told_by_two_sources_is_one_reason(node_index: SqliteIndex) -> None:
    node_index.write([_maintenance(5, NOW + 20 * 60_000, NOW + HOUR)])
    node_index.write([_maintenance(6, NOW + 20 * 60_000 + 4_000, NOW + HOUR + 4_000)])
    assert _verdict(node_index) == ("unsafe", ["notice.maintenance"])


def test_a_hardware_xid_in_the_lookback_is_unsafe_an_application_one_is_not(
    node_index: SqliteIndex,
) -> None:
    node_index.write([_ev(7, "gpu.xid", NOW - HOUR, "NVRM: Xid (PCI:0000:3b:00): 13", node=NODE, attrs={"xid": 13})])  # fmt: skip
    assert _verdict(node_index) == ("safe", [])
    node_index.write([_ev(8, "gpu.xid", NOW - 5 * HOUR, "NVRM: Xid (PCI:0000:3b:00): 79", node=NODE, attrs={"xid": 79})])  # fmt: skip
    found = preflight(node_index, RULES, NODE, now=NOW)
    assert [c.code for c in found.checks] == ["xid.hardware"]
    assert "Xid 79 x1" in found.checks[0].message
    assert _verdict(node_index, lookback_ms=4 * HOUR) == ("safe", [])  # older than the look-back


def test_a_fault_after_the_moment_asked_about_is_not_seen(node_index: SqliteIndex) -> None:
    node_index.write([_ev(9, "gpu.xid", NOW + HOUR, "NVRM: Xid (PCI:0000:3b:00): 79", node=NODE, attrs={"xid": 79})])  # fmt: skip
    assert _verdict(node_index) == ("safe", [])


def test_spot_notices_and_notready_are_unsafe_while_recent(node_index: SqliteIndex) -> None:
    node_index.write([_ev(10, "spot.interruption", NOW - 30 * 60_000, "Spot ITN received", instance_id=INSTANCE)])  # fmt: skip
    node_index.write([_ev(11, "node.condition", NOW - 6 * HOUR, "Node condition Ready=False", node=NODE,
                          attrs={"condition": "Ready", "status": "False", "reason": "KubeletNotReady"})])  # fmt: skip
    assert _verdict(node_index) == ("unsafe", ["node.not-ready", "notice.spot"])
    assert _verdict(node_index, lookback_ms=HOUR) == ("unsafe", ["notice.spot"])


def test_a_notice_seen_again_keeps_its_first_time(node_index: SqliteIndex) -> None:
    # The poller sees the same spot notice every round: one notice, told as first given, so
    # what is derived from it (a node's mark) does not change every round.
    for n, minutes in ((13, 40), (14, 20), (15, 5)):
        node_index.write([_ev(n, "spot.interruption", NOW - minutes * 60_000, "Spot ITN received", instance_id=INSTANCE)])  # fmt: skip
    (spot,) = [
        c for c in preflight(node_index, RULES, NODE, now=NOW).checks if c.code == "notice.spot"
    ]
    assert (spot.at, spot.count) == (NOW - 40 * 60_000, 3)


def test_another_teams_pod_records_on_the_node_are_never_read(node_index: SqliteIndex) -> None:
    node_index.write([_ev(12, "gpu.xid", NOW - HOUR, "Xid 79 seen by team B's pod", node=NODE,
                          namespace="team-b", attrs={"xid": 79})])  # fmt: skip
    found = preflight(node_index, RULES, NODE, now=NOW)
    assert found.verdict == "safe"
    assert "team-b" not in json.dumps(found.to_json())


_WINDOWED = {
    "notice.maintenance",
    "notice.host-maintenance-event",
    "notice.terminate",
    "notice.user-host-action",
}


@pytest.mark.parametrize("seed", [1, 2, 3])  # AWS, Azure and GCE notices, read by the real readers
def test_the_simulated_maintenance_node_is_unsafe_inside_its_window_only(
    seed: int, tmp_path: Path, index: SqliteIndex
) -> None:
    truth = simulate("maintenance", seed, tmp_path / "bundle", noise=False)
    Ingestor(index, IngestOptions()).ingest([str(tmp_path / "bundle")])
    root = truth.root
    assert root is not None and root.node is not None and root.failed_at is not None
    # Well before the rank died, the notice is known and its window lies ahead.
    early = preflight(index, RULES, root.node, now=parse_ts(root.failed_at) - 12 * HOUR,
                      window_ms=24 * HOUR)  # fmt: skip
    starts = [c.at for c in early.checks if c.code in _WINDOWED]
    assert starts, early.to_json()
    start = min(starts)
    inside = preflight(index, RULES, root.node, now=start - 30 * 60_000)
    assert inside.verdict == "unsafe"
    assert {c.code for c in inside.checks if c.blocking} & _WINDOWED
    before = preflight(index, RULES, root.node, now=start - 3 * HOUR)
    assert not {c.code for c in before.checks if c.blocking} & _WINDOWED
    assert {c.code for c in before.checks if not c.blocking} & _WINDOWED  # told, as a note


def test_a_fabric_manager_down_makes_an_nvswitch_node_unsafe(
    node_index: SqliteIndex, tmp_path: Path
) -> None:
    # DCGM may call each GPU healthy while the NVLink fabric is down: the journal tells.
    journal = tmp_path / "journal.txt"
    journal.write_text(
        "2026-03-04T10:15:40+0000 gpu-node-7 kernel: nvidia-nvswitch0: open (major=508)\n"
        "2026-03-04T10:15:47+0000 gpu-node-7 systemd[1]: Starting NVIDIA fabric manager service...\n"
        "2026-03-04T10:15:47+0000 gpu-node-7 nv-fabricmanager[4177]: request to query NVSwitch "
        "device information from NVSwitch driver failed with error:WARNING Nothing to do "
        "[NV_WARN_NOTHING_TO_DO]\n"
        "2026-03-04T10:15:47+0000 gpu-node-7 systemd[1]: nvidia-fabricmanager.service: Control "
        "process exited, code=exited, status=1/FAILURE\n"
    )
    report = Ingestor(node_index, IngestOptions()).ingest([str(journal)])
    assert report.total("stored") >= 4 and report.exit_code == 0, report
    found = preflight(node_index, RULES, NODE, now=NOW)
    assert found.verdict == "unsafe"
    (check,) = [c for c in found.checks if c.code == "gpu.fabric-down"]
    assert check.what == "NVSwitch fabric down (Fabric Manager)" and check.count == 2
