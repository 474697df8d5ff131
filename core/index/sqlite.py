"""The embedded index: one SQLite file in WAL mode.

WAL lets `whyjob explain` read while `whyjob ingest` or a collector writes. Writes go in
batches inside one transaction; the deterministic evidence id is the rowid, so
`INSERT OR IGNORE` is both the insert and the dedup check.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from whyjob.core.entities import Binding, ExperimentRecord, PodRecord
from whyjob.core.errors import IndexLocked, IndexProblem, IndexTooNew
from whyjob.core.evidence import Evidence
from whyjob.core.index.base import Index
from whyjob.core.index.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["FLEET_KINDS", "QuarantineRow", "SqliteIndex"]

# The kinds the fleet view reads across experiments, as listed by the partial index
# `evidence_fleet` (schema V3); the query must name the same list to use it.
FLEET_KINDS = ("gpu.xid", "node.condition")

_EVIDENCE_COLUMNS = (
    "id, ts, ts_end, source, kind, severity, cluster, namespace, experiment, pod, pod_uid, "
    "container, node, instance_id, gpu_uuid, asg, message, attrs, origin"
)
_INSERT_EVIDENCE = (
    f"INSERT INTO evidence (seq, {_EVIDENCE_COLUMNS}) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO NOTHING"
)
_SEARCH_CHUNK = 200_000
# The highest `seq` given, kept when retention may drop the row that had it.
_SEQ_MARK = "evidence.seq"
# The columns an entity query may filter on; each has a partial index (schema.py).
_ENTITY_COLUMNS = frozenset({"node", "instance_id", "gpu_uuid", "asg", "pod", "experiment"})
# SQLite's default limit on bound parameters is 32766; stay far below it.
_CHUNK = 500


class QuarantineRow(tuple[int, int, str, str | None, str, bytes | None]):
    """(id, at, origin, format, reason, body) of one rejected record."""


# Read in the order of Evidence's fields (raw stays in its own table: NULL here), so a row
# becomes a record positionally: three times cheaper than by keyword, on the explain hot path.
_READ_COLUMNS = (
    "id, ts, source, kind, message, severity, ts_end, cluster, namespace, experiment, pod, "
    "pod_uid, container, node, instance_id, gpu_uuid, asg, attrs, NULL, origin"
)
_READ_COLUMNS_E = ", ".join(
    f"e.{c.strip()}" if c.strip() != "NULL" else "NULL" for c in _READ_COLUMNS.split(",")
)


def _row_to_evidence(row: tuple[Any, ...]) -> Evidence:
    ev = Evidence(*row)
    ev.attrs = orjson.loads(row[17]) if row[17] else {}
    return ev


def _chunks(values: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start : start + _CHUNK]


class SqliteIndex:
    """An open index file. Not thread-safe: one instance per thread or process."""

    def __init__(
        self,
        path: Path,
        *,
        readonly: bool = False,
        busy_timeout_s: float = 30.0,
        cache_mib: int = 64,
        mmap_mib: int = 256,
    ):
        """`cache_mib` and `mmap_mib` bound the page cache and the memory-mapped part of the
        file: generous for a reader answering queries, small for a long-running collector,
        whose resident memory would otherwise grow with the file."""
        self.path = path
        self.readonly = readonly
        self._cache_mib, self._mmap_mib = cache_mib, mmap_mib
        if readonly and not path.exists():
            raise IndexProblem(
                f"no index at {path}: ingest something first (`whyjob ingest PATH`) "
                "or point --index / WHYJOB_INDEX at an existing one"
            )
        if not readonly:
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(
                path, isolation_level=None, timeout=busy_timeout_s, check_same_thread=False
            )
            self._configure()
            if not readonly:
                self._migrate()
            else:
                self._check_version()
        except sqlite3.DatabaseError as exc:
            raise IndexProblem(f"{path} is not a usable whyjob index: {exc}") from None

    # -- lifecycle ---------------------------------------------------------------------------

    def _configure(self) -> None:
        db = self._db
        db.execute("PRAGMA busy_timeout = 30000")
        if not self.readonly:
            # 16 KiB pages: an import appends rows and raw bodies; bigger pages mean fewer
            # splits. Only takes effect on a new file, before WAL mode is set.
            if self._version() == 0:
                db.execute("PRAGMA page_size = 16384")
                # Space freed by retention can be handed back without a blocking VACUUM.
                db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            db.execute("PRAGMA journal_mode = WAL")
            # Checkpoint the WAL every ~256 MiB instead of every 4 MiB: an import writes in big
            # batches, and each checkpoint copies pages into the file a second time.
            db.execute("PRAGMA wal_autocheckpoint = 16000")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA temp_store = MEMORY")
        db.execute(f"PRAGMA cache_size = -{self._cache_mib * 1024}")
        db.execute(f"PRAGMA mmap_size = {self._mmap_mib * 1024 * 1024}")
        if self.readonly:
            db.execute("PRAGMA query_only = ON")

    def _version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def _check_version(self) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            raise IndexTooNew(
                f"{self.path} has schema version {version}; this whyjob reads up to "
                f"{SCHEMA_VERSION}. Upgrade whyjob."
            )
        if version < SCHEMA_VERSION and os.access(self.path, os.W_OK):
            # A reader of an index an older whyjob wrote brings it forward once, as a writer
            # would: after an upgrade, `whyjob explain` works without an import first.
            SqliteIndex(self.path).close()
            return
        if version < SCHEMA_VERSION:
            raise IndexProblem(
                f"{self.path} has schema version {version} and needs migrating to "
                f"{SCHEMA_VERSION}: run any writing command (e.g. `whyjob ingest`) once"
            )

    def _migrate(self) -> None:
        version = self._version()
        if version > SCHEMA_VERSION:
            self._check_version()
        for number in range(version, SCHEMA_VERSION):
            # executescript commits whatever is open first, so the transaction is in the script.
            try:
                self._db.executescript(
                    f"BEGIN IMMEDIATE;\n{MIGRATIONS[number]}\n"
                    f"PRAGMA user_version = {number + 1};\nCOMMIT;"
                )
            except sqlite3.Error:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SqliteIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction; nested calls join the outer one."""
        if self._db.in_transaction:
            yield
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc):
                raise IndexLocked(
                    f"{self.path} is locked by another writer (tried for 30 s)"
                ) from None
            raise
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # -- writing -----------------------------------------------------------------------------

    def write(self, records: Iterable[Evidence]) -> int:
        """Store records; returns how many were new (the rest were already there).

        Rows are numbered from the highest `seq` ever given (never reused, even after
        retention dropped the newest rows: the full-text index and the derived documents
        count on it growing) and inserted with ON CONFLICT (id) DO
        NOTHING, so the unique index on `id` both deduplicates and finds the duplicates (a
        separate lookup cost 5 us a record). A duplicate leaves a gap in `seq`; raw bodies go
        under the `seq` of the rows that were inserted.
        """
        batch: dict[int, Evidence] = {}
        for ev in records:
            batch.setdefault(ev.id, ev)
        if not batch:
            return 0
        db = self._db
        with self.transaction():
            start = self.last_seq() + 1
            dumps = orjson.dumps
            stored = db.executemany(
                _INSERT_EVIDENCE,
                [
                    (
                        start + n,
                        ev.id,
                        ev.ts,
                        ev.ts_end,
                        ev.source,
                        ev.kind,
                        int(ev.severity),
                        ev.cluster,
                        ev.namespace,
                        ev.experiment,
                        ev.pod,
                        ev.pod_uid,
                        ev.container,
                        ev.node,
                        ev.instance_id,
                        ev.gpu_uuid,
                        ev.asg,
                        ev.message,
                        dumps(ev.attrs).decode() if ev.attrs else None,
                        ev.origin,
                    )
                    for n, ev in enumerate(batch.values())
                ],
            ).rowcount  # rows inserted; not total_changes, a 32-bit count that wraps
            if stored == len(batch):
                db.executemany(
                    "INSERT INTO raw (seq, body) VALUES (?, ?)",
                    [
                        (start + n, ev.raw)
                        for n, ev in enumerate(batch.values())
                        if ev.raw is not None
                    ],
                )
            elif stored:
                db.executemany(
                    "INSERT INTO raw (seq, body) SELECT ?1, ?2 "
                    "WHERE EXISTS (SELECT 1 FROM evidence WHERE seq = ?1)",
                    [
                        (start + n, ev.raw)
                        for n, ev in enumerate(batch.values())
                        if ev.raw is not None
                    ],
                )
        return stored

    def sync_search(self) -> int:
        """Bring the full-text index up to date; returns how many records it added."""
        done = int(self.checkpoint("search.seq") or 0)
        last = int(self._db.execute("SELECT coalesce(max(seq), 0) FROM evidence").fetchone()[0])
        if done > self.last_seq():
            # Written by a whyjob that reused numbers after retention: the full-text index no
            # longer matches the table, so it is built again from the table.
            with self.transaction():
                self._db.execute("INSERT INTO evidence_fts (evidence_fts) VALUES ('rebuild')")
                self.set_checkpoint("search.seq", str(last))
            return last
        added = 0
        while done < last:
            upto = min(last, done + _SEARCH_CHUNK)
            with self.transaction():
                added += self._db.execute(
                    "INSERT INTO evidence_fts (rowid, message) "
                    "SELECT seq, message FROM evidence WHERE seq > ? AND seq <= ?",
                    (done, upto),
                ).rowcount
                self.set_checkpoint("search.seq", str(upto))
            done = upto
        return added

    def search_backlog(self) -> int:
        """Records not yet in the full-text index."""
        done = int(self.checkpoint("search.seq") or 0)
        # Counted, not max(seq) - done: a batch with known records leaves gaps in seq.
        return int(
            self._db.execute("SELECT count(*) FROM evidence WHERE seq > ?", (done,)).fetchone()[0]
        )

    def bind(self, bindings: Iterable[Binding]) -> None:
        rows = [
            (
                b.kind,
                b.subject,
                b.object,
                b.first_ts,
                b.last_ts,
                orjson.dumps(b.attrs).decode() if b.attrs else None,
                b.cluster or "",
            )
            for b in bindings
        ]
        if not rows:
            return
        with self.transaction():
            self._db.executemany(
                "INSERT INTO bindings (kind, subject, object, first_ts, last_ts, attrs, cluster) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (kind, subject, object, cluster) DO UPDATE SET "
                "first_ts = min(first_ts, excluded.first_ts), "
                "last_ts = max(last_ts, excluded.last_ts), "
                "attrs = coalesce(excluded.attrs, attrs)",
                rows,
            )

    def upsert_pods(self, pods: Iterable[PodRecord]) -> None:
        """Merge views of pods: the newest view wins for state, the widest for time."""
        rows = [
            (
                p.uid,
                p.namespace,
                p.name,
                p.experiment,
                p.launcher,
                p.label,
                p.rank,
                p.job_attempt,
                p.node,
                p.created,
                p.deleted,
                p.phase,
                p.gpus,
                orjson.dumps(p.labels).decode() if p.labels else None,
                p.seen,
                p.seen,
                p.cluster,
            )
            for p in pods
        ]
        if not rows:
            return
        newer = "excluded.last_seen >= pods.last_seen"
        with self.transaction():
            self._db.executemany(
                "INSERT INTO pods (uid, namespace, name, experiment, launcher, label, rank, "
                "job_attempt, node, created, deleted, phase, gpus, labels, first_seen, last_seen, "
                "cluster) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT (uid) DO UPDATE SET "
                "cluster = coalesce(excluded.cluster, cluster), "
                "experiment = coalesce(excluded.experiment, experiment), "
                "launcher = coalesce(excluded.launcher, launcher), "
                "label = coalesce(excluded.label, label), "
                "rank = coalesce(excluded.rank, rank), "
                "job_attempt = coalesce(excluded.job_attempt, job_attempt), "
                "node = coalesce(excluded.node, node), "
                "created = coalesce(min(excluded.created, created), excluded.created, created), "
                "deleted = coalesce(excluded.deleted, deleted), "
                f"phase = CASE WHEN {newer} THEN coalesce(excluded.phase, phase) "
                "ELSE coalesce(phase, excluded.phase) END, "
                "gpus = coalesce(excluded.gpus, gpus), "
                "labels = coalesce(excluded.labels, labels), "
                "first_seen = min(first_seen, excluded.first_seen), "
                "last_seen = max(last_seen, excluded.last_seen)",
                rows,
            )
            # Experiments from the merged rows, not the views: a view without a cluster or an
            # experiment leaves the pod's own, and the span is every pod's, min to max.
            merged: list[tuple[Any, ...]] = []
            for chunk in _chunks([row[0] for row in rows]):
                marks = ",".join("?" * len(chunk))
                merged += self._db.execute(
                    "SELECT namespace, experiment, coalesce(cluster, ''), "
                    "coalesce(max(launcher), ''), coalesce(max(label), ''), min(first_seen), "
                    f"max(last_seen) FROM pods WHERE uid IN ({marks}) AND experiment IS NOT NULL "
                    "GROUP BY 1, 2, 3",
                    chunk,
                ).fetchall()
            self._db.executemany(
                "INSERT INTO experiments (namespace, name, cluster, launcher, label, first_seen, "
                "last_seen) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (name, namespace, cluster) DO UPDATE SET "
                "first_seen = min(first_seen, excluded.first_seen), "
                "last_seen = max(last_seen, excluded.last_seen)",
                merged,
            )

    def quarantine(
        self, origin: str, reason: str, body: bytes | None, fmt: str | None = None
    ) -> None:
        with self.transaction():
            self._db.execute(
                "INSERT INTO quarantine (at, origin, format, reason, body) VALUES (?,?,?,?,?)",
                (int(time.time() * 1000), origin, fmt, reason, body),
            )

    def record_import(
        self, origin: str, fmt: str, read: int, stored: int, duplicate: int, rejected: int
    ) -> None:
        with self.transaction():
            self._db.execute(
                "INSERT INTO imports (at, origin, format, read, stored, duplicate, rejected) "
                "VALUES (?,?,?,?,?,?,?)",
                (int(time.time() * 1000), origin, fmt, read, stored, duplicate, rejected),
            )

    def set_checkpoint(self, source: str, token: str) -> None:
        with self.transaction():
            self._db.execute(
                "INSERT INTO checkpoints (source, token, updated) VALUES (?, ?, ?) "
                "ON CONFLICT (source) DO UPDATE SET token = excluded.token, "
                "updated = excluded.updated",
                (source, token, int(time.time() * 1000)),
            )

    def checkpoint(self, source: str) -> str | None:
        row = self._db.execute(
            "SELECT token FROM checkpoints WHERE source = ?", (source,)
        ).fetchone()
        return str(row[0]) if row else None

    def checkpoints(self, prefix: str = "") -> dict[str, str]:
        """Every resume token whose source starts with `prefix`."""
        rows = self._db.execute(
            "SELECT source, token FROM checkpoints WHERE substr(source, 1, ?) = ?",
            (len(prefix), prefix),
        )
        return {str(source): str(token) for source, token in rows}

    # -- reading -----------------------------------------------------------------------------

    def get(self, ids: Sequence[int]) -> list[Evidence]:
        out: list[Evidence] = []
        for chunk in _chunks(list(ids)):
            marks = ",".join("?" * len(chunk))
            out.extend(
                _row_to_evidence(row)
                for row in self._db.execute(
                    f"SELECT {_READ_COLUMNS} FROM evidence WHERE id IN ({marks})", chunk
                )
            )
        return sorted(out, key=lambda ev: (ev.ts, ev.id))

    def raw(self, evidence_id: int) -> bytes | None:
        row = self._db.execute(
            "SELECT r.body FROM raw r JOIN evidence e ON e.seq = r.seq WHERE e.id = ?",
            (evidence_id,),
        ).fetchone()
        return bytes(row[0]) if row else None

    def experiments(
        self,
        name: str | None = None,
        namespace: str | None = None,
        limit: int = 1000,
        *,
        cluster: str | None = None,
    ) -> list[ExperimentRecord]:
        clauses, params = [], []
        for column, value in (("name", name), ("namespace", namespace), ("cluster", cluster)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._db.execute(
            "SELECT namespace, name, launcher, label, first_seen, last_seen, cluster "
            f"FROM experiments {where} ORDER BY last_seen DESC LIMIT ?",
            [*params, limit],
        )
        return [ExperimentRecord(*row) for row in rows]

    _POD_COLUMNS = (
        "uid, namespace, name, experiment, launcher, label, rank, job_attempt, node, created, "
        "deleted, phase, gpus, labels, last_seen, cluster"
    )

    def _pods(
        self, where: str, params: Sequence[Any], order: str = "created, name"
    ) -> list[PodRecord]:
        rows = self._db.execute(
            f"SELECT {self._POD_COLUMNS} FROM pods WHERE {where} ORDER BY {order}", params
        )
        return [
            PodRecord(
                uid=r[0],
                namespace=r[1],
                name=r[2],
                experiment=r[3],
                launcher=r[4],
                label=r[5],
                rank=r[6],
                job_attempt=r[7],
                node=r[8],
                created=r[9],
                deleted=r[10],
                phase=r[11],
                gpus=r[12],
                labels=orjson.loads(r[13]) if r[13] else {},
                seen=r[14],
                cluster=r[15],
            )
            for r in rows
        ]

    def experiment_pods(
        self, name: str, namespace: str, cluster: str | None = None
    ) -> list[PodRecord]:
        """An experiment's pods; with `cluster` ("" for none named), that cluster's only."""
        if cluster is None:
            return self._pods("experiment = ? AND namespace = ?", (name, namespace))
        return self._pods(
            "experiment = ? AND namespace = ? AND coalesce(cluster, '') = ?",
            (name, namespace, cluster),
        )

    def pods_named_like(
        self, prefix: str, namespace: str | None = None, cluster: str | None = None
    ) -> list[PodRecord]:
        """Pods whose name starts with `prefix-`: the fallback when no labels were captured."""
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "-%"
        where, params = "name LIKE ? ESCAPE '\\'", [pattern]
        if namespace is not None:
            where, params = where + " AND namespace = ?", [*params, namespace]
        if cluster is not None:
            where, params = where + " AND coalesce(cluster, '') = ?", [*params, cluster]
        return self._pods(where, params)

    def pod(self, uid: str) -> PodRecord | None:
        """One pod incarnation by its uid."""
        found = self._pods("uid = ?", (uid,))
        return found[0] if found else None

    def pods_on_node(self, node: str, t0: int, t1: int, limit: int = 500) -> list[PodRecord]:
        """Pods seen on a node between t0 and t1, newest first."""
        return self._pods(
            "node = ? AND last_seen >= ? AND first_seen <= ?",
            (node, t0, t1),
            order=f"last_seen DESC LIMIT {int(limit)}",
        )

    def pod_evidence(self, uids: Sequence[str], t0: int, t1: int) -> list[Evidence]:
        """Everything about these pods in [t0, t1] except plain log lines."""
        out: list[Evidence] = []
        for uid in uids:
            out.extend(
                _row_to_evidence(row)
                for row in self._db.execute(
                    f"SELECT {_READ_COLUMNS} FROM evidence WHERE pod_uid = ? "
                    "AND kind <> 'log.line' AND ts BETWEEN ? AND ?",
                    (uid, t0, t1),
                )
            )
        return out

    def log_tail(self, uid: str, container: str, until: int, limit: int) -> list[Evidence]:
        """The last `limit` plain log lines of a container at or before `until`, oldest first."""
        rows = self._db.execute(
            f"SELECT {_READ_COLUMNS} FROM evidence WHERE pod_uid = ? AND container = ? "
            "AND kind = 'log.line' AND ts <= ? ORDER BY ts DESC, id DESC LIMIT ?",
            (uid, container, until, limit),
        ).fetchall()
        return [_row_to_evidence(row) for row in reversed(rows)]

    def entity_evidence(
        self, column: str, values: Iterable[str], t0: int, t1: int
    ) -> list[Evidence]:
        """Records about a node, instance, GPU, ASG or uid-less pod in [t0, t1]."""
        if column not in _ENTITY_COLUMNS:
            raise ValueError(f"not an entity column: {column}")
        out: list[Evidence] = []
        for value in sorted(set(values)):
            out.extend(
                _row_to_evidence(row)
                for row in self._db.execute(
                    f"SELECT {_READ_COLUMNS} FROM evidence WHERE {column} = ? "
                    "AND pod_uid IS NULL AND ts BETWEEN ? AND ?",
                    (value, t0, t1),
                )
            )
        return out

    def bindings(
        self,
        kind: str,
        *,
        subjects: Iterable[str] = (),
        objects: Iterable[str] = (),
        cluster: str | None = None,
    ) -> list[Binding]:
        out: list[Binding] = []
        mine = "" if cluster is None else " AND cluster IN ('', ?)"
        for column, values in (("subject", subjects), ("object", objects)):
            for chunk in _chunks(sorted(set(values))):
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    "SELECT kind, subject, object, first_ts, last_ts, attrs, cluster "
                    f"FROM bindings WHERE kind = ? AND {column} IN ({marks}){mine}",
                    [kind, *chunk, *([] if cluster is None else [cluster])],
                )
                out.extend(
                    Binding(
                        r[0], r[1], r[2], r[3], r[4], orjson.loads(r[5]) if r[5] else None, r[6]
                    )
                    for r in rows
                )
        return out

    def fleet_records(self, t0: int, t1: int) -> list[Evidence]:
        """Every GPU fault and node condition in [t0, t1], whichever experiment they touched."""
        kinds = ", ".join(f"'{kind}'" for kind in FLEET_KINDS)
        rows = self._db.execute(
            f"SELECT {_READ_COLUMNS} FROM evidence WHERE kind IN ({kinds}) "
            "AND ts BETWEEN ? AND ? ORDER BY ts",
            (t0, t1),
        )
        return [_row_to_evidence(row) for row in rows]

    def node_spans(self, t0: int, t1: int) -> dict[str, tuple[int, int]]:
        """Each node's first and last sighting of a pod on it, within [t0, t1]."""
        rows = self._db.execute(
            "SELECT node, max(min(first_seen), ?), min(max(last_seen), ?) FROM pods "
            "WHERE node IS NOT NULL AND last_seen >= ? AND first_seen <= ? GROUP BY node",
            (t0, t1, t0, t1),
        )
        return {str(r[0]): (int(r[1]), int(r[2])) for r in rows}

    def node_labels(self, nodes: Iterable[str], until: int) -> dict[str, dict[str, str]]:
        """Each node's labels from its last snapshot at or before `until`."""
        out: dict[str, dict[str, str]] = {}
        for node in sorted(set(nodes)):
            row = self._db.execute(
                "SELECT attrs FROM evidence WHERE node = ? AND pod_uid IS NULL "
                "AND kind = 'node.snapshot' AND ts <= ? ORDER BY ts DESC LIMIT 1",
                (node, until),
            ).fetchone()
            labels = (orjson.loads(row[0]) or {}).get("labels") if row and row[0] else None
            if isinstance(labels, dict):
                out[node] = {str(k): str(v) for k, v in labels.items()}
        return out

    def last_seq(self) -> int:
        """The highest insertion number given (0 when none): the newest record's, or the one
        retention last dropped (kept as `evidence.seq`, so the counter never goes down)."""
        newest = int(self._db.execute("SELECT coalesce(max(seq), 0) FROM evidence").fetchone()[0])
        return max(newest, int(self.checkpoint(_SEQ_MARK) or 0))

    def hours_written_after(self, seq: int) -> set[int]:
        """The hours (ts // 3,600,000) of the records inserted after `seq`: what they touch."""
        rows = self._db.execute(
            "SELECT DISTINCT ts / 3600000 FROM evidence WHERE seq > ?", (seq,)
        ).fetchall()
        return {int(row[0]) for row in rows}

    def derived(self, kind: str) -> dict[str, tuple[str, int, bytes]]:
        """Every derived document of a kind: key -> (stamp, seq it had seen, body)."""
        rows = self._db.execute(
            "SELECT key, stamp, made, body FROM derived WHERE kind = ?", (kind,)
        ).fetchall()
        return {str(r[0]): (str(r[1]), int(r[2]), bytes(r[3])) for r in rows}

    def put_derived(self, kind: str, documents: Iterable[tuple[str, str, int, bytes]]) -> None:
        """Store (key, stamp, seq seen, body) documents of a kind, replacing older ones."""
        with self.transaction():
            self._db.executemany(
                "INSERT OR REPLACE INTO derived (kind, key, stamp, made, body) "
                "VALUES (?, ?, ?, ?, ?)",
                [(kind, *document) for document in documents],
            )

    # -- retention -----------------------------------------------------------------------------

    def expiring(self, cutoffs: Mapping[str, int]) -> dict[str, tuple[int, int | None]]:
        """For each kind, its records older than its cutoff and the oldest's time (each count
        a range of the evidence_kind index)."""
        out: dict[str, tuple[int, int | None]] = {}
        for kind, before in sorted(cutoffs.items()):
            count, oldest = self._db.execute(
                "SELECT count(*), min(ts) FROM evidence WHERE kind = ? AND ts < ?", (kind, before)
            ).fetchone()
            if count:
                out[kind] = (int(count), oldest)
        return out

    def drop(self, kind: str, before: int, limit: int) -> int:
        """Delete up to `limit` of the oldest records of `kind` older than `before`, their raw
        bodies and their full-text entries, in one short transaction."""
        with self.transaction():
            rows = self._db.execute(
                "SELECT seq FROM evidence WHERE kind = ? AND ts < ? ORDER BY ts LIMIT ?",
                (kind, before, limit),
            ).fetchall()
            if not rows:
                return 0
            seqs = [row[0] for row in rows]
            self.set_checkpoint(_SEQ_MARK, str(self.last_seq()))  # it may be the newest row
            indexed = int(self.checkpoint("search.seq") or 0)
            for chunk in _chunks(seqs):
                marks = ",".join("?" * len(chunk))
                # An external-content FTS table forgets a row only when told its old text.
                self._db.execute(
                    "INSERT INTO evidence_fts (evidence_fts, rowid, message) "
                    f"SELECT 'delete', seq, message FROM evidence WHERE seq IN ({marks}) "
                    "AND seq <= ?",
                    [*chunk, indexed],
                )
                self._db.execute(f"DELETE FROM raw WHERE seq IN ({marks})", chunk)
                self._db.execute(f"DELETE FROM evidence WHERE seq IN ({marks})", chunk)
        return len(seqs)

    def used_bytes(self) -> int:
        page, pages, free = (
            int(self._db.execute(f"PRAGMA {name}").fetchone()[0])
            for name in ("page_size", "page_count", "freelist_count")
        )
        return page * (pages - free)

    def release_free_pages(self) -> int:
        """With auto_vacuum=INCREMENTAL (every index made since schema v5), hand free pages
        back in steps of 2,048, each its own write; an older file keeps them for reuse."""
        if int(self._db.execute("PRAGMA auto_vacuum").fetchone()[0]) != 2:
            return 0
        before = int(self._db.execute("PRAGMA page_count").fetchone()[0])
        while free := int(self._db.execute("PRAGMA freelist_count").fetchone()[0]):
            # The pragma frees a page per step of its statement: read it to the end.
            self._db.execute(f"PRAGMA incremental_vacuum({min(free, 2048)})").fetchall()
        return before - int(self._db.execute("PRAGMA page_count").fetchone()[0])

    def search(self, query: str, limit: int = 50) -> list[Evidence]:
        """Full-text search over messages (SQLite FTS5 query syntax), newest first. Covers what
        `sync_search` has indexed."""
        try:
            rows = self._db.execute(
                f"SELECT {_READ_COLUMNS_E} "
                "FROM evidence_fts f JOIN evidence e ON e.seq = f.rowid "
                "WHERE evidence_fts MATCH ? ORDER BY e.ts DESC LIMIT ?",
                (query, limit),
            ).fetchall()
        except sqlite3.OperationalError as exc:
            raise IndexProblem(f"bad search query {query!r}: {exc}") from None
        return [_row_to_evidence(row) for row in rows]

    def quarantined(self, limit: int = 100) -> list[QuarantineRow]:
        rows = self._db.execute(
            "SELECT id, at, origin, format, reason, body FROM quarantine ORDER BY id DESC LIMIT ?",
            (limit,),
        )
        return [QuarantineRow(row) for row in rows]

    def counts(self) -> dict[str, int]:
        """Row counts per table (the evidence count is exact, from the rowid index)."""
        out = {}
        for table in ("evidence", "pods", "experiments", "bindings", "quarantine", "imports"):
            out[table] = int(self._db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        return out

    def kinds(self) -> dict[str, int]:
        rows = self._db.execute(
            "SELECT kind, count(*) FROM evidence INDEXED BY evidence_kind GROUP BY kind "
            "ORDER BY 2 DESC"
        )
        return {str(k): int(n) for k, n in rows}

    def time_range(self) -> tuple[int | None, int | None]:
        row = self._db.execute("SELECT min(ts), max(ts) FROM evidence").fetchone()
        return (row[0], row[1])


def _keeps_the_contract(index: SqliteIndex) -> Index:
    """Never called: mypy checks here that SqliteIndex has every method of the contract."""
    return index
