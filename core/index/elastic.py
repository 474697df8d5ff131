"""The index on Elasticsearch, through the official `elasticsearch` client: for teams with
several clusters and months of evidence, who already run it for their logs.

Indices (PREFIX defaults to `whyjob`), created with explicit mappings (keyword entity keys,
epoch-millisecond `date` times, `text` messages, `flattened` attributes):
`PREFIX-evidence` (one document per record, `_id` the 16-hex evidence id), `PREFIX-raw` (the
record as its source gave it), `PREFIX-pods`, `PREFIX-experiments`, `PREFIX-bindings`,
`PREFIX-checkpoints`, `PREFIX-imports`, `PREFIX-quarantine`, `PREFIX-derived`. A field a newer
whyjob maps is added to an existing index when a writer opens it.

- Records are written with `_bulk` `create` and their id as `_id`: writing one again is a 409,
  counted as a duplicate, so re-ingest is a no-op as on SQLite. Bodies are split at 10 MB
  (`http.max_content_length` is 100 MB; a 413 halves the body again). A 429 (the write queue
  full) is retried with back-off, by the client for the request and here for single items.
- A record the cluster will not hold (a 400 for its item: a value its mapping cannot parse, a
  keyword over 32,766 bytes; or one document over the body limit) raises `RecordRefused`, a
  ValueError as well, after the write is undone: the writers then store the rest and
  quarantine that record alone, as they do one SQLite cannot store.
- Pods, experiments and bindings merge views (the newest state, the widest time); each merge
  reads the current document and writes it back with `if_seq_no`/`if_primary_term`, and a 409
  (another writer in between) reads and merges again. An experiment is derived from its pods
  as stored after the merge, so a view that names no cluster never splits one.
- Reads are bool filters on keyword terms and time ranges; long ones page with a point in time
  and `search_after` (a lapsed point in time is reopened where the read was), and so does any
  read of more than `index.max_result_window` (10,000) hits.
- Search is near-real-time: this connection refreshes what it wrote before it reads, and a writer
  refreshes when it closes, so `whyjob ingest` then `whyjob explain` sees everything.
- The write counter is the writer's clock (`written`, epoch ns, read back exactly through a
  sort, never through a `max` aggregation, which is a double). Several writers, refresh delay
  and clock skew mean a record can become visible after a newer one: `last_seq` therefore
  never claims more than now minus `write_margin_ms`, and `hours_written_after` looks that far
  further back, so a freshness check recomputes a little too often, never too seldom.
- There are no multi-document transactions: see `transaction()` for what it does instead.
- Every failure reaches callers as `IndexProblem` naming the URL and the cause, whether the
  cluster answered (`ApiError`) or could not be reached (`TransportError`: connection refused,
  a timeout, TLS).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, Self, cast

import orjson

from whyjob.core.entities import Binding, ExperimentRecord, PodRecord
from whyjob.core.errors import IndexProblem
from whyjob.core.evidence import Evidence, format_id, parse_id
from whyjob.core.index.base import QuarantineEntry

__all__ = ["ElasticSettings", "ElasticsearchIndex", "RecordRefused"]

_PAGE = 5000
_WINDOW = 10_000  # index.max_result_window: from + size of one search, search_after or not
_TERMS = 10_000  # values in one terms query (index.max_terms_count is 65,536)
_BULK_BYTES = 10 * 1024 * 1024  # one _bulk body; http.max_content_length defaults to 100 MB
_RETRY_WAITS = (0.2, 0.4, 0.8, 1.6, 2.0)  # seconds before sending items refused with 429 again
# A checkpoint: the newest write stamp among records retention dropped, so the counter never
# goes down when the newest records are the ones dropped.
_WRITTEN_MARK = "evidence.written"
Action = tuple[dict[str, Any], dict[str, Any] | None]  # a bulk action and its source, if any
_KW = {"type": "keyword"}
_DATE = {"type": "date", "format": "epoch_millis"}
_LONG = {"type": "long"}
_STORED = {"type": "keyword", "index": False, "doc_values": False}
_ENTITY_COLUMNS = frozenset({"node", "instance_id", "gpu_uuid", "asg", "pod", "experiment"})
_MAPPINGS: Mapping[str, Mapping[str, Any]] = {
    "evidence": {
        "eid": _KW, "ts": _DATE, "ts_end": _DATE, "source": _KW, "kind": _KW,
        "severity": {"type": "short"}, "cluster": _KW, "namespace": _KW, "experiment": _KW,
        "pod": _KW, "pod_uid": _KW, "container": _KW, "node": _KW, "instance_id": _KW,
        "gpu_uuid": _KW, "asg": _KW, "message": {"type": "text"}, "attrs": {"type": "flattened"},
        "origin": _STORED, "written": _LONG, "hour": _LONG,
    },
    "raw": {"body": {"type": "binary"}},
    "pods": {
        "uid": _KW, "namespace": _KW, "name": _KW, "experiment": _KW, "launcher": _KW,
        "label": _KW, "rank": _KW, "job_attempt": _LONG, "node": _KW, "created": _DATE,
        "deleted": _DATE, "phase": _KW, "gpus": _LONG, "labels": {"type": "flattened"},
        "first_seen": _DATE, "last_seen": _DATE, "cluster": _KW,
    },
    "experiments": {
        "namespace": _KW, "name": _KW, "cluster": _KW, "launcher": _KW, "label": _KW,
        "first_seen": _DATE, "last_seen": _DATE,
    },
    "bindings": {
        "kind": _KW, "subject": _KW, "object": _KW, "first_ts": _DATE, "last_ts": _DATE,
        "attrs": {"type": "flattened"}, "cluster": _KW,
    },
    "checkpoints": {"source": _KW, "token": _STORED, "updated": _DATE},
    "imports": {"at": _DATE, "origin": _KW, "format": _KW, "read": _LONG, "stored": _LONG, "duplicate": _LONG, "rejected": _LONG},
    "quarantine": {"at": _DATE, "origin": _KW, "format": _KW, "reason": {"type": "text"}, "body": {"type": "binary"}, "n": _LONG},
    "derived": {"kind": _KW, "key": _KW, "stamp": _STORED, "made": _LONG, "body": {"type": "binary"}},
}  # fmt: skip
_EVIDENCE_FIELDS = (
    "ts", "ts_end", "source", "kind", "severity", "cluster", "namespace", "experiment", "pod",
    "pod_uid", "container", "node", "instance_id", "gpu_uuid", "asg", "message", "attrs", "origin",
)  # fmt: skip


class RecordRefused(IndexProblem, ValueError):
    """Elasticsearch will not hold one record, pod or binding (its bulk item answered 400, or
    it alone is over the body limit). A ValueError too, so it is in `collector.admit.REFUSED`:
    the writers store the rest and quarantine this one, as for a record SQLite cannot store.
    Only what is wrong with the record itself: a missing index or privilege (403, 404) is the
    index's problem, and quarantining every record for it would only hide that."""


