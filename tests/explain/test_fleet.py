"""The fleet view: runs add up by node and GPU, and the patterns operators act on show."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.explain.fleet import build_fleet
from whyjob.explain.nodehistory import node_history
from whyjob.explain.ruleset import load_rules

SCHEMA = json.loads((Path(__file__).parents[2] / "core" / "schema" / "fleet.v1.json").read_text())
T0 = 1_772_625_600_000
HOUR = 3_600_000
DAY = 24 * HOUR
GPU = "GPU-5fc0bcec-c2e1-38dc-8994-2a9f9f3b709e"


def _ev(key: str, ts: int, source: str, kind: str, message: str, **fields: object) -> Evidence:
    return Evidence(evidence_id(source, key, str(ts)), ts, source, kind, message, **fields)  # type: ignore[arg-type]


def _run(
    index: SqliteIndex,
    namespace: str,
    experiment: str,
    node: str,
    start: int,
    end: int,
    *,
    xid: int | None = None,
    error: str | None = None,
) -> None:
    """One single-rank experiment with 8 GPUs on `node` that failed at `end`: after a kernel Xid
    on the node's GPU, or with a Python exception in its log."""
    uid = f"uid-{experiment}"
    pod = f"{experiment}-worker-0"
    index.upsert_pods(
        [PodRecord(uid, namespace, pod, seen=end, experiment=experiment, launcher="PyTorchJob",
                   rank="worker-0", node=node, created=start, phase="Failed", gpus=8)]
    )  # fmt: skip
    index.bind([Binding("pod.node", uid, node, start, end)])
    scope = {"namespace": namespace, "pod": pod, "pod_uid": uid, "container": "pytorch"}
    records = [
        _ev(uid, start, "k8s.pod", "container.running", "Container pytorch running", node=node,
            attrs={"restart": 0}, **scope),
        _ev(uid, end, "k8s.pod", "container.terminated",
            "Container pytorch terminated: Error, exit code 1", node=node,
            attrs={"restart": 0, "exit_code": 1, "reason": "Error", "started": start}, **scope),
    ]  # fmt: skip
    if xid is not None:
        index.bind([Binding("gpu.node", GPU, node, start - DAY, end + DAY)])
        records.append(
            _ev(node, end - 60_000, "kernel", "gpu.xid",
                f"NVRM: Xid (PCI:0000:8b:00): {xid}, pid=4242, name=python, GPU has fallen off the bus.",
                node=node, gpu_uuid=GPU, attrs={"xid": xid, "pci": "0000:8b:00"})
        )  # fmt: skip
    if error is not None:
        records.append(
            _ev(uid + "/log", end - 5_000, "log", "log.traceback", error,
                attrs={"exception": error.split(":")[0], "restart": 0}, **scope)
        )  # fmt: skip
    index.write(records)


def _ready(index: SqliteIndex, node: str, at: int, status: str) -> None:
    index.write(
        [
            _ev(node, at, "k8s.node", "node.condition", f"Node condition Ready={status}",
                node=node, attrs={"condition": "Ready", "status": status})
        ]
    )  # fmt: skip


@pytest.fixture
def fleet_index(index: SqliteIndex) -> SqliteIndex:
    # gpu-a: Xid 79 kills a run; the node comes back Ready; the same Xid kills another run 6 h
    # later on the same GPU (a lemon, and a GPU repeating its Xid within a day).
    _run(index, "ml", "llama-a", "gpu-a", T0, T0 + 2 * HOUR, xid=79)
    _ready(index, "gpu-a", T0 + 3 * HOUR, "True")
    _run(index, "ml", "llama-b", "gpu-a", T0 + 4 * HOUR, T0 + 8 * HOUR, xid=79)
    # gpu-b: the program's own exception: a failure on the node, not of it.
    _run(index, "ml", "bert-c", "gpu-b", T0 + DAY, T0 + DAY + HOUR, error="ValueError: bad shape")
    # Another team's run on gpu-a: counted, never read or named.
    _run(index, "other-team", "secret-d", "gpu-a", T0 + 9 * HOUR, T0 + 10 * HOUR, xid=79)
    # gpu-c: a GPU health-check init container failed before the job could start.
    uid = "uid-gpt-e"
    index.upsert_pods(
        [PodRecord(uid, "ml", "gpt-e-worker-0", seen=T0 + HOUR, experiment="gpt-e",
                   launcher="PyTorchJob", rank="worker-0", node="gpu-c", created=T0, gpus=8)]
    )  # fmt: skip
    index.write(
        [
            _ev(uid, T0 + HOUR, "k8s.pod", "container.terminated",
                "Container gpu-check terminated: Error, exit code 3", namespace="ml",
                pod="gpt-e-worker-0", pod_uid=uid, container="gpu-check", node="gpu-c",
                attrs={"restart": 0, "exit_code": 3, "reason": "Error", "init": True})
        ]
    )  # fmt: skip
    index.bind([Binding("pod.gpu", "ml/gpt-e-worker-0", GPU, T0, T0 + HOUR)])
    return index


