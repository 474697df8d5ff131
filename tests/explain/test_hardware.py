"""The bad-node record looks across experiments."""

from __future__ import annotations

from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.explain.hardware import implicated
from whyjob.explain.model import Attempt

T = 1_772_625_600_000
NODE = "gpu-node-7"


def _xid(n: int, code: int, ts: int) -> Evidence:
    return Evidence(
        evidence_id("kernel", NODE, str(n)),
        ts,
        "kernel",
        "gpu.xid",
        f"NVRM: Xid (PCI:0000:3b:00): {code}",
        node=NODE,
        attrs={"xid": code, "pci": "0000:3b:00.0"},
    )


def _attempt(category: str) -> Attempt:
    return Attempt(id="a", pod="exp-a-0", pod_uid="ua", namespace="ml", container="c", restart=0, rank="0", node=NODE,
                   instance_id=None, started_at=T - 3_600_000, ended_at=T, exit_code=1, signal=None, reason="Error",
                   state="terminated", category=category)  # fmt: skip


def test_a_node_that_ended_other_jobs_with_repeated_xids_is_a_suspect(index: SqliteIndex) -> None:
    index.upsert_pods([
        PodRecord("ua", "ml", "exp-a-0", seen=T, experiment="exp-a", node=NODE),
        PodRecord("ub", "vision", "exp-b-0", seen=T - 86_400_000, experiment="exp-b", node=NODE),
        PodRecord("uc", "ml", "exp-c-0", seen=T - 86_400_000, experiment="exp-c", node=NODE),
    ])  # fmt: skip
    index.bind([Binding("gpu.node", "GPU-1", NODE, T - 2 * 86_400_000, T)])
    index.write([
        _xid(1, 48, T - 86_400_000),  # killed the other team's job yesterday
        _xid(2, 79, T - 5_000),
        _xid(3, 13, T - 60_000),  # an application Xid: not held against the node
        Evidence(evidence_id("k8s.pod", "ub", "t"), T - 86_400_000 + 2000, "k8s.pod", "container.terminated", "exit 1",
                 namespace="vision", pod_uid="ub", pod="exp-b-0", experiment="exp-b", node=NODE,
                 attrs={"exit_code": 1, "restart": 0}),
        Evidence(evidence_id("k8s.pod", "uc", "t"), T - 86_400_000 + 3000, "k8s.pod", "container.terminated", "exit 1",
                 namespace="ml", pod_uid="uc", pod="exp-c-0", experiment="exp-c", node=NODE,
                 attrs={"exit_code": 1, "restart": 0}),
        _xid(4, 79, T - 30 * 86_400_000),  # a month ago: outside the window
    ])  # fmt: skip
    (record,) = implicated(index, "ml", "exp-a", [_attempt("gpu.xid")])
    assert record.node == NODE and record.xids == {48: 1, 79: 1}
    # The other team's run is counted but never named: the explanation is served to "ml".
    assert record.other_failures == 2 and record.other_experiments == ["exp-c"]
    assert record.other_namespaces == 1 and "vision" not in str(record.to_json())
    assert record.suspect and record.advice.startswith(f"cordon {NODE}")


def test_only_hardware_class_failures_open_a_record(index: SqliteIndex) -> None:
    index.write([_xid(1, 79, T - 5_000)])
    assert implicated(index, "ml", "exp-a", [_attempt("app.exception")]) == []
    (record,) = implicated(index, "ml", "exp-a", [_attempt("node.not_ready")])
    assert not record.suspect and record.advice == "one hardware Xid this week: watch it"
