from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from whyjob.core.entities import Binding, PodRecord
from whyjob.core.errors import IndexProblem, IndexTooNew
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.core.index.schema import SCHEMA_VERSION
from whyjob.core.index.sqlite import FLEET_KINDS


def _ev(n: int, **fields: object) -> Evidence:
    values: dict[str, object] = {"kind": "k8s.event", "message": f"message {n}", "node": "node-a"}
    values.update(fields)
    return Evidence(id=evidence_id("test", str(n)), ts=1_000 + n, source="test", **values)  # type: ignore[arg-type]


def test_write_is_idempotent_and_counts_new_rows(index: SqliteIndex) -> None:
    records = [_ev(n) for n in range(100)]
    assert index.write(records) == 100
    assert index.write(records) == 0
    assert index.write([*records[:10], _ev(100)]) == 1
    assert index.counts()["evidence"] == 101


def test_raw_bodies_stay_with_their_records_when_a_batch_is_partly_known(
    index: SqliteIndex,
) -> None:
    def body(n: int, version: str) -> bytes:
        return f'{{"n": {n}, "v": "{version}"}}'.encode()

    assert index.write([_ev(n, raw=body(n, "first")) for n in range(0, 10, 2)]) == 5
    # Interleaved known and new records: the new ones leave gaps in seq, not shifted bodies.
    assert index.write([_ev(n, raw=body(n, "second")) for n in range(10)]) == 5
    for n in range(10):
        assert index.raw(evidence_id("test", str(n))) == body(
            n, "first" if n % 2 == 0 else "second"
        )
    assert index.counts()["evidence"] == 10
    (orphans,) = index._db.execute(
        "SELECT count(*) FROM raw WHERE seq NOT IN (SELECT seq FROM evidence)"
    ).fetchone()
    assert orphans == 0


def test_round_trip_keeps_every_field_and_the_raw_record(index: SqliteIndex) -> None:
    ev = _ev(
        1,
        ts_end=5000,
        pod="p",
        pod_uid="u1",
        container="c",
        attrs={"exit_code": 137, "nested": {"a": [1]}},
        raw=b'{"x": 1}',
        origin="f.json:3",
    )
    index.write([ev])
    (back,) = index.get([ev.id])
    assert (back.ts_end, back.pod_uid, back.attrs, back.origin) == (
        5000,
        "u1",
        {"exit_code": 137, "nested": {"a": [1]}},
        "f.json:3",
    )
    assert index.raw(ev.id) == b'{"x": 1}'


def test_entity_queries_use_time_windows(index: SqliteIndex) -> None:
    index.write([_ev(n, node="node-a" if n % 2 else "node-b") for n in range(50)])
    found = index.entity_evidence("node", ["node-a"], 1_010, 1_020)
    assert {ev.ts for ev in found} == {1_011, 1_013, 1_015, 1_017, 1_019}
    with pytest.raises(ValueError):
        index.entity_evidence("message", ["x"], 0, 1)


def test_pod_queries_keep_log_lines_apart(index: SqliteIndex) -> None:
    index.write(
        [
            _ev(1, pod_uid="u", container="c"),
            _ev(2, pod_uid="u", container="c", kind="log.line"),
            _ev(3, pod_uid="u", container="c", kind="log.line"),
        ]
    )
    assert [ev.ts for ev in index.pod_evidence(["u"], 0, 10_000)] == [1_001]
    assert [ev.ts for ev in index.log_tail("u", "c", 10_000, 5)] == [1_002, 1_003]
    assert [ev.ts for ev in index.log_tail("u", "c", 10_000, 1)] == [1_003]


def test_explain_queries_use_their_indexes(index: SqliteIndex) -> None:
    db = index._db
    plans = {
        "pod": "SELECT id FROM evidence WHERE pod_uid = 'u' AND kind <> 'log.line' AND ts BETWEEN 0 AND 1",
        "node": "SELECT id FROM evidence WHERE node = 'n' AND pod_uid IS NULL AND ts BETWEEN 0 AND 1",
        "tail": "SELECT id FROM evidence WHERE pod_uid = 'u' AND container = 'c' AND kind = 'log.line' AND ts <= 1 ORDER BY ts DESC LIMIT 5",
        "fleet": "SELECT id FROM evidence WHERE kind IN ("
        + ", ".join(f"'{kind}'" for kind in FLEET_KINDS)
        + ") AND ts BETWEEN 0 AND 1 ORDER BY ts",
    }
    for name, query in plans.items():
        plan = " ".join(str(row[-1]) for row in db.execute("EXPLAIN QUERY PLAN " + query))
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, (name, plan)
        assert "SCAN evidence" not in plan, (name, plan)