@dataclass(frozen=True, slots=True)
class ElasticSettings:
    """Where and how to reach the cluster (the `index:` section of the config file)."""

    urls: list[str]
    api_key: str | None = None
    username: str | None = None
    password: str | None = None
    ca_certs: Path | None = None
    prefix: str = "whyjob"
    # How late a record may become searchable after its writer stamped it (by the reader's
    # clock): a bulk's retries (the client's 5, of up to 60 s each), the refresh interval (1 s)
    # and clock skew between hosts. `last_seq` stays this far behind now, and
    # `hours_written_after` looks this far behind the counter it is given, so a record is
    # seen if it shows within twice this of its stamp; for as long after a write, freshness
    # checks recompute what is near the hours written.
    write_margin_ms: int = 300_000


def _evidence_doc(ev: Evidence, written: int) -> dict[str, Any]:
    doc: dict[str, Any] = {"eid": format_id(ev.id), "written": written, "hour": ev.ts // 3_600_000}
    for name in _EVIDENCE_FIELDS:
        value = getattr(ev, name)
        if value is not None and value != {}:
            doc[name] = value
    return doc


def _evidence(doc_id: str, src: Mapping[str, Any]) -> Evidence:
    return Evidence(
        id=parse_id(doc_id),
        ts=src["ts"],
        source=src["source"],
        kind=src["kind"],
        message=src.get("message", ""),
        severity=src.get("severity", 20),
        ts_end=src.get("ts_end"),
        cluster=src.get("cluster"),
        namespace=src.get("namespace"),
        experiment=src.get("experiment"),
        pod=src.get("pod"),
        pod_uid=src.get("pod_uid"),
        container=src.get("container"),
        node=src.get("node"),
        instance_id=src.get("instance_id"),
        gpu_uuid=src.get("gpu_uuid"),
        asg=src.get("asg"),
        attrs=src.get("attrs") or {},
        origin=src.get("origin"),
    )


def _encode(action: Action) -> bytes:
    """One bulk item as NDJSON. orjson, as SQLite's columns use: a value it cannot encode (a
    key that is not text, an integer past 64 bits) raises TypeError, which the writers mend."""
    meta, source = action
    line = orjson.dumps(meta) + b"\n"
    return line if source is None else line + orjson.dumps(source) + b"\n"


def _chunked(items: Sequence[int], sizes: Sequence[int], limit: int) -> Iterator[list[int]]:
    """`items` in runs whose sizes add up to at most `limit` (an item over it alone)."""
    run: list[int] = []
    total = 0
    for n in items:
        if run and total + sizes[n] > limit:
            yield run
            run, total = [], 0
        run.append(n)
        total += sizes[n]
    if run:
        yield run


def _status(result: Mapping[str, Any]) -> int:
    return int(result.get("status") or 0)


class ElasticsearchIndex:
    """The index contract (core/index/base.py) on an Elasticsearch cluster. Like a SQLite
    connection, one instance is used by one thread at a time."""

    def __init__(self, settings: ElasticSettings, *, readonly: bool = False) -> None:
        from elasticsearch import Elasticsearch

        self.settings = settings
        self.path = Path(f"{settings.urls[0]}/{settings.prefix}-*")
        self.readonly = readonly
        self._prefix = settings.prefix
        self._url = settings.urls[0]
        self._dirty: set[str] = set()
        # The write stamp's clock (epoch ns); replaceable so tests can play several hosts.
        self._clock: Callable[[], int] = time.time_ns
        # Documents created inside the open transaction, deleted again if it fails.
        self._undo: list[tuple[str, str]] | None = None
        auth: dict[str, Any] = {}
        if settings.api_key:
            auth["api_key"] = settings.api_key
        elif settings.username:
            auth["basic_auth"] = (settings.username, settings.password or "")
        if settings.ca_certs:
            auth["ca_certs"] = str(settings.ca_certs)
        self._es = Elasticsearch(
            settings.urls,
            retry_on_status=(429, 502, 503, 504),
            max_retries=5,
            request_timeout=60,
            **auth,
        )
        with self._asking():
            info = self._es.info()
        major = int(str(info["version"]["number"]).split(".")[0])
        if major < 8:
            raise IndexProblem(
                f"Elasticsearch {info['version']['number']} at {self._url}: whyjob needs 8 or newer"
            )
        if not readonly:
            self._ensure_indices()

    # -- errors ----------------------------------------------------------------------------------

    @contextmanager
    def _asking(self) -> Iterator[None]:
        """Whatever goes wrong talking to the cluster, as an IndexProblem naming it."""
        from elasticsearch import ApiError, TransportError

        try:
            yield
        except (ApiError, TransportError) as exc:
            raise _problem(exc, self._url) from None

    def _fail(self, failed: Sequence[Mapping[str, Any]], what: str, *, record: bool) -> NoReturn:
        """Raise for bulk items that did not take: RecordRefused for a record the cluster will
        not hold (when `record`, and nothing else went wrong), IndexProblem for the rest."""
        others = [r for r in failed if _status(r) not in (400, 413)]
        first = others[0] if others else failed[0]
        status, reason = _status(first), _reason(first.get("error"))
        if status == 429:
            raise IndexProblem(
                f"Elasticsearch at {self._url} kept refusing {len(failed)} {what} writes with 429 "
                f"(its write queue stayed full): {reason}"
            )
        if record and status in (400, 413):
            raise RecordRefused(
                f"Elasticsearch at {self._url} refused {what} {first.get('_id')}: {reason}"
            )
        raise IndexProblem(
            f"Elasticsearch at {self._url} refused {len(failed)} {what} writes ({status}): {reason}"
        )

    # -- lifecycle -----------------------------------------------------------------------------

    def _name(self, table: str) -> str:
        return f"{self._prefix}-{table}"

    def _ensure_indices(self) -> None:
        """Create the indices that are missing; add to the others the fields this version maps
        that they lack (new fields only: Elasticsearch cannot change a field's type)."""
        from elasticsearch import NotFoundError

        names = {table: self._name(table) for table in _MAPPINGS}
        with self._asking():
            try:
                found = self._es.indices.get_mapping(
                    index=",".join(names.values()), ignore_unavailable=True, allow_no_indices=True
                ).body
            except NotFoundError:
                found = {}
            for table, name in names.items():
                properties = dict(_MAPPINGS[table])
                if name not in found:
                    # 400: another writer created it since (resource_already_exists_exception).
                    self._es.options(ignore_status=400).indices.create(
                        index=name, mappings={"dynamic": "strict", "properties": properties}
                    )
                    continue
                held = (found[name].get("mappings") or {}).get("properties") or {}
                if missing := {k: v for k, v in properties.items() if k not in held}:
                    self._add_fields(name, missing)

    def _add_fields(self, name: str, properties: Mapping[str, Any]) -> None:
        """Map fields an index made by an older whyjob lacks; once, with `manage`."""
        from elasticsearch import AuthorizationException

        try:
            self._es.indices.put_mapping(index=name, properties=dict(properties))
        except AuthorizationException:
            raise IndexProblem(
                f"Elasticsearch at {self._url}: {name} lacks the fields {sorted(properties)} "
                "this whyjob writes, and adding them needs the manage privilege on it; add "
                f"them once with a key that has it: PUT {name}/_mapping "
                + orjson.dumps({"properties": properties}).decode()
            ) from None

    def close(self) -> None:
        try:
            if self._dirty:
                self._refresh()
        finally:
            self._es.close()

    def destroy(self) -> None:
        """Delete every index of this prefix (a benchmark's, a test's): what they held is gone,
        and so is anything left to refresh or undo."""
        self._dirty.clear()
        self._undo = None
        with self._asking():
            for table in _MAPPINGS:
                self._es.options(ignore_status=404).indices.delete(index=self._name(table))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes; nested calls join the outer one. Elasticsearch has no multi-document
        transactions, so this is an undo, not an atomic commit: the documents created inside
        (records, raw bodies, quarantine and import entries) are deleted again if the block
        raises, so a writer's trial insert (`raise _Rollback`) or a batch that failed half way
        leaves no records behind, and the batch written again counts them as new.

        Not undone: pod, experiment and binding merges (merging the same view again changes
        nothing, so a retried batch is harmless), checkpoints and derived documents (the
        writers set a batch's checkpoints last, after its records). Readers may see the
        records before the block ends, and if the cluster cannot be reached to undo them they
        stay: the source is then read again from its previous resume point and they are
        duplicates, dropped."""
        if self._undo is not None:
            yield
            return
        self._undo = []
        try:
            yield
        except BaseException:
            created, self._undo = self._undo, None
            self._forget(created)
            raise
        self._undo = None

    def _forget(self, created: Sequence[tuple[str, str]]) -> None:
        """Delete documents this connection created (an undo): best effort, the error that
        caused the undo is the one to report."""
        if created:
            with contextlib.suppress(IndexProblem):
                self._bulk(
                    [({"delete": {"_index": index, "_id": i}}, None) for index, i in created]
                )

    def _created(self, results: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
        return [(r["_index"], r["_id"]) for r in results if _status(r) == 201]

    def _refresh(self) -> None:
        if self._dirty:
            with self._asking():
                self._es.indices.refresh(index=",".join(sorted(self._dirty)))
            self._dirty.clear()

    # -- writing ---------------------------------------------------------------------------------

    def _bulk(self, actions: Sequence[Action]) -> list[dict[str, Any]]:
        """Send actions in bodies of at most 10 MB; each item's result, in order. Items refused
        with 429 are sent again with back-off (the ones still refused come back as 429s); a
        body the cluster finds too large (413, its http.max_content_length below ours) is
        halved, and a single document too large answers 413 as its item."""
        from elasticsearch import ApiError, TransportError

        encoded = [_encode(action) for action in actions]
        sizes = [len(e) for e in encoded]
        results: list[dict[str, Any]] = [{} for _ in actions]

        def send(run: list[int]) -> None:
            try:
                answer = self._es.bulk(operations=cast(Any, [encoded[n] for n in run]))
            except ApiError as exc:
                if exc.meta.status != 413:
                    raise _problem(exc, self._url) from None
                if len(run) > 1:
                    send(run[: len(run) // 2])
                    send(run[len(run) // 2 :])
                    return
                ((_, meta),) = actions[run[0]][0].items()
                results[run[0]] = {
                    "_index": meta.get("_index"),
                    "_id": meta.get("_id"),
                    "status": 413,
                    "error": {
                        "type": "request_entity_too_large",
                        "reason": f"one document of {sizes[run[0]]:,} bytes is over the "
                        "cluster's http.max_content_length",
                    },
                }
                return
            except TransportError as exc:
                raise _problem(exc, self._url) from None
            for n, item in zip(run, answer["items"], strict=True):
                (results[n],) = item.values()

        pending = list(range(len(actions)))
        for wait in (0.0, *_RETRY_WAITS):
            time.sleep(wait)
            for run in _chunked(pending, sizes, _BULK_BYTES):
                send(run)
            pending = [n for n in pending if _status(results[n]) == 429]
            if not pending:
                break
        self._dirty.update(str(r["_index"]) for r in results if r.get("_index"))
        return results

    def write(self, records: Iterable[Evidence]) -> int:
        """Store records and their raw bodies; returns how many were new. A write refused item
        by item (RecordRefused for a record the cluster will not hold) is undone, so it stored
        none of them; one cut off by a lost connection may have stored some (read again, they
        are duplicates)."""
        stamp = self._clock()
        actions: list[Action] = []
        raws: list[Action] = []
        for ev in records:
            doc_id = format_id(ev.id)
            actions.append(
                (
                    {"create": {"_index": self._name("evidence"), "_id": doc_id}},
                    _evidence_doc(ev, stamp),
                )
            )
            if ev.raw is not None:
                body = base64.b64encode(ev.raw).decode()
                raws.append(({"create": {"_index": self._name("raw"), "_id": doc_id}}, {"body": body}))  # fmt: skip
        if not actions:
            return 0
        results = self._bulk(actions)
        created = self._created(results)
        failed = [r for r in results if _status(r) not in (200, 201, 409)]
        if raws and not failed:  # a raw body already there (409) is the same body
            done = self._bulk(raws)
            created += self._created(done)
            failed = [r for r in done if _status(r) not in (200, 201, 409)]
        if failed:
            self._forget(created)
            self._fail(failed, "record", record=True)
        if self._undo is not None:
            self._undo += created
        return sum(1 for r in results if _status(r) in (200, 201))

    def _merge(
        self,
        table: str,
        docs: Mapping[str, dict[str, Any]],
        merge: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]],
    ) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
        """Merge `docs` into what is stored, each with the version it read (409: again);
        returns the documents as stored and the items refused as records (400, 413), so the
        caller finishes what depends on the rest before it raises for them."""
        wanted = dict(docs)
        stored: dict[str, dict[str, Any]] = {}
        refused: list[dict[str, Any]] = []
        for _ in range(10):
            if not wanted:
                return stored, refused
            with self._asking():
                found = self._es.mget(index=self._name(table), ids=list(wanted))["docs"]
            actions: list[Action] = []
            proposed: dict[str, dict[str, Any]] = {}
            for held in found:
                doc_id = held["_id"]
                if held.get("found"):
                    proposed[doc_id] = merge(held["_source"], wanted[doc_id])
                    meta = {"_index": self._name(table), "_id": doc_id, "if_seq_no": held["_seq_no"], "if_primary_term": held["_primary_term"]}  # fmt: skip
                    actions.append(({"index": meta}, proposed[doc_id]))
                else:
                    proposed[doc_id] = wanted[doc_id]
                    actions.append(
                        ({"create": {"_index": self._name(table), "_id": doc_id}}, wanted[doc_id])
                    )
            results = self._bulk(actions)
            if failed := [r for r in results if _status(r) not in (200, 201, 400, 409, 413)]:
                self._fail(failed, table.rstrip("s"), record=False)
            refused += [r for r in results if _status(r) in (400, 413)]
            stored.update({r["_id"]: proposed[r["_id"]] for r in results if _status(r) in (200, 201)})  # fmt: skip
            wanted = {r["_id"]: wanted[r["_id"]] for r in results if _status(r) == 409}
        raise IndexProblem(f"{table}: writers kept changing the same documents")

    def bind(self, bindings: Iterable[Binding]) -> None:
        docs: dict[str, dict[str, Any]] = {}
        for b in bindings:
            # One binding per cluster: two clusters' gpu-node-0 are two nodes.
            key = f"{b.kind}|{b.subject}|{b.object}" + (f"|{b.cluster}" if b.cluster else "")
            doc = docs.setdefault(key, {"kind": b.kind, "subject": b.subject, "object": b.object, "first_ts": b.first_ts, "last_ts": b.last_ts})  # fmt: skip
            if b.cluster:
                doc["cluster"] = b.cluster
            doc["first_ts"], doc["last_ts"] = (
                min(doc["first_ts"], b.first_ts),
                max(doc["last_ts"], b.last_ts),
            )
            if b.attrs:
                doc["attrs"] = b.attrs

        def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
            return {**old, "first_ts": min(old["first_ts"], new["first_ts"]), "last_ts": max(old["last_ts"], new["last_ts"]), "attrs": new.get("attrs") or old.get("attrs")}  # fmt: skip

        _, refused = self._merge("bindings", docs, merge)
        if refused:
            self._fail(refused, "binding", record=True)

    def upsert_pods(self, pods: Iterable[PodRecord]) -> None:
        """Merge pod views, then their experiments from the pods as stored: a view that names
        no cluster or experiment leaves the pod's own, and an experiment's span runs from its
        pods' first sighting to their last."""
        docs: dict[str, dict[str, Any]] = {}
        for p in pods:
            view = _pod_doc(p)
            docs[p.uid] = _merge_pod(docs[p.uid], view) if p.uid in docs else view
        if not docs:
            return
        stored, refused = self._merge("pods", docs, _merge_pod)
        experiments: dict[str, dict[str, Any]] = {}
        for doc in stored.values():
            if not doc.get("experiment"):
                continue
            cluster = doc.get("cluster") or ""
            key = f"{cluster}/{doc['namespace']}/{doc['experiment']}"
            held = experiments.setdefault(key, {"namespace": doc["namespace"], "name": doc["experiment"], "cluster": cluster, "launcher": "", "label": "", "first_seen": doc["first_seen"], "last_seen": doc["last_seen"]})  # fmt: skip
            held["launcher"] = max(held["launcher"], doc.get("launcher") or "")
            held["label"] = max(held["label"], doc.get("label") or "")
            held["first_seen"] = min(held["first_seen"], doc["first_seen"])
            held["last_seen"] = max(held["last_seen"], doc["last_seen"])

        def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
            return {**old, "first_seen": min(old["first_seen"], new["first_seen"]), "last_seen": max(old["last_seen"], new["last_seen"])}  # fmt: skip

        # The experiments of the pods that were stored, then the pods that were refused.
        refused += self._merge("experiments", experiments, merge)[1]
        if refused:
            self._fail(refused, "pod or experiment", record=True)

    def _add(self, table: str, doc: dict[str, Any], what: str) -> None:
        """One document under an automatic id (a quarantine or import entry), undone with a
        failed transaction."""
        results = self._bulk([({"index": {"_index": self._name(table)}}, doc)])
        if failed := [r for r in results if _status(r) not in (200, 201)]:
            self._fail(failed, what, record=False)
        if self._undo is not None:
            self._undo += self._created(results)

    def quarantine(
        self, origin: str, reason: str, body: bytes | None, fmt: str | None = None
    ) -> None:
        now = int(time.time() * 1000)
        doc = {"at": now, "origin": origin, "format": fmt, "reason": reason, "n": time.time_ns()}
        if body is not None:
            doc["body"] = base64.b64encode(body).decode()
        self._add("quarantine", doc, "quarantine entry")

    def record_import(
        self, origin: str, fmt: str, read: int, stored: int, duplicate: int, rejected: int
    ) -> None:
        doc = {"at": int(time.time() * 1000), "origin": origin, "format": fmt, "read": read, "stored": stored, "duplicate": duplicate, "rejected": rejected}  # fmt: skip
        self._add("imports", doc, "import entry")

    def set_checkpoint(self, source: str, token: str) -> None:
        doc = {"source": source, "token": token, "updated": int(time.time() * 1000)}
        results = self._bulk([({"index": {"_index": self._name("checkpoints"), "_id": source}}, doc)])  # fmt: skip
        if failed := [r for r in results if _status(r) not in (200, 201)]:
            self._fail(failed, "checkpoint", record=False)

    def put_derived(self, kind: str, documents: Iterable[tuple[str, str, int, bytes]]) -> None:
        actions: list[Action] = []
        for key, stamp, made, body in documents:
            doc = {"kind": kind, "key": key, "stamp": stamp, "made": made, "body": base64.b64encode(body).decode()}  # fmt: skip
            actions.append(({"index": {"_index": self._name("derived"), "_id": f"{kind}|{key}"}}, doc))  # fmt: skip
        if actions and (failed := [r for r in self._bulk(actions) if _status(r) not in (200, 201)]):
            self._fail(failed, "derived document", record=False)

    def sync_search(self) -> int:
        return 0  # messages are searchable as soon as they are refreshed

    # -- reading ---------------------------------------------------------------------------------

    def _search(
        self,
        table: str,
        query: dict[str, Any],
        *,
        size: int,
        sort: list[Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        self._refresh()
        with self._asking():
            answer: dict[str, Any] = self._es.search(
                index=self._name(table), query=query, size=size, sort=sort, **extra
            ).body
        return answer

    def _open_pit(self, table: str) -> str:
        with self._asking():
            return str(self._es.open_point_in_time(index=self._name(table), keep_alive="1m")["id"])

    def _scan(
        self, table: str, query: dict[str, Any], sort: list[Any]
    ) -> Generator[tuple[str, dict[str, Any]]]:
        """Every match, a page at a time through a point in time and search_after; a point in
        time that lapsed between pages is reopened and the read goes on where it was."""
        from elasticsearch import ApiError, NotFoundError, TransportError

        self._refresh()
        pit = self._open_pit(table)
        after: list[Any] | None = None
        lapsed = 0
        try:
            while True:
                try:
                    page = self._es.search(
                        pit={"id": pit, "keep_alive": "1m"},
                        query=query,
                        sort=sort,
                        size=_PAGE,
                        search_after=after,
                    )
                except NotFoundError as exc:
                    lapsed += 1
                    if lapsed > 3:  # not a lapse: it keeps failing
                        raise _problem(exc, self._url) from None
                    pit = self._open_pit(table)
                    continue
                except (ApiError, TransportError) as exc:
                    raise _problem(exc, self._url) from None
                lapsed = 0
                hits = page["hits"]["hits"]
                for hit in hits:
                    yield hit["_id"], hit["_source"]
                if len(hits) < _PAGE:
                    return
                pit, after = page.get("pit_id", pit), hits[-1]["sort"]
        finally:
            with contextlib.suppress(ApiError, TransportError):
                self._es.close_point_in_time(id=pit)

    def _top(
        self, table: str, query: dict[str, Any], sort: list[Any], limit: int
    ) -> list[tuple[str, dict[str, Any]]]:
        """The first `limit` matches in `sort` order: one search within the result window,
        past it a point in time and search_after (a search over 10,000 is refused)."""
        if limit <= _WINDOW:
            hits = self._search(table, query, size=max(0, limit), sort=sort)["hits"]["hits"]
            return [(h["_id"], h["_source"]) for h in hits]
        with contextlib.closing(self._scan(table, query, sort)) as found:
            return list(itertools.islice(found, limit))

    def _evidence_scan(self, query: dict[str, Any]) -> list[Evidence]:
        return [
            _evidence(doc_id, src)
            for doc_id, src in self._scan("evidence", query, [{"ts": "asc"}, {"eid": "asc"}])
        ]

    def _evidence_by_terms(
        self, column: str, values: Sequence[str], rest: Mapping[str, Any]
    ) -> list[Evidence]:
        """Records whose `column` is one of `values` (and `rest`: a bool query's other
        clauses), in (ts, id) order, a terms query at most _TERMS values long."""
        out: list[Evidence] = []
        for start in range(0, len(values), _TERMS):
            terms = {"terms": {column: list(values[start : start + _TERMS])}}
            query = {"bool": {**rest, "filter": [terms, *rest.get("filter", [])]}}
            out += self._evidence_scan(query)
        if len(values) > _TERMS:
            out.sort(key=lambda ev: (ev.ts, format_id(ev.id)))
        return out

    def checkpoint(self, source: str) -> str | None:
        found = self._get("checkpoints", source)
        return str(found["token"]) if found else None

    def checkpoints(self, prefix: str = "") -> dict[str, str]:
        query = {"prefix": {"source": prefix}} if prefix else {"match_all": {}}
        return {
            src["source"]: src["token"]
            for _, src in self._scan("checkpoints", query, [{"source": "asc"}])
        }

    def _get(self, table: str, doc_id: str) -> dict[str, Any] | None:
        from elasticsearch import NotFoundError

        with self._asking():
            try:
                return self._es.get(index=self._name(table), id=doc_id)["_source"]  # type: ignore[no-any-return]
            except NotFoundError:  # no such document, or no such index yet: nothing stored
                return None

    def get(self, ids: Sequence[int]) -> list[Evidence]:
        if not ids:
            return []
        with self._asking():
            found = self._es.mget(index=self._name("evidence"), ids=[format_id(i) for i in ids])[
                "docs"
            ]
        out = [_evidence(d["_id"], d["_source"]) for d in found if d.get("found")]
        return sorted(out, key=lambda ev: (ev.ts, ev.id))

    def raw(self, evidence_id: int) -> bytes | None:
        found = self._get("raw", format_id(evidence_id))
        return base64.b64decode(found["body"]) if found else None

    def experiments(
        self,
        name: str | None = None,
        namespace: str | None = None,
        limit: int = 1000,
        *,
        cluster: str | None = None,
    ) -> list[ExperimentRecord]:
        terms = [
            {"term": {k: v}}
            for k, v in (("name", name), ("namespace", namespace), ("cluster", cluster))
            if v is not None
        ]
        found = self._top(
            "experiments", {"bool": {"filter": terms}}, [{"last_seen": "desc"}], limit
        )
        return [
            ExperimentRecord(s["namespace"], s["name"], s["launcher"], s["label"], s["first_seen"], s["last_seen"], s.get("cluster") or "")
            for _, s in found
        ]  # fmt: skip

    def _pods(
        self, query: dict[str, Any], sort: list[Any], limit: int | None = None
    ) -> list[PodRecord]:
        if limit is not None:
            return [_pod(src) for _, src in self._top("pods", query, sort, limit)]
        return [_pod(src) for _, src in self._scan("pods", query, sort)]

    def experiment_pods(
        self, name: str, namespace: str, cluster: str | None = None
    ) -> list[PodRecord]:
        return self._pods(
            _in_cluster(
                [{"term": {"experiment": name}}, {"term": {"namespace": namespace}}], cluster
            ),
            [{"created": "asc"}, {"name": "asc"}],
        )

    def pods_named_like(
        self, prefix: str, namespace: str | None = None, cluster: str | None = None
    ) -> list[PodRecord]:
        terms: list[dict[str, Any]] = [{"prefix": {"name": f"{prefix}-"}}]
        if namespace is not None:
            terms.append({"term": {"namespace": namespace}})
        return self._pods(_in_cluster(terms, cluster), [{"created": "asc"}, {"name": "asc"}])

    def pod(self, uid: str) -> PodRecord | None:
        found = self._get("pods", uid)
        return _pod(found) if found else None

    def pods_on_node(self, node: str, t0: int, t1: int, limit: int = 500) -> list[PodRecord]:
        query = {"bool": {"filter": [{"term": {"node": node}}, {"range": {"last_seen": {"gte": t0}}}, {"range": {"first_seen": {"lte": t1}}}]}}  # fmt: skip
        return self._pods(query, [{"last_seen": "desc"}], limit)

    def pod_evidence(self, uids: Sequence[str], t0: int, t1: int) -> list[Evidence]:
        if not uids:
            return []
        rest = {"filter": [{"range": {"ts": {"gte": t0, "lte": t1}}}], "must_not": [{"term": {"kind": "log.line"}}]}  # fmt: skip
        return self._evidence_by_terms("pod_uid", sorted(set(uids)), rest)

    def log_tail(self, uid: str, container: str, until: int, limit: int) -> list[Evidence]:
        query = {"bool": {"filter": [{"term": {"pod_uid": uid}}, {"term": {"container": container}}, {"term": {"kind": "log.line"}}, {"range": {"ts": {"lte": until}}}]}}  # fmt: skip
        hits = self._top("evidence", query, [{"ts": "desc"}, {"eid": "desc"}], limit)
        return [_evidence(doc_id, src) for doc_id, src in reversed(hits)]

    def entity_evidence(
        self, column: str, values: Iterable[str], t0: int, t1: int
    ) -> list[Evidence]:
        if column not in _ENTITY_COLUMNS:
            raise ValueError(f"not an entity column: {column}")
        wanted = sorted(set(values))
        if not wanted:
            return []
        rest = {"filter": [{"range": {"ts": {"gte": t0, "lte": t1}}}], "must_not": [{"exists": {"field": "pod_uid"}}]}  # fmt: skip
        return self._evidence_by_terms(column, wanted, rest)

    def bindings(
        self,
        kind: str,
        *,
        subjects: Iterable[str] = (),
        objects: Iterable[str] = (),
        cluster: str | None = None,
    ) -> list[Binding]:
        """With `cluster`, that cluster's bindings and those of no cluster ("" for those of no
        cluster alone), as on SQLite."""
        mine: list[dict[str, Any]] = []
        if cluster is not None:
            none = {"bool": {"must_not": [{"exists": {"field": "cluster"}}]}}
            either = [none, {"term": {"cluster": cluster}}] if cluster else [none]
            mine = [{"bool": {"should": either, "minimum_should_match": 1}}]
        out: list[Binding] = []
        for column, values in (
            ("subject", sorted(set(subjects))),
            ("object", sorted(set(objects))),
        ):
            for start in range(0, len(values), _TERMS):
                chunk = values[start : start + _TERMS]
                query = {"bool": {"filter": [{"term": {"kind": kind}}, {"terms": {column: chunk}}, *mine]}}  # fmt: skip
                out += [Binding(s["kind"], s["subject"], s["object"], s["first_ts"], s["last_ts"], s.get("attrs"), s.get("cluster")) for _, s in self._scan("bindings", query, [{"subject": "asc"}, {"object": "asc"}])]  # fmt: skip
        return out

    def fleet_records(self, t0: int, t1: int) -> list[Evidence]:
        return self._evidence_scan({"bool": {"filter": [{"terms": {"kind": ["gpu.xid", "node.condition"]}}, {"range": {"ts": {"gte": t0, "lte": t1}}}]}})  # fmt: skip

    def node_spans(self, t0: int, t1: int) -> dict[str, tuple[int, int]]:
        query = {"bool": {"filter": [{"exists": {"field": "node"}}, {"range": {"last_seen": {"gte": t0}}}, {"range": {"first_seen": {"lte": t1}}}]}}  # fmt: skip
        out: dict[str, tuple[int, int]] = {}
        for _, src in self._scan("pods", query, [{"uid": "asc"}]):
            first, last = max(src["first_seen"], t0), min(src["last_seen"], t1)
            held = out.get(src["node"])
            out[src["node"]] = (min(first, held[0]), max(last, held[1])) if held else (first, last)
        return out

    def node_labels(self, nodes: Iterable[str], until: int) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for node in sorted(set(nodes)):
            query = {"bool": {"filter": [{"term": {"node": node}}, {"term": {"kind": "node.snapshot"}}, {"range": {"ts": {"lte": until}}}], "must_not": [{"exists": {"field": "pod_uid"}}]}}  # fmt: skip
            hits = self._search("evidence", query, size=1, sort=[{"ts": "desc"}])["hits"]["hits"]
            labels = (hits[0]["_source"].get("attrs") or {}).get("labels") if hits else None
            if isinstance(labels, dict):
                out[node] = {str(k): str(v) for k, v in labels.items()}
        return out

    def _margin_ns(self) -> int:
        return self.settings.write_margin_ms * 1_000_000

    def last_seq(self) -> int:
        """The write counter: the newest write stamp (epoch ns), but never more than now minus
        the write margin, so it keeps moving until every record a slower or skewed writer may
        still make visible is past it; 0 when nothing was written. The stamp comes back as the
        sort value, an exact long (a `max` aggregation is a double: ±128 ns at today's ns)."""
        hits = self._search(
            "evidence", {"match_all": {}}, size=1, sort=[{"written": "desc"}], source=False
        )["hits"]["hits"]
        newest = max(int(hits[0]["sort"][0]) if hits else 0, int(self.checkpoint(_WRITTEN_MARK) or 0))  # fmt: skip
        return min(newest, self._clock() - self._margin_ns()) if newest else 0

    def hours_written_after(self, seq: int) -> set[int]:
        """The hours of the records stamped after `seq` less the write margin: a superset of
        those written after it (a record stamped before `seq` by another writer, or on a
        skewed clock, may have become visible only since)."""
        answer = self._search(
            "evidence",
            {"range": {"written": {"gt": seq - self._margin_ns()}}},
            size=0,
            aggs={"hours": {"terms": {"field": "hour", "size": 65_000}}},
        )
        return {int(b["key"]) for b in answer["aggregations"]["hours"]["buckets"]}

    def derived(self, kind: str) -> dict[str, tuple[str, int, bytes]]:
        return {src["key"]: (src["stamp"], int(src["made"]), base64.b64decode(src["body"])) for _, src in self._scan("derived", {"term": {"kind": kind}}, [{"key": "asc"}])}  # fmt: skip

    def search(self, query: str, limit: int = 50) -> list[Evidence]:
        """simple_query_string over messages, every word required (`"a phrase"`, `a | b`,
        `-not`), newest first; not SQLite's FTS5 syntax (docs/index.md)."""
        found = self._top("evidence", {"simple_query_string": {"query": query, "fields": ["message"], "default_operator": "and"}}, [{"ts": "desc"}], limit)  # fmt: skip
        return [_evidence(doc_id, src) for doc_id, src in found]

    def search_backlog(self) -> int:
        return 0

    def quarantined(self, limit: int = 100) -> Sequence[QuarantineEntry]:
        found = self._top("quarantine", {"match_all": {}}, [{"n": "desc"}], limit)
        return [
            (n, s["at"], s["origin"], s.get("format"), s["reason"], base64.b64decode(s["body"]) if s.get("body") else None)
            for n, (_, s) in enumerate(found, start=1)
        ]  # fmt: skip

    def counts(self) -> dict[str, int]:
        self._refresh()
        with self._asking():
            return {
                table: int(self._es.count(index=self._name(name))["count"])
                for table, name in (("evidence", "evidence"), ("pods", "pods"), ("experiments", "experiments"), ("bindings", "bindings"), ("quarantine", "quarantine"), ("imports", "imports"))
            }  # fmt: skip

    def kinds(self) -> dict[str, int]:
        answer = self._search(
            "evidence",
            {"match_all": {}},
            size=0,
            aggs={"kinds": {"terms": {"field": "kind", "size": 1000}}},
        )
        return {b["key"]: int(b["doc_count"]) for b in answer["aggregations"]["kinds"]["buckets"]}

    def time_range(self) -> tuple[int | None, int | None]:
        # Milliseconds: a double holds them exactly (to 2**53 ms, the year 285,000).
        answer = self._search(
            "evidence",
            {"match_all": {}},
            size=0,
            aggs={"first": {"min": {"field": "ts"}}, "last": {"max": {"field": "ts"}}},
        )
        first, last = (
            answer["aggregations"]["first"]["value"],
            answer["aggregations"]["last"]["value"],
        )
        return (int(first) if first is not None else None, int(last) if last is not None else None)

    # -- retention -------------------------------------------------------------------------------

    def expiring(self, cutoffs: Mapping[str, int]) -> dict[str, tuple[int, int | None]]:
        out: dict[str, tuple[int, int | None]] = {}
        for kind, before in sorted(cutoffs.items()):
            query = {
                "bool": {"filter": [{"term": {"kind": kind}}, {"range": {"ts": {"lt": before}}}]}
            }
            answer = self._search(
                "evidence",
                query,
                size=0,
                track_total_hits=True,
                aggs={"oldest": {"min": {"field": "ts"}}},
            )
            count = int(answer["hits"]["total"]["value"])
            if count:
                oldest = answer["aggregations"]["oldest"]["value"]
                out[kind] = (count, int(oldest) if oldest is not None else None)
        return out

    def drop(self, kind: str, before: int, limit: int) -> int:
        """Delete up to `limit` (at most 10,000) of the oldest records of `kind` before
        `before` and their raw bodies; returns how many records were deleted, not counting
        deletes that failed. Raises when some failed and none was deleted, so a loop over it
        ends. Raw bodies go first: a record whose raw body could not be deleted is kept, to go
        with it next time, rather than leave a raw body no record names."""
        query = {"bool": {"filter": [{"term": {"kind": kind}}, {"range": {"ts": {"lt": before}}}]}}
        hits = self._top("evidence", query, [{"ts": "asc"}, {"eid": "asc"}], min(limit, _WINDOW))
        if not hits:
            return 0
        newest = max(int(src.get("written") or 0) for _, src in hits)
        if newest > int(self.checkpoint(_WRITTEN_MARK) or 0):  # the counter never goes down
            self.set_checkpoint(_WRITTEN_MARK, str(newest))
        ids = [doc_id for doc_id, _ in hits]
        raws = self._bulk([({"delete": {"_index": self._name("raw"), "_id": i}}, None) for i in ids])  # fmt: skip
        gone = {r["_id"] for r in raws if _status(r) in (200, 404)}  # 404: it had none
        records = self._bulk([({"delete": {"_index": self._name("evidence"), "_id": i}}, None) for i in ids if i in gone])  # fmt: skip
        deleted = sum(1 for r in records if _status(r) == 200)  # 404: another pruner's
        self._refresh()
        if not deleted and (failed := [r for r in raws + records if _status(r) not in (200, 404)]):
            self._fail(failed, "delete", record=False)
        return deleted

    def used_bytes(self) -> int:
        """What the live records and raw bodies take. The store size counts deleted documents
        until their segments merge, which retention does not wait for: it is scaled by the
        live share of documents, so a drop shows at once (deleted documents are taken to be
        the size of live ones)."""
        self._refresh()
        total = 0
        with self._asking():
            for table in ("evidence", "raw"):
                stats = self._es.indices.stats(index=self._name(table), metric="docs,store")
                primaries = stats["_all"]["primaries"]
                live = int(primaries["docs"]["count"])
                every = live + int(primaries["docs"].get("deleted") or 0)
                if every:
                    total += int(primaries["store"]["size_in_bytes"]) * live // every
        return total

    def release_free_pages(self) -> int:
        return 0  # Elasticsearch merges deleted documents away on its own


def _in_cluster(terms: list[dict[str, Any]], cluster: str | None) -> dict[str, Any]:
    if cluster is None:
        return {"bool": {"filter": terms}}
    if cluster == "":  # no cluster named: stored without one (or, from an old writer, as "")
        named = {"bool": {"must_not": [{"exists": {"field": "cluster"}}]}}
        either = [named, {"term": {"cluster": ""}}]
        return {"bool": {"filter": [*terms, {"bool": {"should": either, "minimum_should_match": 1}}]}}  # fmt: skip
    return {"bool": {"filter": [*terms, {"term": {"cluster": cluster}}]}}


def _pod_doc(p: PodRecord) -> dict[str, Any]:
    doc = {
        "uid": p.uid, "namespace": p.namespace, "name": p.name, "experiment": p.experiment,
        "launcher": p.launcher, "label": p.label, "rank": p.rank, "job_attempt": p.job_attempt,
        "node": p.node, "created": p.created, "deleted": p.deleted, "phase": p.phase,
        "gpus": p.gpus, "labels": p.labels or None, "first_seen": p.seen, "last_seen": p.seen,
        "cluster": p.cluster or None,
    }  # fmt: skip
    return {k: v for k, v in doc.items() if v is not None}


def _merge_pod(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Two views of one pod, as SQLite's upsert merges them: the newest state, the widest time."""
    newer = new["last_seen"] >= old["last_seen"]
    out = dict(old)
    for key in ("experiment", "launcher", "label", "rank", "job_attempt", "node", "deleted", "gpus", "labels", "cluster"):  # fmt: skip
        if new.get(key) is not None:
            out[key] = new[key]
    created = [c for c in (old.get("created"), new.get("created")) if c is not None]
    if created:
        out["created"] = min(created)
    if new.get("phase") is not None and (newer or old.get("phase") is None):
        out["phase"] = new["phase"]
    out["first_seen"] = min(old["first_seen"], new["first_seen"])
    out["last_seen"] = max(old["last_seen"], new["last_seen"])
    return out


def _pod(src: Mapping[str, Any]) -> PodRecord:
    return PodRecord(
        uid=src["uid"], namespace=src["namespace"], name=src["name"], seen=src["last_seen"],
        experiment=src.get("experiment"), launcher=src.get("launcher"), label=src.get("label"),
        rank=src.get("rank"), job_attempt=src.get("job_attempt"), node=src.get("node"),
        created=src.get("created"), deleted=src.get("deleted"), phase=src.get("phase"),
        gpus=src.get("gpus"), labels=src.get("labels") or {}, cluster=src.get("cluster"),
    )  # fmt: skip


def _problem(exc: Exception, url: str) -> IndexProblem:
    """An IndexProblem for what the client raised: the cluster's refusal in words a person can
    act on, or why it could not be reached."""
    from elasticsearch import ApiError, ConnectionTimeout

    if isinstance(exc, ApiError):
        return IndexProblem(_explain(exc, url))
    cause = getattr(exc, "message", None) or str(exc)
    if isinstance(exc, ConnectionTimeout):
        return IndexProblem(f"Elasticsearch at {url} did not answer in time: {cause}")
    return IndexProblem(f"cannot reach Elasticsearch at {url}: {type(exc).__name__}: {cause}")


def _reason(error: Any) -> str:
    """An error object's type and reason, with the root cause the outer one often hides
    ("all shards failed")."""
    if not isinstance(error, dict):
        return str(error)
    text = f"{error.get('type')}: {error.get('reason')}"
    causes = error.get("root_cause") or ([error["caused_by"]] if isinstance(error.get("caused_by"), dict) else [])  # fmt: skip
    if causes and isinstance(causes[0], dict) and causes[0].get("reason") != error.get("reason"):
        text += f" ({causes[0].get('type')}: {causes[0].get('reason')})"
    return text[:1000]


def _explain(exc: Any, url: str) -> str:
    """A refused request in words a person can act on: wrong credentials, a missing privilege,
    an index not there yet, anything else with the server's own reason."""
    status = getattr(exc, "status_code", None) or getattr(
        getattr(exc, "meta", None), "status", None
    )
    body = getattr(exc, "body", None) or {}
    error = body.get("error") if isinstance(body, dict) else None
    reason = _reason(error) if isinstance(error, dict) else str(exc)
    if status == 401:
        return f"Elasticsearch at {url} refused the credentials (check index.api_key or index.username/password): {reason}"
    if status == 403:
        return f"Elasticsearch at {url}: the credentials lack a privilege whyjob needs (read, write, create_index and view_index_metadata on the PREFIX-* indices; monitor as well for retention by size): {reason}"
    if isinstance(error, dict) and error.get("type") == "index_not_found_exception":
        return f"Elasticsearch at {url} has no index {error.get('index')}: nothing was written under this prefix yet (check index.prefix, or ingest first)"
    return f"Elasticsearch at {url} answered {status}: {reason}"
