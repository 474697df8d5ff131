"""Pasted text split into what each reader understands (`whyjob diagnose`'s input)."""

from __future__ import annotations

from whyjob.collector.ingest.base import IngestOptions, Item
from whyjob.collector.ingest.paste import read_paste
from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Evidence
from whyjob.core.standins import PASTED_POD
from whyjob.core.timeutil import format_ts

NOW = 1_795_400_000_000


def _read(text: str) -> list[Item]:
    return list(read_paste("paste.txt", text.encode(), IngestOptions(at=NOW)))


def _evidence(items: list[Item]) -> list[Evidence]:
    return [item for item in items if isinstance(item, Evidence)]


MIXED = """\
$ kubectl get pods -n ml
NAME                READY   STATUS             RESTARTS        AGE
bert-pt-worker-0    0/1     CrashLoopBackOff   5 (2m ago)      40m
bert-pt-worker-1    1/1     Running            0               40m
$ kubectl get events -n ml
LAST SEEN   TYPE      REASON      OBJECT                 MESSAGE
12m         Warning   Evicted     pod/bert-pt-worker-1   The node was low on resource: memory. Threshold quantity: 100Mi, available: 91340Ki.
2026/11/21 23:12:05 INF Adding new event to the event store event={"Description":"Spot ITN received. Instance will be interrupted at 2026-11-21T23:14:05Z \\n","EventID":"spot-itn-a2b3","InstanceID":"i-0abc123def4567890","Kind":"SPOT_ITN","NodeName":"ip-10-0-1-2.ec2.internal","StartTime":"2026-11-21T23:14:05Z"}
I1121 23:20:11.123456       1 scale_down.go:1102] Scale-down: removing empty node "ip-10-0-9-9.ec2.internal"
"""


def test_a_mixed_paste_is_cut_into_tables_controller_lines_and_the_log() -> None:
    items = _read(MIXED)
    pods = sorted(item.name for item in items if isinstance(item, PodRecord))
    # The table ends at the next prompt: neither the prompt nor later lines become pods.
    assert pods == ["bert-pt-worker-0", "bert-pt-worker-1"]
    by_kind = {(ev.kind, ev.origin): ev for ev in _evidence(items)}
    waiting = by_kind["container.waiting", "paste.txt:3"]
    assert waiting.pod == "bert-pt-worker-0" and waiting.attrs["reason"] == "CrashLoopBackOff"
    evicted = by_kind["k8s.event", "paste.txt:7"]
    assert evicted.attrs["reason"] == "Evicted" and evicted.pod == "bert-pt-worker-1"
    assert evicted.ts == NOW - 12 * 60_000
    spot = by_kind["spot.interruption", "paste.txt:8"]
    assert (spot.node, spot.instance_id) == ("ip-10-0-1-2.ec2.internal", "i-0abc123def4567890")
    scale = by_kind["k8s.event", "paste.txt:9"]
    assert scale.node == "ip-10-0-9-9.ec2.internal" and scale.attrs["reason"] == "ScaleDown"
    prompts = [ev.message for ev in _evidence(items) if ev.pod == PASTED_POD]
    assert prompts == ["$ kubectl get pods -n ml", "$ kubectl get events -n ml"]


DESCRIBE_AND_DMESG = """\
Name:             llama-ft-worker-2
Namespace:        ml-research
Node:             ip-10-0-3-41.ec2.internal/10.0.3.41
Start Time:       Sat, 21 Nov 2026 22:04:11 +0000
Status:           Running
Containers:
  pytorch:
    State:          Running
      Started:      Sun, 22 Nov 2026 03:19:55 +0000
    Last State:     Terminated
      Reason:       Error
      Exit Code:    1
      Started:      Sat, 21 Nov 2026 22:04:30 +0000
      Finished:     Sun, 22 Nov 2026 03:19:40 +0000
    Restart Count:  1
Events:           <none>

[Sun Nov 22 03:19:29 2026] NVRM: Xid (PCI:0000:53:00): 79, pid=0, GPU has fallen off the bus.
"""


def test_describe_pod_and_dmesg_keep_their_own_times_and_node() -> None:
    items = _read(DESCRIBE_AND_DMESG)
    (pod,) = [item for item in items if isinstance(item, PodRecord)]
    assert (pod.namespace, pod.name, pod.node) == (
        "ml-research",
        "llama-ft-worker-2",
        "ip-10-0-3-41.ec2.internal",
    )
    evidence = {ev.kind: ev for ev in _evidence(items)}
    ended = evidence["container.terminated"]
    assert ended.attrs["exit_code"] == 1 and format_ts(ended.ts) == "2026-11-22T03:19:40Z"
    xid = evidence["gpu.xid"]
    assert xid.attrs["xid"] == 79 and format_ts(xid.ts) == "2026-11-22T03:19:29Z"
    assert xid.origin == "paste.txt:18"


def test_colours_cri_prefixes_and_terminal_wrapping_are_undone() -> None:
    cut = "RuntimeError: CUDA error: an illegal memory access was encountered. " + "x" * 200
    head, tail = cut[:120], cut[120:]
    text = (
        "2026-11-22T03:19:31.000000001Z stderr F \x1b[31mTraceback (most recent call last):\x1b[0m\n"
        '  File "/app/train.py", line 9, in <module>\n'
        f"{head}\n{tail}\n"
    )
    errors = [ev for ev in _evidence(_read(text)) if ev.kind == "log.error"]
    assert errors and all("\x1b" not in ev.message for ev in errors)
    assert any(
        ev.message.startswith("RuntimeError") and ev.message.endswith("x" * 200) for ev in errors
    )


def test_a_pasted_pod_document_goes_through_the_json_reader() -> None:
    pod = """{"apiVersion": "v1", "kind": "Pod",
      "metadata": {"name": "w-0", "namespace": "ml", "uid": "5f1c0a9e-0000-4000-8000-000000000001"},
      "spec": {"nodeName": "gpu-7"},
      "status": {"phase": "Failed", "containerStatuses": [{"name": "pytorch", "restartCount": 0,
        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
          "startedAt": "2026-11-22T01:00:00Z", "finishedAt": "2026-11-22T02:00:00Z"}}}]}}"""
    items = _read(pod)
    assert any(isinstance(item, PodRecord) and item.node == "gpu-7" for item in items)
    (ended,) = [ev for ev in _evidence(items) if ev.kind == "container.terminated"]
    assert ended.attrs["reason"] == "OOMKilled" and ended.attrs["exit_code"] == 137
