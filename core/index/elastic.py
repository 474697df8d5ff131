"""The index on Elasticsearch, through the official `elasticsearch` client: for teams with
several clusters and months of evidence, who already run it for their logs.

Indices (PREFIX defaults to `whyjob`), created with explicit mappings (keyword entity keys,
epoch-millisecond `date` times, `text` messages, `flattened` attributes):
`PREFIX-evidence` (one document per record, `_id` the 16-hex evidence id), `PREFIX-raw` (the
record as its source gave it), `PREFIX-pods`, `PREFIX-experiments`, `PREFIX-bindings`,
`PREFIX-checkpoints`, `PREFIX-imports`, `PREFIX-quarantine`, `PREFIX-derived`.

- Records are written with `_bulk` `create` and their id as `_id`: writing one again is a 409,
  counted as a duplicate, so re-ingest is a no-op as on SQLite. A 429 (the write queue full) is
  retried with back-off, by the client for the request and here for single items.
- Pods, experiments and bindings merge views (the newest state, the widest time); each merge
  reads the current document and writes it back with `if_seq_no`/`if_primary_term`, and a 409
  (another writer in between) reads and merges again.
- Reads are bool filters on keyword terms and time ranges; long ones page with a point in time
  and `search_after` (a lapsed point in time is reopened where the read was).
- Search is near-real-time: this connection refreshes what it wrote before it reads, and a writer
  refreshes when it closes, so `whyjob ingest` then `whyjob explain` sees everything.
- There are no multi-document transactions: `transaction()` only groups writes; a record and its
  resume point are written in that order, so a crash between them reads the record again
  (a duplicate, dropped), never loses one.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from whyjob.core.entities import Binding, ExperimentRecord, PodRecord
from whyjob.core.errors import IndexProblem
from whyjob.core.evidence import Evidence, format_id, parse_id
from whyjob.core.index.base import QuarantineEntry

__all__ = ["ElasticSettings", "ElasticsearchIndex"]

_PAGE = 5000
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
        "attrs": {"type": "flattened"},
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


@dataclass(frozen=True, slots=True)
class ElasticSettings:
    """Where and how to reach the cluster (the `index:` section of the config file)."""

    urls: list[str]
    api_key: str | None = None
    username: str | None = None
    password: str | None = None
    ca_certs: Path | None = None
    prefix: str = "whyjob"


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


class ElasticsearchIndex:
    """The index contract (core/index/base.py) on an Elasticsearch cluster."""

    def __init__(self, settings: ElasticSettings, *, readonly: bool = False) -> None:
        from elasticsearch import ApiError, Elasticsearch, TransportError

        self.settings = settings
        self.path = Path(f"{settings.urls[0]}/{settings.prefix}-*")
        self.readonly = readonly
        self._prefix = settings.prefix
        self._dirty: set[str] = set()
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
        try:
            info = self._es.info()
        except ApiError as exc:
            raise IndexProblem(_explain(exc, settings.urls[0])) from None
        except TransportError as exc:
            raise IndexProblem(
                f"cannot reach Elasticsearch at {settings.urls[0]}: {exc.message}"
            ) from None
        major = int(str(info["version"]["number"]).split(".")[0])
        if major < 8:
            raise IndexProblem(
                f"Elasticsearch {info['version']['number']} at {settings.urls[0]}: whyjob needs 8 or newer"
            )
        if not readonly:
            self._ensure_indices()

    # -- lifecycle -----------------------------------------------------------------------------

    def _name(self, table: str) -> str:
        return f"{self._prefix}-{table}"

    def _ensure_indices(self) -> None:
        from elasticsearch import ApiError

        try:
            for table, properties in _MAPPINGS.items():
                name = self._name(table)
                if not self._es.indices.exists(index=name):
                    self._es.options(ignore_status=400).indices.create(
                        index=name, mappings={"dynamic": "strict", "properties": dict(properties)}
                    )
        except ApiError as exc:
            raise IndexProblem(_explain(exc, self.settings.urls[0])) from None

    def close(self) -> None:
        if self._dirty:
            self._refresh()
        self._es.close()

    def destroy(self) -> None:
        """Delete every index of this prefix (a benchmark's, a test's): what they held is gone."""
        for table in _MAPPINGS:
            self._es.options(ignore_status=404).indices.delete(index=self._name(table))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        yield  # no multi-document transactions: writes are idempotent and ordered instead

    def _refresh(self) -> None:
        if self._dirty:
            self._es.indices.refresh(index=",".join(sorted(self._dirty)))
            self._dirty.clear()

    # -- writing ---------------------------------------------------------------------------------

    def _bulk(self, actions: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send (action, source) pairs; retry single items the cluster refused with 429."""
        from elasticsearch import ApiError

        results: list[dict[str, Any]] = [{}] * (len(actions) // 2)
        pending = list(range(len(results)))
        for attempt in range(6):
            body: list[dict[str, Any]] = []
            for n in pending:
                body.append(actions[2 * n])
                if actions[2 * n + 1] is not None:
                    body.append(actions[2 * n + 1])
            try:
                answer = self._es.bulk(operations=body)
            except ApiError as exc:
                raise IndexProblem(_explain(exc, self.settings.urls[0])) from None
            retry = []
            for n, item in zip(pending, answer["items"], strict=True):
                (result,) = item.values()
                results[n] = result
                if result.get("status") == 429:
                    retry.append(n)
                else:
                    self._dirty.add(result["_index"])
            if not retry:
                return results
            pending = retry
            time.sleep(min(2.0, 0.1 * 2**attempt))
        raise IndexProblem(f"Elasticsearch kept refusing {len(pending)} writes with 429")

    def write(self, records: Iterable[Evidence]) -> int:
        written = time.time_ns()
        actions: list[dict[str, Any]] = []
        raws: list[dict[str, Any]] = []
        for ev in records:
            doc_id = format_id(ev.id)
            actions += [
                {"create": {"_index": self._name("evidence"), "_id": doc_id}},
                _evidence_doc(ev, written),
            ]
            if ev.raw is not None:
                body = base64.b64encode(ev.raw).decode()
                raws += [{"create": {"_index": self._name("raw"), "_id": doc_id}}, {"body": body}]
        if not actions:
            return 0
        stored = 0
        for result in self._bulk(actions):
            status = result.get("status")
            if status in (200, 201):
                stored += 1
            elif status != 409:
                raise IndexProblem(f"Elasticsearch refused a record: {result.get('error')}")
        if raws:
            self._bulk(raws)  # a raw body already there (409) is the same body
        return stored

    def _merge(self, table: str, docs: Mapping[str, dict[str, Any]], merge: Any) -> None:
        """Merge `docs` into what is stored, each with the version it read (409: again)."""
        from elasticsearch import ApiError

        wanted = dict(docs)
        for _ in range(10):
            if not wanted:
                return
            try:
                found = self._es.mget(index=self._name(table), ids=list(wanted))["docs"]
            except ApiError as exc:
                raise IndexProblem(_explain(exc, self.settings.urls[0])) from None
            actions: list[dict[str, Any]] = []
            for held in found:
                doc_id = held["_id"]
                if held.get("found"):
                    merged = merge(held["_source"], wanted[doc_id])
                    meta = {"_index": self._name(table), "_id": doc_id, "if_seq_no": held["_seq_no"], "if_primary_term": held["_primary_term"]}  # fmt: skip
                    actions += [{"index": meta}, merged]
                else:
                    actions += [
                        {"create": {"_index": self._name(table), "_id": doc_id}},
                        wanted[doc_id],
                    ]
            results = self._bulk(actions)
            wanted = {r["_id"]: wanted[r["_id"]] for r in results if r.get("status") == 409}
            if bad := [r for r in results if r.get("status") not in (200, 201, 409)]:
                raise IndexProblem(f"Elasticsearch refused a {table} write: {bad[0].get('error')}")
        raise IndexProblem(f"{table}: writers kept changing the same documents")

    def bind(self, bindings: Iterable[Binding]) -> None:
        docs: dict[str, dict[str, Any]] = {}
        for b in bindings:
            key = f"{b.kind}|{b.subject}|{b.object}"
            doc = docs.setdefault(key, {"kind": b.kind, "subject": b.subject, "object": b.object, "first_ts": b.first_ts, "last_ts": b.last_ts})  # fmt: skip
            doc["first_ts"], doc["last_ts"] = (
                min(doc["first_ts"], b.first_ts),
                max(doc["last_ts"], b.last_ts),
            )
            if b.attrs:
                doc["attrs"] = b.attrs

        def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
            return {**old, "first_ts": min(old["first_ts"], new["first_ts"]), "last_ts": max(old["last_ts"], new["last_ts"]), "attrs": new.get("attrs") or old.get("attrs")}  # fmt: skip

        self._merge("bindings", docs, merge)

    def upsert_pods(self, pods: Iterable[PodRecord]) -> None:
        docs: dict[str, dict[str, Any]] = {}
        for p in pods:
            view = _pod_doc(p)
            docs[p.uid] = _merge_pod(docs[p.uid], view) if p.uid in docs else view
        if not docs:
            return
        self._merge("pods", docs, _merge_pod)
        experiments: dict[str, dict[str, Any]] = {}
        for doc in docs.values():
            if doc.get("experiment"):
                cluster = doc.get("cluster") or ""
                key = f"{cluster}/{doc['namespace']}/{doc['experiment']}"
                seen = doc["last_seen"]
                held = experiments.get(key)
                experiments[key] = {
                    "namespace": doc["namespace"], "name": doc["experiment"], "cluster": cluster,
                    "launcher": doc.get("launcher") or "", "label": doc.get("label") or "",
                    "first_seen": min(seen, held["first_seen"]) if held else seen,
                    "last_seen": max(seen, held["last_seen"]) if held else seen,
                }  # fmt: skip

        def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
            return {**old, "first_seen": min(old["first_seen"], new["first_seen"]), "last_seen": max(old["last_seen"], new["last_seen"])}  # fmt: skip

        self._merge("experiments", experiments, merge)

    def quarantine(
        self, origin: str, reason: str, body: bytes | None, fmt: str | None = None
    ) -> None:
        now = int(time.time() * 1000)
        doc = {"at": now, "origin": origin, "format": fmt, "reason": reason, "n": time.time_ns()}
        if body is not None:
            doc["body"] = base64.b64encode(body).decode()
        self._bulk([{"index": {"_index": self._name("quarantine")}}, doc])

    def record_import(
        self, origin: str, fmt: str, read: int, stored: int, duplicate: int, rejected: int
    ) -> None:
        doc = {"at": int(time.time() * 1000), "origin": origin, "format": fmt, "read": read, "stored": stored, "duplicate": duplicate, "rejected": rejected}  # fmt: skip
        self._bulk([{"index": {"_index": self._name("imports")}}, doc])

    def set_checkpoint(self, source: str, token: str) -> None:
        doc = {"source": source, "token": token, "updated": int(time.time() * 1000)}
        self._bulk([{"index": {"_index": self._name("checkpoints"), "_id": source}}, doc])

    def put_derived(self, kind: str, documents: Iterable[tuple[str, str, int, bytes]]) -> None:
        actions: list[dict[str, Any]] = []
        for key, stamp, made, body in documents:
            doc = {"kind": kind, "key": key, "stamp": stamp, "made": made, "body": base64.b64encode(body).decode()}  # fmt: skip
            actions += [{"index": {"_index": self._name("derived"), "_id": f"{kind}|{key}"}}, doc]
        if actions:
            self._bulk(actions)

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
        from elasticsearch import ApiError

        self._refresh()
        try:
            answer: dict[str, Any] = self._es.search(
                index=self._name(table), query=query, size=size, sort=sort, **extra
            ).body
            return answer
        except ApiError as exc:
            raise IndexProblem(_explain(exc, self.settings.urls[0])) from None

    def _scan(
        self, table: str, query: dict[str, Any], sort: list[Any]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every match, a page at a time through a point in time and search_after; a point in
        time that lapsed between pages is reopened and the read goes on where it was."""
        from elasticsearch import ApiError, NotFoundError

        self._refresh()
        pit = self._es.open_point_in_time(index=self._name(table), keep_alive="1m")["id"]
        after: list[Any] | None = None
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
                except NotFoundError:
                    pit = self._es.open_point_in_time(index=self._name(table), keep_alive="1m")[
                        "id"
                    ]
                    continue
                except ApiError as exc:
                    raise IndexProblem(_explain(exc, self.settings.urls[0])) from None
                hits = page["hits"]["hits"]
                for hit in hits:
                    yield hit["_id"], hit["_source"]
                if len(hits) < _PAGE:
                    return
                pit, after = page.get("pit_id", pit), hits[-1]["sort"]
        finally:
            with contextlib.suppress(ApiError):
                self._es.close_point_in_time(id=pit)

    def _evidence_scan(self, query: dict[str, Any]) -> list[Evidence]:
        return [
            _evidence(doc_id, src)
            for doc_id, src in self._scan("evidence", query, [{"ts": "asc"}, {"eid": "asc"}])
        ]

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

        try:
            return self._es.get(index=self._name(table), id=doc_id)["_source"]  # type: ignore[no-any-return]
        except NotFoundError:
            return None

    def get(self, ids: Sequence[int]) -> list[Evidence]:
        if not ids:
            return []
        found = self._es.mget(index=self._name("evidence"), ids=[format_id(i) for i in ids])["docs"]
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
        answer = self._search(
            "experiments",
            {"bool": {"filter": terms}},
            size=min(limit, 10_000),
            sort=[{"last_seen": "desc"}],
        )
        return [
            ExperimentRecord(s["namespace"], s["name"], s["launcher"], s["label"], s["first_seen"], s["last_seen"], s.get("cluster") or "")
            for s in (h["_source"] for h in answer["hits"]["hits"])
        ]  # fmt: skip

    def _pods(
        self, query: dict[str, Any], sort: list[Any], limit: int | None = None
    ) -> list[PodRecord]:
        if limit is not None:
            hits = self._search("pods", query, size=limit, sort=sort)["hits"]["hits"]
            return [_pod(h["_source"]) for h in hits]
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
        return self._evidence_scan({"bool": {"filter": [{"terms": {"pod_uid": list(uids)}}, {"range": {"ts": {"gte": t0, "lte": t1}}}], "must_not": [{"term": {"kind": "log.line"}}]}})  # fmt: skip

    def log_tail(self, uid: str, container: str, until: int, limit: int) -> list[Evidence]:
        query = {"bool": {"filter": [{"term": {"pod_uid": uid}}, {"term": {"container": container}}, {"term": {"kind": "log.line"}}, {"range": {"ts": {"lte": until}}}]}}  # fmt: skip
        hits = self._search("evidence", query, size=limit, sort=[{"ts": "desc"}, {"eid": "desc"}])[
            "hits"
        ]["hits"]
        return [_evidence(h["_id"], h["_source"]) for h in reversed(hits)]

    def entity_evidence(
        self, column: str, values: Iterable[str], t0: int, t1: int
    ) -> list[Evidence]:
        if column not in _ENTITY_COLUMNS:
            raise ValueError(f"not an entity column: {column}")
        wanted = sorted(set(values))
        if not wanted:
            return []
        return self._evidence_scan({"bool": {"filter": [{"terms": {column: wanted}}, {"range": {"ts": {"gte": t0, "lte": t1}}}], "must_not": [{"exists": {"field": "pod_uid"}}]}})  # fmt: skip

    def bindings(
        self, kind: str, *, subjects: Iterable[str] = (), objects: Iterable[str] = ()
    ) -> list[Binding]:
        out: list[Binding] = []
        for column, values in (
            ("subject", sorted(set(subjects))),
            ("object", sorted(set(objects))),
        ):
            if values:
                query = {
                    "bool": {"filter": [{"term": {"kind": kind}}, {"terms": {column: values}}]}
                }
                out += [Binding(s["kind"], s["subject"], s["object"], s["first_ts"], s["last_ts"], s.get("attrs")) for _, s in self._scan("bindings", query, [{"subject": "asc"}, {"object": "asc"}])]  # fmt: skip
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

    def last_seq(self) -> int:
        answer = self._search(
            "evidence", {"match_all": {}}, size=0, aggs={"last": {"max": {"field": "written"}}}
        )
        value = answer["aggregations"]["last"]["value"]
        return int(value) if value is not None else 0

    def hours_written_after(self, seq: int) -> set[int]:
        answer = self._search(
            "evidence",
            {"range": {"written": {"gt": seq}}},
            size=0,
            aggs={"hours": {"terms": {"field": "hour", "size": 65_000}}},
        )
        return {int(b["key"]) for b in answer["aggregations"]["hours"]["buckets"]}

    def derived(self, kind: str) -> dict[str, tuple[str, int, bytes]]:
        return {src["key"]: (src["stamp"], int(src["made"]), base64.b64decode(src["body"])) for _, src in self._scan("derived", {"term": {"kind": kind}}, [{"key": "asc"}])}  # fmt: skip

    def search(self, query: str, limit: int = 50) -> list[Evidence]:
        answer = self._search("evidence", {"simple_query_string": {"query": query, "fields": ["message"], "default_operator": "and"}}, size=limit, sort=[{"ts": "desc"}])  # fmt: skip
        return [_evidence(h["_id"], h["_source"]) for h in answer["hits"]["hits"]]

    def search_backlog(self) -> int:
        return 0

    def quarantined(self, limit: int = 100) -> Sequence[QuarantineEntry]:
        hits = self._search("quarantine", {"match_all": {}}, size=limit, sort=[{"n": "desc"}])[
            "hits"
        ]["hits"]
        return [
            (n, s["at"], s["origin"], s.get("format"), s["reason"], base64.b64decode(s["body"]) if s.get("body") else None)
            for n, s in enumerate((h["_source"] for h in hits), start=1)
        ]  # fmt: skip

    def counts(self) -> dict[str, int]:
        self._refresh()
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
        query = {"bool": {"filter": [{"term": {"kind": kind}}, {"range": {"ts": {"lt": before}}}]}}
        hits = self._search("evidence", query, size=limit, sort=[{"ts": "asc"}, {"eid": "asc"}])[
            "hits"
        ]["hits"]
        if not hits:
            return 0
        actions: list[Any] = []
        for hit in hits:
            actions += [{"delete": {"_index": self._name("evidence"), "_id": hit["_id"]}}, None]
            actions += [{"delete": {"_index": self._name("raw"), "_id": hit["_id"]}}, None]
        self._bulk(actions)
        self._refresh()
        return len(hits)

    def used_bytes(self) -> int:
        total = 0
        for table in ("evidence", "raw"):
            stats = self._es.indices.stats(index=self._name(table), metric="store")
            total += int(stats["_all"]["primaries"]["store"]["size_in_bytes"])
        return total

    def release_free_pages(self) -> int:
        return 0  # Elasticsearch merges deleted documents away on its own


def _in_cluster(terms: list[dict[str, Any]], cluster: str | None) -> dict[str, Any]:
    if cluster is None:
        return {"bool": {"filter": terms}}
    if cluster == "":
        return {"bool": {"filter": terms, "must_not": [{"exists": {"field": "cluster"}}]}}
    return {"bool": {"filter": [*terms, {"term": {"cluster": cluster}}]}}


def _pod_doc(p: PodRecord) -> dict[str, Any]:
    doc = {
        "uid": p.uid, "namespace": p.namespace, "name": p.name, "experiment": p.experiment,
        "launcher": p.launcher, "label": p.label, "rank": p.rank, "job_attempt": p.job_attempt,
        "node": p.node, "created": p.created, "deleted": p.deleted, "phase": p.phase,
        "gpus": p.gpus, "labels": p.labels or None, "first_seen": p.seen, "last_seen": p.seen,
        "cluster": p.cluster,
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


def _explain(exc: Any, url: str) -> str:
    """A refused request in words a person can act on: wrong credentials, a missing privilege,
    anything else with the server's own reason."""
    status = getattr(exc, "status_code", None) or getattr(
        getattr(exc, "meta", None), "status", None
    )
    body = getattr(exc, "body", None) or {}
    reason = (
        (body.get("error") or {}).get("reason")
        if isinstance(body, dict) and isinstance(body.get("error"), dict)
        else str(exc)
    )
    if status == 401:
        return f"Elasticsearch at {url} refused the credentials (check index.api_key or index.username/password): {reason}"
    if status == 403:
        return f"Elasticsearch at {url}: the credentials lack a privilege whyjob needs (read, write and create_index on the whyjob-* indices): {reason}"
    return f"Elasticsearch at {url} answered {status}: {reason}"