def test_full_text_search(index: SqliteIndex) -> None:
    index.write(
        [
            _ev(1, message="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."),
            _ev(2, message="Started container pytorch"),
        ]
    )
    assert index.search("pytorch") == [] and index.search_backlog() == 2  # indexed on demand
    assert index.sync_search() == 2 and index.sync_search() == 0
    assert [ev.ts for ev in index.search('"fallen off the bus"')] == [1_001]
    assert index.search("pytorch")[0].ts == 1_002
    with pytest.raises(IndexProblem, match="bad search query"):
        index.search('"unclosed')


def test_pods_merge_newest_state_and_widest_time(index: SqliteIndex) -> None:
    index.upsert_pods(
        [
            PodRecord(
                "u1",
                "ml",
                "job-worker-0",
                seen=100,
                experiment="job",
                launcher="PyTorchJob",
                label="l",
                phase="Running",
                created=50,
            )
        ]
    )
    index.upsert_pods([PodRecord("u1", "ml", "job-worker-0", seen=200, phase="Failed", node="n1")])
    index.upsert_pods([PodRecord("u1", "ml", "job-worker-0", seen=150, phase="Running")])
    (pod,) = index.experiment_pods("job", "ml")
    assert (pod.phase, pod.node, pod.created, pod.seen) == ("Failed", "n1", 50, 200)
    assert [e.name for e in index.experiments()] == ["job"]
    assert [p.uid for p in index.pods_named_like("job")] == ["u1"]
    assert index.pods_named_like("jo") == []  # a prefix must end at a dash


def test_bindings_widen_their_time_span(index: SqliteIndex) -> None:
    index.bind([Binding("pod.node", "u1", "n1", 100, 200)])
    index.bind(
        [Binding("pod.node", "u1", "n1", 50, 150), Binding("node.instance", "n1", "i-1", 0, 10)]
    )
    (binding,) = index.bindings("pod.node", subjects=["u1"])
    assert (binding.first_ts, binding.last_ts) == (50, 200)
    assert [b.subject for b in index.bindings("node.instance", objects=["i-1"])] == ["n1"]
    with pytest.raises(ValueError):
        Binding("pod.moon", "a", "b", 0, 0)


def test_quarantine_checkpoints_and_imports(index: SqliteIndex) -> None:
    index.quarantine("f.json:12", "truncated JSON document", b"{", "k8s")
    index.set_checkpoint("k8s/events", "rv-1")
    index.set_checkpoint("k8s/events", "rv-2")
    index.record_import("f.json", "k8s", 3, 2, 0, 1)
    (row,) = index.quarantined()
    assert row[2:5] == ("f.json:12", "k8s", "truncated JSON document")
    assert index.checkpoint("k8s/events") == "rv-2" and index.checkpoint("other") is None
    assert index.counts()["imports"] == 1


def test_readonly_open_refuses_missing_and_newer_indexes(tmp_path: Path) -> None:
    with pytest.raises(IndexProblem, match="no index at"):
        SqliteIndex(tmp_path / "missing.sqlite", readonly=True)
    path = tmp_path / "newer.sqlite"
    SqliteIndex(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(IndexTooNew, match="Upgrade whyjob"):
        SqliteIndex(path, readonly=True)
    with pytest.raises(IndexTooNew):
        SqliteIndex(path)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(IndexProblem, match="not a usable whyjob index"):
        SqliteIndex(garbage, readonly=True)


def test_a_reader_works_while_a_writer_holds_a_transaction(index_path: Path) -> None:
    writer = SqliteIndex(index_path)
    writer.write([_ev(n) for n in range(10)])
    reader = SqliteIndex(index_path, readonly=True)
    release = threading.Event()
    started = threading.Event()

    def hold() -> None:
        with writer.transaction():
            writer.write([_ev(n) for n in range(10, 20)])
            started.set()
            release.wait(5)

    thread = threading.Thread(target=hold)
    thread.start()
    started.wait(5)
    try:
        assert reader.counts()["evidence"] == 10  # WAL: the reader sees the last commit
    finally:
        release.set()
        thread.join()
    assert reader.counts()["evidence"] == 20
    reader.close()
    writer.close()


def test_search_counts_records_not_seq_numbers_across_gaps(index: SqliteIndex) -> None:
    index.write([_ev(n) for n in range(0, 10, 2)])
    index.write([_ev(n) for n in range(10)])  # five known: five gaps in seq
    assert index.search_backlog() == 10
    assert index.sync_search() == 10
    assert index.search_backlog() == 0


def test_reads_follow_the_evidence_field_order() -> None:
    """Rows become records positionally: the read columns must be Evidence's fields."""
    from dataclasses import fields

    from whyjob.core.index import sqlite as module

    columns = [c.strip() for c in module._READ_COLUMNS.split(",")]
    names = [f.name for f in fields(Evidence)]
    assert columns == [("NULL" if n == "raw" else n) for n in names]
