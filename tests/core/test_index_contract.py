"""The index contract (core/index/base.py), the same tests on every backend: SQLite always;
Elasticsearch through the official client against the REST stand-in (tests/standins/elastic.py)
always, and against a real cluster when WHYJOB_ES_URL (and WHYJOB_ES_API_KEY) are set."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.standins.elastic import ElasticStandin
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import Index, SqliteIndex
from whyjob.core.index.elastic import ElasticsearchIndex, ElasticSettings

BACKENDS = ["sqlite", "elasticsearch-standin"] + (
    ["elasticsearch"] if os.environ.get("WHYJOB_ES_URL") else []
)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Index]:
    if request.param == "sqlite":
        with SqliteIndex(tmp_path / "index.sqlite") as index:
            yield index
    elif request.param == "elasticsearch-standin":
        with ElasticStandin() as server:
            index = ElasticsearchIndex(ElasticSettings([server.url], prefix="whyjob-test"))
            yield index
            index.close()
    else:
        settings = ElasticSettings(
            [os.environ["WHYJOB_ES_URL"]],
            api_key=os.environ.get("WHYJOB_ES_API_KEY"),
            prefix=f"whyjob-test-{uuid.uuid4().hex[:8]}",  # a fresh set of indices per test
        )
        index = ElasticsearchIndex(settings)
        yield index
        index.close()


def _ev(n: int, **fields: object) -> Evidence:
    values: dict[str, object] = {
        "kind": "k8s.event",
        "message": f"message {n}",
        "node": "node-a",
        "ts": 1_000 + n,
    }
    values.update(fields)
    return Evidence(id=evidence_id("test", str(n)), source="test", **values)  # type: ignore[arg-type]


def test_writes_are_idempotent_and_count_new_records(backend: Index) -> None:
    records = [_ev(n) for n in range(100)]
    assert backend.write(records) == 100
    assert backend.write(records) == 0
    assert backend.write([*records[:10], _ev(100)]) == 1
    assert backend.counts()["evidence"] == 101


def test_a_record_comes_back_whole_with_its_raw_body(backend: Index) -> None:
    ev = _ev(1, ts_end=5000, pod="p", pod_uid="u1", container="c", origin="f.json:3",
             attrs={"exit_code": 137, "nested": {"a": [1]}}, raw=b'{"x": 1}')  # fmt: skip
    backend.write([ev])
    (back,) = backend.get([ev.id])
    assert (back.ts, back.ts_end, back.kind, back.pod_uid, back.attrs, back.origin) == (
        1001, 5000, "k8s.event", "u1", {"exit_code": 137, "nested": {"a": [1]}}, "f.json:3"
    )  # fmt: skip
    assert backend.raw(ev.id) == b'{"x": 1}' and backend.raw(evidence_id("t", "none")) is None


def test_entity_and_pod_reads_keep_to_their_window_and_kind(backend: Index) -> None:
    backend.write([_ev(n, node="node-a" if n % 2 else "node-b") for n in range(50)])
    backend.write([_ev(100 + n, pod_uid="u", container="c", kind=k, node="node-a")
                   for n, k in enumerate(["k8s.event", "log.line", "log.line", "log.error"])])  # fmt: skip
    found = backend.entity_evidence("node", ["node-a"], 1_010, 1_020)
    assert [ev.ts for ev in found] == [1_011, 1_013, 1_015, 1_017, 1_019]  # not the pod's
    assert [ev.kind for ev in backend.pod_evidence(["u"], 0, 10_000)] == ["k8s.event", "log.error"]
    assert [ev.ts for ev in backend.log_tail("u", "c", 10_000, 1)] == [1_102]
    assert [ev.ts for ev in backend.log_tail("u", "c", 10_000, 5)] == [1_101, 1_102]
    with pytest.raises(ValueError):
        backend.entity_evidence("message", ["x"], 0, 1)


def test_pods_and_experiments_merge_views(backend: Index) -> None:
    backend.upsert_pods([PodRecord("u1", "ml", "job-worker-0", seen=100, experiment="job", launcher="PyTorchJob",
                                   label="l", phase="Running", created=50, cluster="east")])  # fmt: skip
    backend.upsert_pods(
        [PodRecord("u1", "ml", "job-worker-0", seen=200, phase="Failed", node="n1")]
    )
    backend.upsert_pods([PodRecord("u1", "ml", "job-worker-0", seen=150, phase="Running")])
    (pod,) = backend.experiment_pods("job", "ml")
    assert (pod.phase, pod.node, pod.created, pod.seen, pod.cluster) == (
        "Failed",
        "n1",
        50,
        200,
        "east",
    )
    (experiment,) = backend.experiments()
    assert (experiment.name, experiment.cluster, experiment.first_seen, experiment.last_seen) == (
        "job",
        "east",
        100,
        100,
    )
    assert (
        backend.experiments(cluster="west") == []
        and backend.experiment_pods("job", "ml", "west") == []
    )
    assert [p.uid for p in backend.pods_named_like("job")] == ["u1"]
    assert backend.pods_named_like("jo") == []  # a prefix ends at a dash
    assert backend.pod("u1") is not None and backend.pod("u2") is None
    assert [p.uid for p in backend.pods_on_node("n1", 0, 1_000)] == ["u1"]
    assert backend.node_spans(0, 1_000) == {"n1": (100, 200)}


def test_bindings_widen_their_time_span(backend: Index) -> None:
    backend.bind([Binding("pod.node", "u1", "n1", 100, 200)])
    backend.bind(
        [Binding("pod.node", "u1", "n1", 50, 150), Binding("node.instance", "n1", "i-1", 0, 10)]
    )
    (binding,) = backend.bindings("pod.node", subjects=["u1"])
    assert (binding.first_ts, binding.last_ts) == (50, 200)
    assert [b.subject for b in backend.bindings("node.instance", objects=["i-1"])] == ["n1"]


def test_checkpoints_quarantine_imports_and_derived(backend: Index) -> None:
    backend.quarantine("f.json:12", "truncated JSON document", b"{", "k8s")
    backend.set_checkpoint("east|k8s/events", "rv-1")
    backend.set_checkpoint("east|k8s/events", "rv-2")
    backend.set_checkpoint("k8s/pods", "rv-9")
    backend.record_import("f.json", "k8s", 3, 2, 0, 1)
    backend.put_derived("fleet/v1", [("ml/job", "s1", 7, b"{}")])
    (row,) = backend.quarantined()
    assert row[2:6] == ("f.json:12", "k8s", "truncated JSON document", b"{")
    assert backend.checkpoint("east|k8s/events") == "rv-2" and backend.checkpoint("other") is None
    assert backend.checkpoints("east|") == {"east|k8s/events": "rv-2"}
    assert backend.counts()["imports"] == 1 and backend.counts()["quarantine"] == 1
    assert backend.derived("fleet/v1") == {"ml/job": ("s1", 7, b"{}")}


def test_counts_kinds_range_search_and_the_fleets_reads(backend: Index) -> None:
    backend.write([
        _ev(1, message="Container pytorch terminated: OOMKilled", kind="container.terminated"),
        _ev(2, message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus", kind="gpu.xid"),
        _ev(3, message="Node condition Ready=False", kind="node.condition"),
        _ev(4, message="Node gpu-node-1", kind="node.snapshot", node="gpu-node-1", attrs={"labels": {"pool": "a"}}),
    ])  # fmt: skip
    assert backend.kinds() == {
        "container.terminated": 1,
        "gpu.xid": 1,
        "node.condition": 1,
        "node.snapshot": 1,
    }
    assert backend.time_range() == (1001, 1004)
    backend.sync_search()  # search covers what was brought up to date (SQLite does it on demand)
    assert [ev.ts for ev in backend.search("oomkilled")] == [1001]
    assert [ev.ts for ev in backend.search('"fallen off the bus"')] == [1002]
    assert [ev.kind for ev in backend.fleet_records(0, 10_000)] == ["gpu.xid", "node.condition"]
    assert backend.node_labels(["gpu-node-1", "other"], 10_000) == {"gpu-node-1": {"pool": "a"}}
    seen = backend.last_seq()
    assert seen > 0 and backend.hours_written_after(seen) == set()
    backend.write([_ev(5, ts=7_200_000)])
    assert backend.hours_written_after(seen) == {2}


def test_retention_drops_the_oldest_of_a_kind(backend: Index) -> None:
    backend.write(
        [_ev(n, kind="log.progress", raw=b"r") for n in range(30)] + [_ev(100, kind="gpu.xid")]
    )
    assert backend.expiring({"log.progress": 1_010, "gpu.xid": 1_000}) == {
        "log.progress": (10, 1_000)
    }
    assert backend.drop("log.progress", 1_010, 4) == 4
    assert backend.drop("log.progress", 1_010, 100) == 6
    assert backend.drop("log.progress", 1_010, 100) == 0
    assert backend.kinds() == {"log.progress": 20, "gpu.xid": 1}
    assert (
        backend.raw(evidence_id("test", "0")) is None
        and backend.raw(evidence_id("test", "20")) == b"r"
    )
    assert backend.used_bytes() > 0
