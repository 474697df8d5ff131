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
            standin = ElasticsearchIndex(ElasticSettings([server.url], prefix="whyjob-test"))
            yield standin
            standin.close()
    else:
        settings = ElasticSettings(
            [os.environ["WHYJOB_ES_URL"]],
            api_key=os.environ.get("WHYJOB_ES_API_KEY"),
            prefix=f"whyjob-test-{uuid.uuid4().hex[:8]}",  # a fresh set of indices per test
        )
        cluster = ElasticsearchIndex(settings)
        try:
            yield cluster
        finally:
            cluster.destroy()  # the test's indices go with it
            cluster.close()


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
    # Every sighting of one of its pods is a sighting of the experiment, named in it or not.
    (experiment,) = backend.experiments()
    assert (experiment.name, experiment.cluster, experiment.first_seen, experiment.last_seen) == (
        "job",
        "east",
        100,
        200,
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


def test_an_experiment_spans_every_sighting_of_its_pods(backend: Index) -> None:
    # Three pods seen out of order in one batch, and two views of one pod in one batch.
    backend.upsert_pods([PodRecord("u1", "ml", "e-0", seen=100, experiment="e"),
                         PodRecord("u2", "ml", "e-1", seen=300, experiment="e"),
                         PodRecord("u3", "ml", "e-2", seen=200, experiment="e"),
                         PodRecord("v1", "ml", "f-0", seen=200, experiment="f"),
                         PodRecord("v1", "ml", "f-0", seen=100, experiment="f")])  # fmt: skip

    def spans() -> dict[str, tuple[int, int]]:
        return {e.name: (e.first_seen, e.last_seen) for e in backend.experiments()}

    assert spans() == {"e": (100, 300), "f": (100, 200)}
    backend.upsert_pods([PodRecord("u2", "ml", "e-1", seen=250, experiment="e")])
    assert spans()["e"] == (100, 300)  # a sighting inside the span changes nothing
    backend.upsert_pods([PodRecord("u1", "ml", "e-0", seen=50)])  # a view naming no experiment
    assert spans() == {"e": (50, 300), "f": (100, 200)}


def test_a_pod_view_without_a_cluster_keeps_the_pods_experiment_whole(backend: Index) -> None:
    backend.upsert_pods([PodRecord("u1", "ml", "e-0", seen=100, experiment="e", cluster="A")])
    backend.upsert_pods([PodRecord("u1", "ml", "e-0", seen=200, experiment="e")])  # no cluster
    assert [(x.name, x.cluster, x.first_seen, x.last_seen) for x in backend.experiments()] == [
        ("e", "A", 100, 200)
    ]
    pod = backend.pod("u1")
    assert pod is not None and pod.cluster == "A"
    assert backend.experiments(cluster="") == [] and backend.experiment_pods("e", "ml", "") == []
    assert [p.uid for p in backend.experiment_pods("e", "ml", "A")] == ["u1"]


def test_bindings_belong_to_their_cluster(backend: Index) -> None:
    backend.bind([Binding("node.instance", "gpu-node-0", "i-a", 1, 2, cluster="A"),
                  Binding("node.instance", "gpu-node-0", "i-b", 1, 2, cluster="B"),
                  Binding("node.instance", "gpu-node-0", "i-0", 1, 2)])  # fmt: skip

    def objects(cluster: str | None) -> list[str]:
        found = backend.bindings("node.instance", subjects=["gpu-node-0"], cluster=cluster)
        return sorted(b.object for b in found)

    assert objects(None) == ["i-0", "i-a", "i-b"]
    assert objects("A") == ["i-0", "i-a"]  # its own and those of no cluster
    assert objects("") == ["i-0"]
    # One pod name and node name in two clusters: two bindings, each with its own span.
    backend.bind([Binding("pod.node", "ml/p", "n1", 10, 20, cluster="A"),
                  Binding("pod.node", "ml/p", "n1", 30, 40, cluster="B")])  # fmt: skip
    backend.bind([Binding("pod.node", "ml/p", "n1", 5, 15, cluster="A")])
    found = backend.bindings("pod.node", subjects=["ml/p"])
    assert sorted((b.cluster, b.first_ts, b.last_ts) for b in found) == [
        ("A", 5, 20),
        ("B", 30, 40),
    ]


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
    # What was written after `seen` is reported; a backend may also report a little written
    # just before it (Elasticsearch: within its write margin, for writers it cannot order).
    assert seen > 0 and backend.hours_written_after(seen) <= {0}
    backend.write([_ev(5, ts=7_200_000)])
    assert backend.hours_written_after(seen) - {0} == {2}


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


def test_dropping_the_newest_records_keeps_the_counter_and_search(backend: Index) -> None:
    backend.write([_ev(n, message=f"old event {n}") for n in range(10)])
    backend.write([_ev(100 + n, kind="metric.sample", message=f"sample {n}") for n in range(10)])
    backend.sync_search()
    before = backend.last_seq()
    # Retention by size drops every record of a kind, the newest records among them.
    assert backend.drop("metric.sample", 10**12, 100) == 10
    assert backend.last_seq() >= before
    fresh = [_ev(200 + n, kind="log.error", message=f"fresh failure {n}", ts=7_200_000 + n)
             for n in range(5)]  # fmt: skip
    assert backend.write(fresh) == 5
    after = backend.last_seq()
    assert after >= before and 2 in backend.hours_written_after(before)
    backend.sync_search()
    assert sorted(ev.ts for ev in backend.search("fresh")) == [7_200_000 + n for n in range(5)]
    assert backend.drop("log.error", 10**12, 100) == 5  # and they go again, cleanly
    assert backend.drop("k8s.event", 10**12, 100) == 10
    assert backend.search("fresh") == [] and backend.search("event") == []
    assert backend.last_seq() >= after and backend.kinds() == {}


def test_experiments_past_the_result_window(backend: Index) -> None:
    """More than 10,000 (Elasticsearch's index.max_result_window) come back, newest first."""
    backend.upsert_pods(
        PodRecord(f"u{n}", "ml", f"e{n}-0", seen=n, experiment=f"e{n}") for n in range(10_050)
    )
    every = backend.experiments(limit=1_000_000)
    assert len(every) == 10_050 and [e.last_seen for e in every[:3]] == [10_049, 10_048, 10_047]
    assert [e.last_seen for e in backend.experiments(limit=10_020)][-1] == 30