def _build(index: SqliteIndex):  # type: ignore[no-untyped-def]
    return build_fleet(
        index, load_rules(), since=T0 - DAY, until=T0 + 2 * DAY, readable=lambda ns: ns == "ml"
    )


def test_nodes_add_up_their_runs_and_hardware_comes_first(fleet_index: SqliteIndex) -> None:
    fleet = _build(fleet_index)
    assert [n.node for n in fleet.nodes][:2] == ["gpu-a", "gpu-b"]
    a, b = fleet.nodes[0], fleet.nodes[1]
    assert dict(a.by_cause) == {"gpu.xid": 2} and a.hardware_runs == 2
    assert a.experiments == {"ml/llama-a", "ml/llama-b"}
    # Each run had 8 GPUs: 2 h and 4 h since their start were lost.
    assert a.gpu_hours_lost == pytest.approx(8 * 2 + 8 * 4, abs=0.1)
    assert dict(b.by_cause) == {"app.exception": 1} and b.hardware_runs == 0
    assert a.infra_gpu_hours_lost == a.gpu_hours_lost and b.infra_gpu_hours_lost == 0


def test_a_node_failing_again_after_it_came_back_is_a_lemon(fleet_index: SqliteIndex) -> None:
    fleet = _build(fleet_index)
    a = fleet.node("gpu-a")
    assert a is not None and a.lemon and a.episodes == 2
    assert a.repeat_gpus == [GPU]
    (gpu,) = [g for g in fleet.gpus if g.gpu == GPU]
    # Three Xids in all (one under the other team's run: a fault of the GPU, whoever ran on it);
    # only the readable runs are counted against it.
    assert (gpu.faults, gpu.runs, gpu.repeats) == (3, 2, [79])
    patterns = " ".join(a.patterns())
    assert "lemon" in patterns and "reset or RMA" in patterns
    assert not fleet.node("gpu-b").lemon  # type: ignore[union-attr]


def test_without_the_comeback_the_two_faults_are_one_episode(index: SqliteIndex) -> None:
    _run(index, "ml", "llama-a", "gpu-a", T0, T0 + 2 * HOUR, xid=79)
    _run(index, "ml", "llama-b", "gpu-a", T0 + 4 * HOUR, T0 + 8 * HOUR, xid=79)
    a = _build(index).node("gpu-a")
    assert a is not None and a.episodes == 1 and not a.lemon


def test_failed_health_checks_are_tied_to_the_job_they_held_up(fleet_index: SqliteIndex) -> None:
    fleet = _build(fleet_index)
    (failure,) = fleet.init_failures
    assert (failure.experiment, failure.node, failure.container) == ("gpt-e", "gpu-c", "gpu-check")
    assert "exit code 3" in failure.reason
    assert fleet.node("gpu-c").init_failures == 1  # type: ignore[union-attr]
    assert failure.gpus == [GPU]  # the GPU the check held, from the pod's binding
    assert [(g.gpu, g.init_failures) for g in fleet.gpus if g.init_failures] == [(GPU, 1)]


def test_other_teams_are_counted_never_named(fleet_index: SqliteIndex) -> None:
    fleet = _build(fleet_index)
    assert fleet.hidden_experiments == 1
    document = json.dumps(fleet.to_json())
    assert "secret-d" not in document and "other-team" not in document
    jsonschema.validate(fleet.to_json(), SCHEMA)


