"""The Elasticsearch backend end to end, through the official client against the REST stand-in:
ingest and explain by configuration alone, the API over it, and the errors a person meets (a
wrong URL, refused credentials, a missing privilege, a full write queue, a lapsed point in time)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from tests.standins.elastic import ElasticStandin
from whyjob.api.access import Access, Principal, digest
from whyjob.api.app import ApiOptions, create_app
from whyjob.api.service import Service
from whyjob.cli.app import app
from whyjob.cli.main import route
from whyjob.collector.ingest.base import IngestOptions, Item
from whyjob.collector.ingest.run import Ingestor
from whyjob.collector.live.health import Health
from whyjob.collector.live.sink import Batch, Writer
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.errors import IndexProblem
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex, elastic
from whyjob.core.index.elastic import ElasticsearchIndex, ElasticSettings, RecordRefused
from whyjob.core.retention import Policy, prune
from whyjob.explain.engine import explain_experiment
from whyjob.explain.ruleset import load_rules
from whyjob.sim import simulate


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    root = tmp_path_factory.mktemp("es-bundle")
    truth = simulate("xid79", 7, root / "bundle")
    return root / "bundle", truth.experiment_name, truth.experiment_namespace


def test_ingest_and_explain_by_configuration_alone(
    bundle: tuple[Path, str, str], tmp_path: Path
) -> None:
    path, name, namespace = bundle
    with ElasticStandin() as server:
        config = tmp_path / "config.yaml"
        config.write_text(
            f"index:\n  backend: elasticsearch\n  urls: [{server.url}]\n  prefix: team\n"
        )
        runner = CliRunner()

        def run(*args: str) -> object:
            result = runner.invoke(app, route(["--config", str(config), *args]))
            assert result.exit_code == 0, result.output
            return result

        ingested = run("ingest", str(path))
        assert "into " + server.url in ingested.output  # type: ignore[attr-defined]
        told = run(name, "--json").output  # type: ignore[attr-defined]
        again = run("ingest", str(path)).output  # type: ignore[attr-defined]
        assert "stored 0" in again  # re-ingest is a no-op: every _id is a 409
        assert {"team-evidence", "team-pods", "team-experiments"} <= set(server.indices)
    # The same story as on SQLite, record for record.
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        Ingestor(index, IngestOptions()).ingest([str(path)])
        local = explain_experiment(index, load_rules(), name, namespace)
    import json

    remote = json.loads(told)
    assert remote["verdict"]["category"] == local.verdict.category == "gpu.xid"
    assert [a["evidence"] for a in remote["attempts"]] == [a.evidence for a in local.attempts]


def test_the_api_serves_from_elasticsearch(bundle: tuple[Path, str, str]) -> None:
    path, name, namespace = bundle
    with ElasticStandin() as server:
        settings = ElasticSettings([server.url])
        with ElasticsearchIndex(settings) as index:
            Ingestor(index, IngestOptions()).ingest([str(path)])
        token = "ops-token-0123456789"
        access = Access(tokens={digest(token): Principal("ops", frozenset({"*"}))})
        api = create_app(Service(settings, load_rules()), ApiOptions(access))
        with TestClient(api) as client:
            headers = {"Authorization": f"Bearer {token}"}
            answer = client.get(
                f"/api/v1/experiments/{namespace}/{name}/explanation", headers=headers
            )
            assert answer.status_code == 200 and answer.json()["verdict"]["category"] == "gpu.xid"
            listed = client.get("/api/v1/experiments", headers=headers).json()
            assert name in {row["name"] for row in listed}


def test_the_errors_say_what_to_fix() -> None:
    with pytest.raises(IndexProblem, match=r"cannot reach Elasticsearch at http://127\.0\.0\.1:9"):
        ElasticsearchIndex(ElasticSettings(["http://127.0.0.1:9"]))
    with ElasticStandin(api_key="right-key", read_only_key="reader-key") as server:
        with pytest.raises(IndexProblem, match="refused the credentials"):
            ElasticsearchIndex(ElasticSettings([server.url], api_key="wrong-key"))
        with pytest.raises(IndexProblem, match="lack a privilege"):
            ElasticsearchIndex(ElasticSettings([server.url], api_key="reader-key"))
        # The right key writes; a reader opens read-only and reads.
        with ElasticsearchIndex(ElasticSettings([server.url], api_key="right-key")) as index:
            index.write([Evidence(evidence_id("t", "1"), 1, "t", "k8s.event", "hello")])
        with ElasticsearchIndex(
            ElasticSettings([server.url], api_key="reader-key"), readonly=True
        ) as index:
            assert index.counts()["evidence"] == 1


def test_a_full_write_queue_and_a_lapsed_point_in_time_lose_nothing() -> None:
    records = [
        Evidence(evidence_id("t", str(n)), n, "t", "log.line", f"line {n}", node="n1")
        for n in range(12_000)
    ]
    with ElasticStandin() as server, ElasticsearchIndex(ElasticSettings([server.url])) as index:
        server.throttle(2)  # the next two bulk requests answer 429: the client retries
        assert index.write(records) == 12_000
        pages = iter(range(10))

        real_search = index._es.search

        def lapse_once(**kwargs: Any) -> Any:
            if "pit" in kwargs and next(pages) == 1:
                server.expire_pits()  # between the first and the second page
            return real_search(**kwargs)

        index._es.search = lapse_once  # type: ignore[method-assign]
        found = index.entity_evidence("node", ["n1"], 0, 20_000)
        assert [ev.ts for ev in found] == list(range(12_000))


def _records(n: int, *, start: int = 0, ts: int | None = None, **fields: Any) -> list[Evidence]:
    """`n` error lines about node n1 (or `fields`), the i-th at 1,000 + i ms unless `ts`."""
    values: dict[str, Any] = {"kind": "log.error", "node": "n1", **fields}
    return [
        Evidence(
            evidence_id("t", str(i)),
            1_000 + i if ts is None else ts,
            "t",
            message=f"line {i}",
            **values,
        )
        for i in range(start, start + n)
    ]


@pytest.fixture
def server() -> Iterator[ElasticStandin]:
    with ElasticStandin() as standin:
        yield standin


@pytest.fixture
def index(server: ElasticStandin) -> Iterator[ElasticsearchIndex]:
    with ElasticsearchIndex(ElasticSettings([server.url])) as opened:
        yield opened


def test_used_bytes_is_the_live_size_before_segments_merge(
    server: ElasticStandin, index: ElasticsearchIndex
) -> None:
    index.write(_records(2_000, raw=b"x" * 300))
    full = index.used_bytes()
    store = _store_bytes(server)
    assert index.drop("log.error", 10**12, 1_000) == 1_000
    # Elasticsearch keeps the deleted documents' bytes in the store until a merge...
    assert _store_bytes(server) == store
    # ...but what the records take has halved, and retention must see that at once.
    assert abs(index.used_bytes() - full / 2) < full * 0.02
    server.force_merge()
    assert abs(index.used_bytes() - full / 2) < full * 0.02 and _store_bytes(server) < store


def _store_bytes(server: ElasticStandin) -> int:
    stats = [
        server._serve("GET", f"/whyjob-{t}/_stats", {}, b"", {})[1] for t in ("evidence", "raw")
    ]
    return sum(int(s["_all"]["primaries"]["store"]["size_in_bytes"]) for s in stats)


def test_retention_by_size_drops_about_the_excess_round_after_round(
    index: ElasticsearchIndex,
) -> None:
    index.write(_records(2_000, kind="metric.sample"))
    index.write(_records(2_000, start=2_000, kind="container.terminated"))
    limit = int(index.used_bytes() * 0.9)
    policy = Policy(
        kinds=(("metric.", 3 * 86_400_000), ("container.", 90 * 86_400_000)),
        max_bytes=limit,
        configured=True,
    )
    for _ in range(3):  # later rounds find the index under its limit: nothing more goes
        prune(index, policy, now=10_000)
    kinds = index.kinds()
    assert kinds["container.terminated"] == 2_000  # the longer-kept kind is untouched
    assert 1_550 <= kinds["metric.sample"] <= 1_650  # about a tenth of 4,000 went, no more
    assert index.used_bytes() <= limit


def test_the_write_counter_is_exact_and_waits_out_late_writers(server: ElasticStandin) -> None:
    settings = ElasticSettings([server.url])
    margin = settings.write_margin_ms * 1_000_000
    stamp = 1_700_000_000_123_456_789  # not a double: a max aggregation would round it
    late, reader = ElasticsearchIndex(settings), ElasticsearchIndex(settings, readonly=True)
    with ElasticsearchIndex(settings) as early:
        early._clock = lambda: stamp
        early.write(_records(1, ts=5 * 3_600_000))
    answer = reader._search("evidence", {"match_all": {}}, size=0, aggs={"m": {"max": {"field": "written"}}})  # fmt: skip
    assert answer["aggregations"]["m"]["value"] != stamp  # the stand-in rounds, as Lucene does
    reader._clock = lambda: stamp + 1_000_000_000  # a second later
    made = reader.last_seq()
    assert made <= stamp - margin + 1_000_000_000  # not yet: a writer may still be behind
    # A collector whose clock is a minute behind (or whose bulk was a minute in flight) makes
    # a record visible only now: a document made at `made` must learn about its hour.
    late._clock = lambda: stamp - 60 * 1_000_000_000
    late.write(_records(1, start=1, ts=9 * 3_600_000))
    late.close()
    assert 9 in reader.hours_written_after(made)
    # Within the margin the counter keeps moving, so a cache keyed on it is checked again.
    reader._clock = lambda: stamp + 2_000_000_000
    assert reader.last_seq() > made
    # Once the margin has passed with nothing new, the counter is the newest stamp, exactly,
    # and stays put (a cached answer stays fresh).
    reader._clock = lambda: stamp + margin + 1
    assert reader.last_seq() == stamp == reader.last_seq()
    # Retention dropping the newest records does not take the counter back.
    with ElasticsearchIndex(settings) as pruner:
        assert pruner.drop("log.error", 10**12, 100) == 2
    assert reader.last_seq() == stamp
    reader.close()


def test_reads_past_the_result_window_and_per_item_back_pressure(
    server: ElasticStandin, index: ElasticsearchIndex
) -> None:
    server.throttle_items(7)  # seven items of the next bulk answer 429: sent again alone
    assert index.write(_records(12_000)) == 12_000
    assert len(index.search("line", limit=12_000)) == 12_000  # a search of 12,000 is a 400
    assert index.quarantined(limit=20_000) == []
    assert index.drop("log.error", 10**12, 20_000) == 10_000  # at most a window at a time
    assert index.drop("log.error", 10**12, 20_000) == 2_000


def test_more_names_than_a_terms_query_holds(index: ElasticsearchIndex) -> None:
    index.write(_records(3) + _records(2, start=3, node="n2"))
    nodes = [f"node-{n}" for n in range(70_000)] + ["n2", "n1"]  # a terms query takes 65,536
    found = index.entity_evidence("node", nodes, 0, 10_000)
    assert [ev.ts for ev in found] == [1_000, 1_001, 1_002, 1_003, 1_004]


def test_bulk_bodies_stay_under_the_limit_and_a_too_large_one_is_split() -> None:
    body = bytes(range(256)) * 32  # 8 KB, 11 KB in base64
    roomy = ElasticStandin(max_content_length=12 * 1024 * 1024)
    with roomy as server, ElasticsearchIndex(ElasticSettings([server.url])) as index:
        assert index.write(_records(2_000, raw=body)) == 2_000  # 22 MB of raw bodies
        assert server.too_large == 0 and index.raw(evidence_id("t", "1999")) == body
    tight = ElasticStandin(max_content_length=1024 * 1024)  # a cluster set lower than 10 MB
    with tight as server, ElasticsearchIndex(ElasticSettings([server.url])) as index:
        assert index.write(_records(300, raw=body)) == 300
        assert server.too_large > 0 and index.raw(evidence_id("t", "299")) == body
        # One record over the limit by itself is refused, and nothing of its write stays.
        big = _records(2, start=1_000, raw=b"y" * 2 * 1024 * 1024)
        with pytest.raises(RecordRefused, match=r"http\.max_content_length"):
            index.write([*_records(5, start=500), *big])
        assert index.counts()["evidence"] == 300


def test_a_refused_record_is_quarantined_alone(server: ElasticStandin) -> None:
    """A keyword over 32,766 bytes is refused by Elasticsearch (not by SQLite): the writer
    stores the rest of the batch and its checkpoint, and quarantines that record once."""
    with ElasticsearchIndex(ElasticSettings([server.url])) as index:
        health = Health()
        writer = Writer(index, health).start()
        good = _records(3)
        bad = _records(1, start=3, container="c" * 40_000)[0]
        writer.put(Batch("k8s", "events", [good[0], bad, *good[1:]], {"k8s/events": "rv-7"}))
        writer.flush()
        writer.stop()
        assert writer.failed is None
        assert {ev.id for ev in index.get([ev.id for ev in [*good, bad]])} == {ev.id for ev in good}
        (entry,) = index.quarantined()
        assert "immense term" in entry[4] and index.checkpoint("k8s/events") == "rv-7"
        # Trial writes were undone, so the batch written again counted its records as new.
        assert health.counters[("writer", "stored")] == 3
        # A pod the same: the others and their experiment are stored, it is quarantined.
        writer = Writer(index, health).start()
        pods: list[Item] = [PodRecord("u1", "ml", "job-0", seen=10, experiment="job"),
                            PodRecord("u2", "ml", "p" * 40_000, seen=20, experiment="job")]  # fmt: skip
        writer.put(Batch("k8s", "pods", pods))
        writer.flush()
        writer.stop()
        assert writer.failed is None and index.pod("u2") is None
        assert [(e.name, e.first_seen, e.last_seen) for e in index.experiments()] == [
            ("job", 10, 10)
        ]
        assert len(index.quarantined()) == 2


def test_a_refused_pod_keeps_the_rest_whole(index: ElasticsearchIndex) -> None:
    pods = [PodRecord("u1", "ml", "job-0", seen=10, experiment="job"),
            PodRecord("u2", "ml", "p" * 40_000, seen=20, experiment="job")]  # fmt: skip
    with pytest.raises(RecordRefused, match="immense term"):
        index.upsert_pods(pods)
    # Refused with its write: the pod that was stored has its experiment.
    assert [(e.name, e.first_seen) for e in index.experiments()] == [("job", 10)]


def test_transaction_undoes_what_it_created_on_a_failure(index: ElasticsearchIndex) -> None:
    index.write(_records(1))
    with pytest.raises(KeyError), index.transaction():
        index.write(_records(3))  # one known, two new
        index.quarantine("f.json:1", "bad", b"{")
        with index.transaction():  # nested: joins the outer one
            index.write(_records(1, start=10, raw=b"r"))
        raise KeyError
    assert index.counts()["evidence"] == 1 and index.quarantined() == []
    assert index.raw(evidence_id("t", "10")) is None
    with index.transaction():
        assert index.write(_records(3)) == 2


def test_an_unreachable_or_empty_cluster_is_an_index_problem(server: ElasticStandin) -> None:
    with ElasticsearchIndex(ElasticSettings([server.url]), readonly=True) as reader:
        # A reader before anything was written: the indices are not there yet.
        with pytest.raises(IndexProblem, match="has no index whyjob-experiments"):
            reader.experiments()
        with pytest.raises(IndexProblem, match="has no index whyjob-evidence"):
            reader.entity_evidence("node", ["n1"], 0, 10)
        assert reader.pod("u1") is None
    index = ElasticsearchIndex(ElasticSettings([server.url]))
    index.write(_records(1))
    server.crash()  # the cluster goes away
    for read in (index.counts, index.used_bytes, lambda: index.get([1]), index.experiments, lambda: index.write(_records(1, start=5))):  # fmt: skip
        with pytest.raises(IndexProblem, match=f"cannot reach Elasticsearch at {server.url}"):
            read()
    with pytest.raises(IndexProblem, match="cannot reach"):
        index.close()  # its last refresh fails, and says so


def test_failed_deletes_are_not_counted_and_end_the_loop(
    server: ElasticStandin, index: ElasticsearchIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(elastic, "_RETRY_WAITS", (0.0,) * 5)
    index.write(_records(10))
    server.throttle_items(1_000)  # every delete is refused, again and again
    with pytest.raises(IndexProblem, match="kept refusing"):
        index.drop("log.error", 10**12, 100)
    server.throttle_items(0)
    assert index.kinds() == {"log.error": 10}
    server.throttle_items(3)  # a few refused once: sent again, all go
    assert index.drop("log.error", 10**12, 100) == 10


def test_destroy_then_close(server: ElasticStandin) -> None:
    index = ElasticsearchIndex(ElasticSettings([server.url]))
    index.write(_records(1))
    index.destroy()
    index.close()  # nothing left to refresh
    assert not any(name.startswith("whyjob-") for name in server.indices)


def test_an_older_bindings_index_gets_the_cluster_field(server: ElasticStandin) -> None:
    from elasticsearch import Elasticsearch

    with Elasticsearch(server.url) as client:
        old = {k: v for k, v in elastic._MAPPINGS["bindings"].items() if k != "cluster"}
        client.indices.create(
            index="whyjob-bindings", mappings={"dynamic": "strict", "properties": old}
        )
    with ElasticsearchIndex(ElasticSettings([server.url])) as index:
        index.bind([Binding("node.instance", "n1", "i-1", 1, 2, cluster="A")])
        assert [b.cluster for b in index.bindings("node.instance", subjects=["n1"])] == ["A"]


def test_the_standin_sorts_missing_values_last_and_limits_the_window(
    server: ElasticStandin,
) -> None:
    from elasticsearch import BadRequestError, Elasticsearch

    with Elasticsearch(server.url) as client:
        client.bulk(
            operations=[
                line
                for n in range(3)
                for line in ({"index": {"_index": "t", "_id": str(n)}}, {"v": n} if n else {})
            ],
            refresh=True,
        )
        for order in ("asc", "desc"):
            hits = client.search(index="t", sort=[{"v": order}])["hits"]["hits"]
            assert hits[-1]["_id"] == "0"  # the document without `v`, last either way
        with pytest.raises(BadRequestError, match="Result window is too large"):
            client.search(index="t", size=10_001)


def test_an_import_rejects_alone_a_record_no_mending_makes_storable(
    index: ElasticsearchIndex, tmp_path: Path
) -> None:
    """`whyjob ingest` into Elasticsearch: an event naming a pod by a 40,000-byte name cannot be
    stored whatever is mended; it is quarantined alone and the file's other records go in."""
    import json

    def event(n: int, pod: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "BackOff",
            "message": f"Back-off restarting failed container {n}", "count": 1,
            "metadata": {"name": f"e{n}", "namespace": "ml", "uid": f"uid-e{n}"},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": "ml", "uid": f"uid-p{n}"},
            "firstTimestamp": f"2026-03-04T10:0{n}:00Z", "lastTimestamp": f"2026-03-04T10:0{n}:00Z",
        }  # fmt: skip

    path = tmp_path / "events.json"
    events = [event(1, "run-0"), event(2, "p" * 40_000), event(3, "run-1")]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": events}))
    summary = Ingestor(index, IngestOptions()).ingest([str(path)])
    # The event and the view of its pod are refused; the other two events and pods stored.
    assert (summary.total("stored"), summary.total("rejected"), summary.exit_code) == (2, 2, 1)
    assert all("immense term" in entry[4] for entry in index.quarantined())
    assert index.pod("uid-p1") is not None and index.pod("uid-p3") is not None
    assert index.pod("uid-p2") is None


def test_the_writer_waits_out_a_cluster_that_pushes_back_longer_than_its_retries(
    server: ElasticStandin,
) -> None:
    with ElasticsearchIndex(ElasticSettings([server.url])) as index:
        said: list[str] = []
        health = Health(on_error=lambda _, message: said.append(message))
        writer = Writer(index, health).start()
        server.throttle(8)  # more 429s than the client's retries: the write fails once
        writer.put(Batch("k8s", "events", list(_records(3)), {"k8s/events": "rv-1"}))
        writer.flush()
        writer.stop()
        assert writer.failed is None
        assert (
            index.checkpoint("k8s/events") == "rv-1"
            and len(index.get([ev.id for ev in _records(3)])) == 3
        )
        assert any("index unavailable, retrying" in message for message in said)
