"""A local stand-in for Elasticsearch's REST API: exactly the calls whyjob's backend makes, with
the real servers' response shapes, headers, limits and errors, for the official client.

No Elasticsearch or OpenSearch server installs from the package registries this project can
reach, so CI runs the index contract against this. What it does like the real thing:

- every answer carries `X-Elastic-Product: Elasticsearch` (the client refuses a server without
  it) and the version document at `GET /`; an API key or basic credentials are checked (401 with
  a security_exception), and a key without write privileges gets 403 on writes;
- `_bulk` takes NDJSON `create`/`index`/`delete` actions and answers per item (201, 200, 409
  `version_conflict_engine_exception` for a `create` of a known `_id` or a stale
  `if_seq_no`/`if_primary_term`), with `errors` set when any item failed; `throttle(n)` makes the
  next n bulk requests answer 429 `es_rejected_execution_exception`, `throttle_items(n)` the
  next n items of bulks (the rest of the request is applied);
- `dynamic: strict` mappings are enforced (an unmapped field is a 400
  `strict_dynamic_mapping_exception`), numbers and dates must parse, and a `keyword` or
  `flattened` value over 32,766 UTF-8 bytes is an immense term (400), item by item;
- a request body over `http.max_content_length` (100 MB unless given) is a 413 with an empty
  body, as Netty answers it; `from + size` over `index.max_result_window` (10,000) is a 400;
- writes become searchable at a refresh (`_refresh`, or `?refresh=true|wait_for`), as near-real-
  time search does; `GET _doc` and `_mget` are realtime;
- `_search` with `bool` (`filter`, `must`, `must_not`, `should`), `term`, `terms`, `range`,
  `exists`, `prefix`, `ids`, `simple_query_string` (words, `"phrases"`, `+`/`|`/`-`), `sort`
  (missing values last in either order), `from`, `size`, `search_after`, and `min`/`max`
  (doubles, with `value_as_string` on dates) and `terms` aggregations; point-in-time ids from
  `_pit`, whose searches sort by an implicit `_shard_doc` tiebreaker last and which expire
  (`expire_pits()` makes them answer 404 `search_context_missing_exception`); a terms query
  of more than `index.max_terms_count` (65,536) values is a 400;
- `_count`, `_delete_by_query`, index templates, index creation (400
  `resource_already_exists_exception`), `GET`/`PUT _mapping` (new fields only), and `_stats`
  whose `store.size_in_bytes` keeps deleted and overwritten documents (`docs.deleted`) until
  segments merge (`force_merge()`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import socket
import threading
import uuid
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["ElasticStandin"]

Doc = dict[str, Any]
_VERSION = {
    "number": "9.1.4",
    "build_flavor": "default",
    "build_type": "docker",
    "build_hash": "0b7fe68d2e369469ff9e9f344ab6df64ab9c5293",
    "build_date": "2025-09-16T22:05:19.073893347Z",
    "build_snapshot": False,
    "lucene_version": "10.2.2",
    "minimum_wire_compatibility_version": "8.19.0",
    "minimum_index_compatibility_version": "8.0.0",
}


def _error(status: int, kind: str, reason: str, **extra: Any) -> tuple[int, Doc]:
    cause = {"type": kind, "reason": reason, **extra}
    return status, {"error": {"root_cause": [cause], **cause}, "status": status}


class _Index:
    def __init__(self, name: str, mappings: Doc) -> None:
        self.name = name
        self.mappings = mappings
        self.docs: dict[str, tuple[Doc, int]] = {}  # realtime: _id -> (_source, seq_no)
        self.visible: dict[str, tuple[Doc, int]] = {}  # as of the last refresh
        self.uuid = uuid.uuid4().hex[:22]
        # Deleted or overwritten documents stay in their segments until a merge: counted in
        # docs.deleted and in the store size.
        self.deleted = 0
        self.deleted_bytes = 0

    def forget(self, doc_id: str) -> None:
        """A document deleted or replaced: live no more, its bytes held until a merge."""
        held = self.docs.pop(doc_id, None)
        if held is not None:
            self.deleted += 1
            self.deleted_bytes += _size(held[0])

    @property
    def properties(self) -> Doc:
        found = self.mappings.get("properties")
        return found if isinstance(found, dict) else {}


class ElasticStandin:
    def __init__(
        self,
        *,
        api_key: str | None = None,
        read_only_key: str | None = None,
        max_content_length: int = 100 * 1024 * 1024,
    ) -> None:
        self.api_key, self.read_only_key = api_key, read_only_key
        self.max_content_length = max_content_length  # http.max_content_length
        self.too_large = 0  # requests answered 413
        self.indices: dict[str, _Index] = {}
        self.templates: dict[str, Doc] = {}
        self.pits: dict[str, tuple[str, dict[str, tuple[Doc, int]]]] = {}
        self.requests: list[tuple[str, str]] = []
        self._connections: set[socket.socket] = set()
        self._throttle = 0
        self._item_throttle = 0
        self._seq = 0
        self._lock = threading.RLock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle and test controls ------------------------------------------------------------

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def crash(self) -> None:
        """The node goes away: it stops listening and drops every open connection."""
        self.__exit__()
        with self._lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def throttle(self, n: int) -> None:
        """The next `n` bulk requests answer 429, as a node whose write queue is full does."""
        with self._lock:
            self._throttle = n

    def throttle_items(self, n: int) -> None:
        """The next `n` items of bulk requests answer 429 (a shard's write queue full) while the
        rest of their requests are applied."""
        with self._lock:
            self._item_throttle = n

    def force_merge(self) -> None:
        """Segments merge: the space of deleted documents is given back."""
        with self._lock:
            for index in self.indices.values():
                index.deleted = index.deleted_bytes = 0

    def expire_pits(self) -> None:
        """Every open point in time lapses (its keep_alive ran out)."""
        with self._lock:
            self.pits.clear()

    # -- the HTTP side --------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with standin._lock:
                    standin._connections.add(self.connection)

            def finish(self) -> None:
                with standin._lock:
                    standin._connections.discard(self.connection)
                super().finish()

            def _answer(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with standin._lock:
                    standin.requests.append((self.command, url.path))
                if length > standin.max_content_length:
                    # Netty's aggregator answers before any handler: no body, no product
                    # header, and the connection is closed.
                    with standin._lock:
                        standin.too_large += 1
                    self.send_response(413)
                    self.send_header("Content-Length", "0")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    return
                status, doc = standin._serve(
                    self.command, url.path, query, body, dict(self.headers)
                )
                data = b"" if self.command == "HEAD" else json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("X-Elastic-Product", "Elasticsearch")
                self.send_header(
                    "Content-Type", "application/vnd.elasticsearch+json;compatible-with=9"
                )
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def _authorized(self, headers: Mapping[str, str], write: bool) -> tuple[int, Doc] | None:
        if self.api_key is None:
            return None
        given = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        keys = {f"ApiKey {self.api_key}": True}
        if self.read_only_key:
            keys[f"ApiKey {self.read_only_key}"] = False
        if given not in keys:
            return _error(
                401,
                "security_exception",
                "unable to authenticate with provided credentials and anonymous access is not allowed for this request",
                header={"WWW-Authenticate": ["ApiKey", 'Basic realm="security", charset="UTF-8"']},
            )
        if write and not keys[given]:
            return _error(
                403,
                "security_exception",
                "action [indices:data/write/bulk[s]] is unauthorized for API key id [read-only] of user [whyjob-reader], this action is granted by the index privileges [create_doc,create,index,write,all]",
            )
        return None

    def _serve(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        body: bytes,
        headers: Mapping[str, str],
    ) -> tuple[int, Doc]:
        # Split before decoding: an _id may hold an escaped slash (`east%7Ck8s%2Fevents`).
        parts = [unquote(p) for p in path.split("/") if p]
        write = (
            method in ("PUT", "DELETE") or (parts[-1:] == ["_bulk"]) or "_delete_by_query" in parts
        )
        refused = self._authorized(headers, write and parts[:1] != ["_pit"])
        if refused is not None:
            return refused
        with self._lock:
            if not parts:
                return 200, {
                    "name": "standin-0",
                    "cluster_name": "whyjob-standin",
                    "cluster_uuid": "Jm4PjCNsQ1qUe0Be9M1f3A",
                    "version": _VERSION,
                    "tagline": "You Know, for Search",
                }
            if parts[0] == "_index_template" and method == "PUT":
                self.templates[parts[1]] = json.loads(body)
                return 200, {"acknowledged": True}
            if parts[0] == "_bulk":
                return self._bulk(body, query)
            if parts[0] == "_pit" and method == "DELETE":
                found = json.loads(body).get("id") in self.pits
                self.pits.pop(json.loads(body).get("id"), None)
                return 200, {"succeeded": found, "num_freed": int(found)}
            if parts[0] == "_search":
                return self._search(None, json.loads(body or b"{}"), query)
            name = parts[0]
            if len(parts) == 1:
                if method == "PUT":
                    return self._create_index(name, json.loads(body or b"{}"))
                if method == "HEAD":
                    return (200 if name in self.indices else 404), {}
                if method == "DELETE":
                    if self.indices.pop(name, None) is None:
                        return _error(
                            404,
                            "index_not_found_exception",
                            f"no such index [{name}]",
                            index=name,
                            **{"resource.type": "index_or_alias", "resource.id": name},
                        )
                    return 200, {"acknowledged": True}
            if parts[1:2] == ["_mapping"] and method == "GET":
                return self._get_mappings(name, query)
            if parts[1:2] == ["_refresh"]:  # a comma-separated list of indices, as the API takes
                missing = [n for n in name.split(",") if n not in self.indices]
                if missing:
                    return _error(
                        404,
                        "index_not_found_exception",
                        f"no such index [{missing[0]}]",
                        index=missing[0],
                    )
                for each in name.split(","):
                    self.indices[each].visible = dict(self.indices[each].docs)
                return 200, {"_shards": {"total": 1, "successful": 1, "failed": 0}}
            index = self.indices.get(name)
            if index is None:
                return _error(
                    404,
                    "index_not_found_exception",
                    f"no such index [{name}]",
                    index=name,
                    **{"resource.type": "index_or_alias", "resource.id": name},
                )
            action = parts[1]
            if action == "_mapping" and method == "PUT":
                return self._put_mapping(index, json.loads(body or b"{}"))
            if action == "_refresh":
                index.visible = dict(index.docs)
                return 200, {"_shards": {"total": 1, "successful": 1, "failed": 0}}
            if action == "_search":
                return self._search(index, json.loads(body or b"{}"), query)
            if action == "_count":
                hits = self._matching(index.visible, json.loads(body or b"{}").get("query"))
                return 200, {
                    "count": len(hits),
                    "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                }
            if action == "_pit":
                pit = base64.urlsafe_b64encode(uuid.uuid4().bytes * 3).decode()
                self.pits[pit] = (name, dict(index.visible))
                return 200, {
                    "id": pit,
                    "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
                }
            if action == "_mget":
                ids = json.loads(body).get("ids", [])
                return 200, {"docs": [self._doc_answer(index, i) for i in ids]}
            if action == "_doc" and method == "GET":
                doc = self._doc_answer(index, parts[2])
                return (200 if doc["found"] else 404), doc
            if action == "_delete_by_query":
                gone = self._matching(index.visible, json.loads(body).get("query"))
                for doc_id, _ in gone:
                    index.forget(doc_id)
                    index.visible.pop(doc_id, None)
                return 200, {
                    "took": 1,
                    "timed_out": False,
                    "total": len(gone),
                    "deleted": len(gone),
                    "batches": 1,
                    "version_conflicts": 0,
                    "noops": 0,
                    "failures": [],
                }
            if action == "_stats":
                # As Lucene counts: deleted documents keep their bytes until a merge.
                size = sum(_size(src) for src, _ in index.docs.values()) + index.deleted_bytes
                stats = {
                    "docs": {"count": len(index.docs), "deleted": index.deleted},
                    "store": {
                        "size_in_bytes": size,
                        "total_data_set_size_in_bytes": size,
                        "reserved_in_bytes": 0,
                    },
                }
                return 200, {
                    "_shards": {"total": 1, "successful": 1, "failed": 0},
                    "_all": {"primaries": stats, "total": stats},
                    "indices": {name: {"uuid": index.uuid, "primaries": stats, "total": stats}},
                }
        return _error(
            400,
            "illegal_argument_exception",
            f"request [{method} {path}] is not served by the stand-in",
        )

    def _create_index(self, name: str, spec: Doc) -> tuple[int, Doc]:
        if name in self.indices:
            return _error(
                400,
                "resource_already_exists_exception",
                f"index [{name}/{self.indices[name].uuid}] already exists",
                index=name,
            )
        mappings = spec.get("mappings") or {}
        for template in self.templates.values():
            if any(
                re.fullmatch(p.replace("*", ".*"), name) for p in template.get("index_patterns", [])
            ):
                mappings = template.get("template", {}).get("mappings") or mappings
        self.indices[name] = _Index(name, mappings)
        return 200, {"acknowledged": True, "shards_acknowledged": True, "index": name}

    def _get_mappings(self, names: str, query: Mapping[str, str]) -> tuple[int, Doc]:
        out: Doc = {}
        for name in names.split(","):
            index = self.indices.get(name)
            if index is None:
                if query.get("ignore_unavailable") == "true":
                    continue
                return _error(
                    404,
                    "index_not_found_exception",
                    f"no such index [{name}]",
                    index=name,
                    **{"resource.type": "index_or_alias", "resource.id": name},
                )
            out[name] = {"mappings": index.mappings}
        return 200, out

    def _put_mapping(self, index: _Index, spec: Doc) -> tuple[int, Doc]:
        """New fields are added; a field's type cannot change (400, as the real one refuses)."""
        held = index.properties
        for field, mapping in (spec.get("properties") or {}).items():
            if field in held and held[field].get("type") != mapping.get("type"):
                return _error(
                    400,
                    "illegal_argument_exception",
                    f"mapper [{field}] cannot be changed from type [{held[field].get('type')}] to [{mapping.get('type')}]",
                )
        index.mappings = {
            **index.mappings,
            "properties": {**held, **(spec.get("properties") or {})},
        }
        return 200, {"acknowledged": True}

    def _doc_answer(self, index: _Index, doc_id: str) -> Doc:
        held = index.docs.get(doc_id)
        if held is None:
            return {"_index": index.name, "_id": doc_id, "found": False}
        return {
            "_index": index.name,
            "_id": doc_id,
            "_version": 1,
            "_seq_no": held[1],
            "_primary_term": 1,
            "found": True,
            "_source": held[0],
        }

    # -- writes ---------------------------------------------------------------------------------

    def _bulk(self, body: bytes, query: Mapping[str, str]) -> tuple[int, Doc]:
        if self._throttle > 0:
            self._throttle -= 1
            return _error(
                429,
                "es_rejected_execution_exception",
                "rejected execution of coordinating operation [coordinating_and_primary_bytes=0, replica_bytes=0, all_bytes=0, coordinating_operation_bytes=10485760, max_coordinating_and_primary_bytes=10485760]",
            )
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        items: list[Doc] = []
        touched: set[str] = set()
        position = 0
        while position < len(lines):
            ((op, meta),) = lines[position].items()
            position += 1
            source = None
            if op in ("create", "index", "update"):
                source, position = lines[position], position + 1
            items.append({op: self._bulk_item(op, meta, source)})
            touched.add(meta["_index"])
        if query.get("refresh") in ("true", "wait_for", ""):
            for name in touched:
                if name in self.indices:
                    self.indices[name].visible = dict(self.indices[name].docs)
        errors = any("error" in next(iter(item.values())) for item in items)
        return 200, {"errors": errors, "took": 3, "items": items}

    def _bulk_item(self, op: str, meta: Doc, source: Doc | None) -> Doc:
        name, doc_id = meta["_index"], meta.get("_id") or uuid.uuid4().hex
        if name not in self.indices:
            self._create_index(name, {})
        index = self.indices[name]
        held = index.docs.get(doc_id)
        answer: Doc = {"_index": name, "_id": doc_id, "_version": 1, "_primary_term": 1}
        if self._item_throttle > 0:
            self._item_throttle -= 1
            return {
                "_index": name,
                "_id": doc_id,
                "status": 429,
                "error": {
                    "type": "es_rejected_execution_exception",
                    "reason": "rejected execution of primary operation [coordinating_and_primary_bytes=0, replica_bytes=0, all_bytes=0, primary_operation_bytes=1048576, max_coordinating_and_primary_bytes=10485760]",
                },
            }
        if source is not None:
            refused = _refusal(index, doc_id, source)
            if refused is not None:
                return {"_index": name, "_id": doc_id, "status": 400, "error": refused}
        conflict = None
        if op == "create" and held is not None:
            conflict = (
                f"[{doc_id}]: version conflict, document already exists (current version [1])"
            )
        elif "if_seq_no" in meta and (held is None or held[1] != meta["if_seq_no"]):
            current = "[-2]" if held is None else f"[{held[1]}]"
            conflict = f"[{doc_id}]: version conflict, required seqNo [{meta['if_seq_no']}], primary term [1]. current document has seqNo {current} and primary term [1]"
        if conflict is not None:
            return {
                **answer,
                "status": 409,
                "error": {
                    "type": "version_conflict_engine_exception",
                    "reason": conflict,
                    "index_uuid": index.uuid,
                    "shard": "0",
                    "index": name,
                },
            }
        if op == "delete":
            index.forget(doc_id)
            return {
                **answer,
                "result": "deleted" if held else "not_found",
                "status": 200 if held else 404,
            }
        self._seq += 1
        index.forget(doc_id)  # an overwrite leaves the old version deleted in its segment
        index.docs[doc_id] = (source or {}, self._seq)
        return {
            **answer,
            "result": "created" if held is None else "updated",
            "_seq_no": self._seq,
            "status": 201 if held is None else 200,
        }

    # -- search ---------------------------------------------------------------------------------

    def _search(
        self, index: _Index | None, request: Doc, query: Mapping[str, str]
    ) -> tuple[int, Doc]:
        pit = request.get("pit")
        mappings: Doc = index.properties if index is not None else {}
        index_name = index.name if index is not None else ""
        if pit is not None:
            held = self.pits.get(pit.get("id"))
            if held is None:
                return _error(
                    404,
                    "search_phase_execution_exception",
                    "all shards failed",
                    phase="query",
                    caused_by={
                        "type": "search_context_missing_exception",
                        "reason": "No search context found for id [42]",
                    },
                )
            docs, index_name = held[1], held[0]
            if held[0] in self.indices:
                mappings = self.indices[held[0]].properties
        elif index is not None:
            docs = index.visible
        else:
            return _error(
                400, "illegal_argument_exception", "a search needs an index or a point in time"
            )
        start = int(request.get("from", query.get("from", 0)))
        size = int(request.get("size", query.get("size", 10)))
        if start + size > _MAX_RESULT_WINDOW:
            return _window_too_large(start + size, index_name)
        terms = _most_terms(request.get("query"))
        if terms > _MAX_TERMS_COUNT:
            return _error(
                400,
                "illegal_argument_exception",
                f"The number of terms [{terms}] used in the Terms Query request has exceeded the allowed maximum of [{_MAX_TERMS_COUNT}]. This maximum can be set by changing the [index.max_terms_count] index level setting.",
            )
        hits = self._matching(docs, request.get("query"))
        keys: list[tuple[str, str]] = []
        for spec in request.get("sort") or []:
            field, order = next(iter(spec.items())) if isinstance(spec, dict) else (spec, "asc")
            keys.append((field, order.get("order", "asc") if isinstance(order, dict) else order))
        if pit is not None and keys and "_shard_doc" not in {f for f, _ in keys}:
            keys.append(("_shard_doc", "asc"))  # a point in time's implicit tiebreaker

        def value(hit: tuple[str, tuple[Doc, int]], field: str) -> Any:
            if field == "_id":
                return hit[0]
            if field == "_shard_doc":
                return hit[1][1]  # unique per document, as (shard, Lucene doc id) is
            return hit[1][0].get(field)

        # One stable pass per key, last key first; missing values sort last either way.
        for field, order in reversed(keys):
            present = [(value(h, field), h) for h in hits]
            ordered = sorted(
                (pair for pair in present if pair[0] is not None),
                key=lambda pair: pair[0],
                reverse=order == "desc",
            )
            hits = [h for _, h in ordered] + [h for v, h in present if v is None]
        after = request.get("search_after")
        if after is not None:
            orders = [o for _, o in keys]
            hits = [h for h in hits if _after([value(h, f) for f, _ in keys], after, orders)]
        total = len(hits)
        page = hits[start : start + size]
        answer: Doc = {
            "took": 2,
            "timed_out": False,
            "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0},
            "hits": {
                "total": {"value": total, "relation": "eq"},
                "max_score": None,
                "hits": [
                    {
                        "_index": index_name,
                        "_id": hit[0],
                        "_score": None,
                        "_source": hit[1][0],
                        **({"sort": [value(hit, f) for f, _ in keys]} if keys else {}),
                    }
                    for hit in page
                ],
            },
        }
        if pit is not None:
            answer["pit_id"] = pit["id"]
        if "aggs" in request or "aggregations" in request:
            answer["aggregations"] = self._aggregate(
                request.get("aggs") or request["aggregations"], hits, mappings
            )
        return 200, answer

    def _aggregate(self, aggs: Doc, hits: list[tuple[str, tuple[Doc, int]]], mappings: Doc) -> Doc:
        out: Doc = {}
        for name, spec in aggs.items():
            ((kind, params),) = ((k, v) for k, v in spec.items() if k != "aggs")
            values = [h[1][0].get(params["field"]) for h in hits]
            present = [v for v in values if v is not None]
            if kind in ("min", "max"):
                # Computed in doubles, as Lucene does: a long past 2**53 comes back rounded.
                found = float((min if kind == "min" else max)(present)) if present else None
                metric: Doc = {"value": found}
                if found is not None and mappings.get(params["field"], {}).get("type") == "date":
                    metric["value_as_string"] = str(int(found))  # epoch_millis
                out[name] = metric
            elif kind == "terms":
                counts: dict[Any, int] = {}
                for v in present:
                    counts[v] = counts.get(v, 0) + 1
                ordered = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[
                    : params.get("size", 10)
                ]
                buckets = []
                for key, count in ordered:
                    bucket: Doc = {"key": key, "doc_count": count}
                    if "aggs" in spec:
                        subset = [h for h in hits if h[1][0].get(params["field"]) == key]
                        bucket.update(self._aggregate(spec["aggs"], subset, mappings))
                    buckets.append(bucket)
                out[name] = {
                    "doc_count_error_upper_bound": 0,
                    "sum_other_doc_count": max(0, len(present) - sum(c for _, c in ordered)),
                    "buckets": buckets,
                }
        return out

    def _matching(
        self, docs: Mapping[str, tuple[Doc, int]], query: Doc | None
    ) -> list[tuple[str, tuple[Doc, int]]]:
        return [(doc_id, held) for doc_id, held in docs.items() if _matches(doc_id, held[0], query)]


_MAX_RESULT_WINDOW = 10_000  # index.max_result_window
_MAX_TERM_BYTES = 32_766  # Lucene's longest term
_MAX_TERMS_COUNT = 65_536  # index.max_terms_count: values in one terms query


def _most_terms(query: Any) -> int:
    """The longest value list of any terms query in `query`."""
    if isinstance(query, list):
        return max((_most_terms(q) for q in query), default=0)
    if not isinstance(query, dict):
        return 0
    here = 0
    if isinstance(query.get("terms"), dict):
        here = max((len(v) for v in query["terms"].values() if isinstance(v, list)), default=0)
    return max([here, *(_most_terms(v) for k, v in query.items() if k != "terms")])


def _size(src: Doc) -> int:
    return len(json.dumps(src))


def _window_too_large(asked: int, index: str) -> tuple[int, Doc]:
    reason = (
        "Result window is too large, from + size must be less than or equal to: "
        f"[{_MAX_RESULT_WINDOW}] but was [{asked}]. See the scroll api for a more efficient "
        "way to request large data sets. This limit can be set by changing the "
        "[index.max_result_window] index level setting."
    )
    cause = {"type": "illegal_argument_exception", "reason": reason}
    return 400, {
        "error": {
            "root_cause": [cause],
            "type": "search_phase_execution_exception",
            "reason": "all shards failed",
            "phase": "query",
            "grouped": True,
            "failed_shards": [{"shard": 0, "index": index, "node": "standin-0", "reason": cause}],
            "caused_by": cause,
        },
        "status": 400,
    }


def _refusal(index: _Index, doc_id: str, source: Doc) -> Doc | None:
    """Why a document does not fit a strict mapping (the error of its bulk item), or None."""
    properties = index.properties
    if not properties:
        return None
    for field, value in source.items():
        mapping = properties.get(field)
        if mapping is None:
            if index.mappings.get("dynamic") == "strict":
                return {
                    "type": "strict_dynamic_mapping_exception",
                    "reason": f"[1:2] mapping set to strict, dynamic introduction of [{field}] within [_doc] is not allowed",
                }
            continue
        kind = mapping.get("type")
        if value is None:
            continue  # an explicit null is indexed as no value, whatever the type
        bad = _unparsable(kind, value)
        if bad is not None:
            return {
                "type": "document_parsing_exception",
                "reason": f"[1:2] failed to parse field [{field}] of type [{kind}] in document with id '{doc_id}'. Preview of field's value: '{str(value)[:40]}'",
                "caused_by": bad,
            }
        if kind in ("keyword", "flattened") and mapping.get("index", True):
            for term in _leaves(value):
                length = len(str(term).encode("utf-8", "surrogatepass"))
                if length > _MAX_TERM_BYTES:
                    return {
                        "type": "illegal_argument_exception",
                        "reason": f"Document contains at least one immense term in field=\"{field}\" (whose UTF8 encoding is longer than the max length {_MAX_TERM_BYTES}), all of which were skipped. Please correct the analyzer to not produce such terms. The prefix of the first immense term is: '{list(str(term).encode()[:10])}...', original message: bytes can be at most {_MAX_TERM_BYTES} in length; got {length}",
                        "caused_by": {
                            "type": "max_bytes_length_exceeded_exception",
                            "reason": f"bytes can be at most {_MAX_TERM_BYTES} in length; got {length}",
                        },
                    }
    return None


def _unparsable(kind: Any, value: Any) -> Doc | None:
    if kind in ("long", "short", "integer", "date"):
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return {"type": "illegal_argument_exception", "reason": f"Cannot parse [{value}]"}
        try:
            number = float(value)
        except ValueError:
            return {"type": "number_format_exception", "reason": f'For input string: "{value}"'}
        limit = {"short": 2**15, "integer": 2**31}.get(str(kind), 2**63)
        if not -limit <= number < limit:
            return {
                "type": "input_coercion_exception",
                "reason": f"Numeric value ({value}) out of range of {kind}",
            }
    if kind == "keyword" and isinstance(value, dict | list):
        return {
            "type": "illegal_argument_exception",
            "reason": "Can't get text on a START_OBJECT",
        }
    if kind == "flattened" and not isinstance(value, dict):
        return {
            "type": "parsing_exception",
            "reason": "[flattened] fields can only contain objects",
        }
    return None


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for each in value.values():
            yield from _leaves(each)
    elif isinstance(value, list):
        for each in value:
            yield from _leaves(each)
    elif value is not None:
        yield value


def _after(values: list[Any], after: list[Any], orders: list[str]) -> bool:
    for value, mark, order in zip(values, after, orders, strict=False):
        if value == mark:
            continue
        if value is None:
            return True
        if mark is None:
            return False
        return bool(value > mark) if order == "asc" else bool(value < mark)
    return False


def _matches(doc_id: str, src: Doc, query: Doc | None) -> bool:
    if not query or "match_all" in query:
        return True
    ((kind, spec),) = query.items()
    if kind == "bool":
        must = spec.get("filter", []) + spec.get("must", [])
        must = must if isinstance(must, list) else [must]
        if not all(_matches(doc_id, src, q) for q in must):
            return False
        nots = spec.get("must_not", [])
        if any(_matches(doc_id, src, q) for q in (nots if isinstance(nots, list) else [nots])):
            return False
        should = spec.get("should", [])
        if should:
            needed = int(spec.get("minimum_should_match", 1))
            return sum(_matches(doc_id, src, q) for q in should) >= needed
        return True
    if kind == "term":
        ((field, value),) = spec.items()
        value = value["value"] if isinstance(value, dict) else value
        return bool(src.get(field) == value)
    if kind == "terms":
        ((field, values),) = spec.items()
        return src.get(field) in values
    if kind == "ids":
        return doc_id in spec["values"]
    if kind == "exists":
        return src.get(spec["field"]) is not None
    if kind == "prefix":
        ((field, value),) = spec.items()
        value = value["value"] if isinstance(value, dict) else value
        return isinstance(src.get(field), str) and bool(src[field].startswith(value))
    if kind == "range":
        ((field, bounds),) = spec.items()
        value = src.get(field)
        if value is None:
            return False
        ops = {"gt": value.__gt__, "gte": value.__ge__, "lt": value.__lt__, "lte": value.__le__}
        return all(ops[op](bound) for op, bound in bounds.items() if op in ops)
    if kind == "simple_query_string":
        fields = spec.get("fields") or ["message"]
        text = " ".join(str(src.get(f) or "") for f in fields).lower()
        words = set(re.findall(r"\w+", text))
        return _simple(spec["query"], text, words)
    raise ValueError(f"query [{kind}] is not served by the stand-in")


def _simple(expression: str, text: str, words: set[str]) -> bool:
    """simple_query_string: `"phrases"`, words, `-` excludes, `|` ors, the rest are ANDed."""
    for branch in expression.split("|"):
        ok = True
        for negate, phrase, word in re.findall(r'(-?)(?:"([^"]*)"|(\S+))', branch):
            if phrase:
                tokens = re.findall(r"\w+", phrase.lower())
                found = (
                    re.search(r"\W+".join(map(re.escape, tokens)), text) is not None
                    if tokens
                    else True
                )
            else:
                cleaned = word.lstrip("+").lower()
                prefix = cleaned.endswith("*")
                token = cleaned.rstrip("*")
                found = any(w.startswith(token) for w in words) if prefix else token in words
            if (not found) if not negate else found:
                ok = False
        if ok:
            return True
    return False


def _iter_lines(body: bytes) -> Iterator[Doc]:
    for line in body.splitlines():
        if line.strip():
            yield json.loads(line)