def test_node_history_tells_faults_comebacks_and_runs_in_order(fleet_index: SqliteIndex) -> None:
    fleet = _build(fleet_index)
    history = node_history(fleet_index, load_rules(), fleet, "gpu-a")
    whats = [e.what for e in history.entries]
    # The same kernel line three times in a day is one line, counted.
    assert [e.count for e in history.entries if e.what == "fault"] == [3]
    assert whats.count("run") == 2
    assert [e.at for e in history.entries] == sorted(e.at for e in history.entries)
    assert "secret-d" not in json.dumps(history.to_json())


def test_the_parts_are_kept_and_only_what_changed_is_explained_again(
    fleet_index: SqliteIndex,
) -> None:
    first = _build(fleet_index)
    kept = fleet_index.derived("fleet/v1")
    assert set(kept) == {"ml/llama-a", "ml/llama-b", "ml/bert-c", "ml/gpt-e"}
    # A record near bert-c's span (a day after the others): only it is explained again.
    _ready(fleet_index, "gpu-b", T0 + DAY + 30 * 60_000, "False")
    again = _build(fleet_index)
    renewed = {k for k, v in fleet_index.derived("fleet/v1").items() if v[1] != kept[k][1]}
    assert "ml/bert-c" in renewed and "ml/llama-b" not in renewed
    assert [n.node for n in again.nodes][:2] == [n.node for n in first.nodes][:2]
    # A read-only index answers the same, without keeping anything.
    with SqliteIndex(fleet_index.path, readonly=True) as reader:
        assert len(_build(reader).runs) == len(again.runs)


def test_a_record_read_late_inside_a_pods_life_renews_its_part(index: SqliteIndex) -> None:
    # A pod created long before it was first seen (a bundle captured after the fact): its
    # explanation reads from its creation, so a record that arrives later from then counts.
    uid, pod, node = "uid-late", "late-worker-0", "gpu-l"
    index.upsert_pods([PodRecord(uid, "ml", pod, seen=T0 + 20 * HOUR, experiment="late",
                                 launcher="PyTorchJob", rank="worker-0", node=node, created=T0,
                                 phase="Failed", gpus=8)])  # fmt: skip
    scope = {"namespace": "ml", "pod": pod, "pod_uid": uid, "container": "pytorch", "node": node}

    def failed(restart: int, start: int, end: int) -> list[Evidence]:
        return [
            _ev(f"{uid}/{restart}/r", start, "k8s.pod", "container.running",
                "Container pytorch running", attrs={"restart": restart}, **scope),
            _ev(f"{uid}/{restart}/t", end, "k8s.pod", "container.terminated",
                "Container pytorch terminated: Error, exit code 1",
                attrs={"restart": restart, "exit_code": 1, "reason": "Error", "started": start},
                **scope),
        ]  # fmt: skip

    index.write(failed(1, T0 + 2 * HOUR, T0 + 20 * HOUR))
    assert len(_build(index).runs) == 1
    index.write(failed(0, T0, T0 + HOUR))  # an older file, ingested later
    assert len(_build(index).runs) == 2


def test_the_window_ends_at_the_callers_newest_run_not_another_teams(
    fleet_index: SqliteIndex,
) -> None:
    from whyjob.explain.fleet import fleet_window

    ours = max(r.last_seen for r in fleet_index.experiments() if r.namespace == "ml")
    fleet_index.upsert_pods(
        [PodRecord("uid-late-other", "other-team", "x-0", seen=ours + DAY, experiment="x")]
    )
    assert fleet_window(fleet_index, "1d", None) == (ours, ours + DAY)
    mine = fleet_window(fleet_index, "1d", None, readable=lambda ns: ns == "ml")
    assert mine == (ours - DAY, ours)


def test_a_first_look_reports_its_progress_by_experiment(fleet_index: SqliteIndex) -> None:
    heard: list[tuple[int, int]] = []
    build_fleet(
        fleet_index,
        load_rules(),
        since=0,
        until=2**62,
        on_progress=lambda done, total: heard.append((done, total)),
    )
    total = len(fleet_index.experiments(limit=1_000_000))
    assert total >= 2 and heard == [(n, total) for n in range(1, total + 1)]
