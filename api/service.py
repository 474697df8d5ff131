"""What the HTTP surfaces ask of the index, with each answer checked against who asks.

Everything goes through the one Explanation model (explain/engine.py): the API's JSON, the web
timeline and Slack render it, none computes its own diagnosis. Explanations are cached: while
nothing is committed to the index they stay valid; while a collector writes, each is reused
for at most `cache_s` (an index page lists dozens of experiments, a timeline page asks twice,
and fifty people opening the same incident should cost one explain). Concurrent misses for one
experiment wait for a single computation instead of each running it; once an explanation is
cached, an expired one is answered at once and refreshed in the background for the next request
(stale-while-revalidate: so nobody queues behind refreshes, at the price of one answer that is
older than `cache_s` by the time the refresh takes).

An experiment in a namespace the principal may not read answers exactly like one that does not
exist (404), so names do not leak either.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from whyjob.api.access import Principal
from whyjob.core.errors import IndexProblem, NotFound
from whyjob.core.evidence import evidence_document, parse_id
from whyjob.core.index import ChangeWatch, Index, open_index
from whyjob.core.timeutil import format_ts
from whyjob.explain.engine import explain_experiment
from whyjob.explain.model import Explanation
from whyjob.explain.preflight import LOOKBACK_MS, WINDOW_MS
from whyjob.explain.ruleset import RuleSet

if TYPE_CHECKING:
    from whyjob.core.index.elastic import ElasticSettings
    from whyjob.explain.fleetmodel import Fleet
    from whyjob.explain.nodehistory import NodeHistory

__all__ = ["Service", "status_of"]

_log = logging.getLogger(__name__)


def status_of(explanation: Explanation) -> str:
    """running | failed | looping | completed | pending | unknown, for lists and badges."""
    if explanation.loop.looping:
        return "looping"
    return explanation.verdict.outcome


@dataclass(slots=True)
class _Cached:
    at: float
    generation: tuple[int, ...]
    explanation: Explanation
    document: bytes | None = None  # the JSON, made on first request


_ANY = "\x00any"  # the cache key of an explanation asked for without naming a cluster
_MAX_CACHED = 20_000  # explanations kept; beyond it the oldest half goes
# An expired explanation is answered while it is refreshed only this many cache_s old at most;
# older (a refresh keeps failing), the request computes it itself and sees the error.
_STALE_LIMIT = 4
_FLEETS_KEPT = 8  # fleet views kept (scopes and windows asked for)


class Service:
    def __init__(
        self,
        index_path: Path | ElasticSettings,
        rules: RuleSet,
        *,
        cache_s: float = 30.0,
        preflight_ms: tuple[int, int] = (WINDOW_MS, LOOKBACK_MS),
    ) -> None:
        self.index_path = index_path
        self.rules = rules
        self.cache_s = cache_s
        self.preflight_ms = preflight_ms  # the default window and look-back
        self._cache: dict[tuple[str, str, str], _Cached] = {}
        self._lock = threading.Lock()
        self._computing: dict[tuple[str, str, str], threading.Lock] = {}
        # SQLite tells a commit by any process cheaply (data_version); Elasticsearch by its
        # write counter, asked at most every half second.
        self._changes = ChangeWatch(index_path) if isinstance(index_path, Path) else None
        self._counted: tuple[float, tuple[int, ...]] = (0.0, (0,))
        self._refreshing: set[tuple[str, str, str]] = set()
        self._refresh_queue: queue.Queue[tuple[str, str, str]] = queue.Queue()
        self._refresher: threading.Thread | None = None
        # One explain at a time: it is CPU-bound Python, and threads taking turns at the GIL
        # (and at SQLite's mutexes) cost more than they overlap: 40 at once took 3x the CPU.
        self._explaining = threading.Lock()
        self._explain_index: Index | None = None
        self._explain_inode = -1
        # (scope, window start, window end) -> (when computed, index generation, fleet), the
        # newest few only; built one at a time, apart from explains (a cold one takes seconds).
        self._fleets: OrderedDict[tuple[str, int, int], tuple[float, tuple[int, ...], Fleet]] = (
            OrderedDict()
        )
        self._building_fleet = threading.Lock()

    def _generation(self) -> tuple[int, ...]:
        """Changes whenever another connection has committed to the index (core/index/changes.py)."""
        if self._changes is not None:
            return self._changes.token()
        at, token = self._counted
        if time.monotonic() - at > 0.5:
            with self._index() as index:
                token = (index.last_seq(),)
            self._counted = (time.monotonic(), token)
        return token

    def _fresh(self, key: tuple[str, str, str], generation: tuple[int, ...]) -> Explanation | None:
        if self.cache_s <= 0:
            return None
        with self._lock:
            cached = self._cache.get(key)
        if cached is None:
            return None
        if cached.generation == generation or time.monotonic() - cached.at < self.cache_s:
            return cached.explanation
        return None

    @contextmanager
    def _index(self) -> Iterator[Index]:
        index = open_index(self.index_path, readonly=True)
        try:
            yield index
        finally:
            index.close()

    # -- experiments ---------------------------------------------------------------------------

    def explanation(
        self,
        principal: Principal,
        namespace: str,
        name: str,
        *,
        current: bool = False,
        cluster: str | None = None,
    ) -> Explanation:
        """The experiment's explanation; `current`: never an expired one, even if that means
        waiting for it (the loop watch and notifications must see a failure as soon as it is
        in the index, not one round later); `cluster` picks one of several clusters' (""
        the one no cluster was named for)."""
        if not principal.may_read(namespace):
            raise NotFound(f"no experiment {name!r} in namespace {namespace!r}")
        key = (namespace, name, _ANY if cluster is None else cluster)
        generation = self._generation()
        found = self._fresh(key, generation)
        if found is not None:
            return found
        if self.cache_s <= 0:
            return self._explain(namespace, name, cluster)
        with self._lock:
            stale = self._cache.get(key)
            if (
                stale is not None
                and not current
                and time.monotonic() - stale.at < _STALE_LIMIT * self.cache_s
            ):
                # Stale-while-revalidate: the previous answer now, a fresh one computed in the
                # background for the next request, so nobody waits in line behind refreshes.
                if key not in self._refreshing:
                    self._refreshing.add(key)
                    self._refresh_queue.put(key)
                    self._start_refresher()
                return stale.explanation
            computing = self._computing.setdefault(key, threading.Lock())
        try:
            with computing:
                found = self._fresh(key, generation)  # a request just before may have made it
                if found is not None:
                    return found
                started = time.monotonic()
                explanation = self._explain(namespace, name, cluster)
                self._store(key, generation, explanation, started)
                return explanation
        finally:
            with self._lock:
                if self._computing.get(key) is computing:  # not a later request's lock
                    del self._computing[key]

    def _store(
        self,
        key: tuple[str, str, str],
        generation: tuple[int, ...],
        explanation: Explanation,
        started: float,
    ) -> None:
        """Cache an explanation whose reading began at `started`, unless a newer one is in."""
        with self._lock:
            held = self._cache.get(key)
            if held is not None and held.at > started:
                return  # read after this one began: it knows at least as much
            self._cache.pop(key, None)  # re-inserted last: the dict stays in age order
            self._cache[key] = _Cached(started, generation, explanation)
            if len(self._cache) > _MAX_CACHED:
                for old in list(self._cache)[: _MAX_CACHED // 2]:
                    del self._cache[old]

    def _start_refresher(self) -> None:
        """Called with the lock held."""
        if self._refresher is None or not self._refresher.is_alive():
            refresher = threading.Thread(
                target=self._refresh_forever, name="whyjob-explain-refresh", daemon=True
            )
            refresher.start()
            self._refresher = refresher

    def _refresh_forever(self) -> None:
        while True:
            key = self._refresh_queue.get()
            try:
                generation = self._generation()
                if self._fresh(key, generation) is not None:
                    continue  # a request has made it meanwhile
                started = time.monotonic()
                namespace, name, scope = key
                explanation = self._explain(namespace, name, None if scope == _ANY else scope)
            except (NotFound, IndexProblem):  # gone, or no index: stop answering from memory
                with self._lock:
                    self._cache.pop(key, None)
            except Exception:  # the previous answer stays, for at most _STALE_LIMIT x cache_s
                _log.exception("refreshing the explanation of %s/%s", key[0], key[1])
            else:
                self._store(key, generation, explanation, started)
            finally:
                with self._lock:
                    self._refreshing.discard(key)

    def explanation_json(
        self, principal: Principal, namespace: str, name: str, cluster: str | None = None
    ) -> bytes:
        """The explanation as JSON bytes, serialised once per cached explanation."""
        explanation = self.explanation(principal, namespace, name, cluster=cluster)
        with self._lock:
            cached = self._cache.get((namespace, name, _ANY if cluster is None else cluster))
        if cached is not None and cached.explanation is explanation:
            if cached.document is None:
                cached.document = orjson.dumps(explanation.to_json())
            return cached.document
        return orjson.dumps(explanation.to_json())

    def _explain(self, namespace: str, name: str, cluster: str | None = None) -> Explanation:
        with self._explaining:
            index = self._reader()
            if not index.experiments(name=name, namespace=namespace, limit=1, cluster=cluster):
                raise NotFound(f"no experiment {name!r} in namespace {namespace!r}")
            return explain_experiment(index, self.rules, name, namespace, cluster=cluster)

    def _reader(self) -> Index:
        """The explains' own connection, kept open (called under `_explaining`): its page
        cache stays warm, which a connection per request would start empty each time (a
        fifth of an explain's CPU). Opened again when the index file is replaced."""
        try:
            inode = self.index_path.stat().st_ino if isinstance(self.index_path, Path) else 0
        except OSError:
            inode = -1
        if self._explain_index is not None and inode != self._explain_inode:
            self._explain_index.close()
            self._explain_index = None
        if self._explain_index is None:
            self._explain_index = open_index(self.index_path, readonly=True)  # may raise
            self._explain_inode = inode
        return self._explain_index

    def experiments(
        self,
        principal: Principal,
        query: str | None = None,
        status: str | None = None,
        limit: int = 200,
    ) -> list[dict[str, Any]]:
        """The experiments the principal may read, newest first, with their status."""
        with self._index() as index:
            records = [r for r in index.experiments(limit=5000) if principal.may_read(r.namespace)]
        if query:
            needle = query.lower()
            records = [
                r for r in records if needle in r.name.lower() or needle in r.namespace.lower()
            ]
        out = []
        for record in records:
            explanation = self.explanation(
                principal, record.namespace, record.name, cluster=record.cluster
            )
            row = {
                "name": record.name,
                "namespace": record.namespace,
                "cluster": record.cluster or None,
                "launcher": record.launcher,
                "first_seen": format_ts(record.first_seen),
                "last_seen": format_ts(record.last_seen),
                "status": status_of(explanation),
                "category": explanation.verdict.category,
                "grade": explanation.verdict.grade,
                "summary": explanation.verdict.summary,
                "restarts": explanation.loop.restarts,
                "gpu_hours_lost": round(explanation.gpu_hours.lost, 1),
            }
            if status is None or row["status"] == status:
                out.append(row)
            if len(out) >= limit:
                break
        return out

    def recent(self, since_ms: int) -> list[tuple[str, str, str]]:
        """(namespace, name, cluster) of the experiments seen since then, unexplained."""
        with self._index() as index:
            return [
                (r.namespace, r.name, r.cluster)
                for r in index.experiments(limit=100_000)
                if r.last_seen >= since_ms
            ]

    def pod_labels(self, uid: str) -> dict[str, str]:
        """A pod's labels (for routing notifications by label or owner)."""
        with self._index() as index:
            pod = index.pod(uid)
        return {str(k): str(v) for k, v in (pod.labels or {}).items()} if pod else {}

    # -- the fleet ---------------------------------------------------------------------------

    def fleet(self, principal: Principal, since: str, until: str | None) -> Fleet:
        """The nodes and GPUs that keep killing jobs, over the experiments the principal may
        read (others are counted only). Cached like explanations; each experiment's part is
        kept in the index too, so only what changed since any earlier view is explained."""
        from whyjob.explain.fleet import build_fleet, fleet_window

        scope = "*" if principal.everything else ",".join(sorted(principal.namespaces))
        readable = None if principal.everything else principal.may_read
        with self._index() as index:
            # ValueError: the caller's to tell. Keyed by the window, however it was written.
            start, end = fleet_window(index, since, until, readable=readable)
        key = (scope, start, end)
        generation = self._generation()
        with self._lock:
            held = self._fleets.get(key)
        if held is not None and (
            held[1] == generation or time.monotonic() - held[0] < self.cache_s
        ):
            return held[2]
        started = time.monotonic()
        with self._building_fleet, self._writer() as index:
            fleet = build_fleet(index, self.rules, since=start, until=end, readable=readable)
        with self._lock:
            self._fleets[key] = (started, generation, fleet)
            self._fleets.move_to_end(key)
            while len(self._fleets) > _FLEETS_KEPT:
                self._fleets.popitem(last=False)
        return fleet

    def node_history(
        self, principal: Principal, node: str, since: str, until: str | None
    ) -> NodeHistory:
        from whyjob.explain.nodehistory import node_history

        fleet = self.fleet(principal, since, until)
        with self._index() as index:
            history = node_history(index, self.rules, fleet, node)
        if not history.entries and fleet.node(node) is None:
            raise NotFound(f"nothing about node {node!r} in this window")
        return history

    @contextmanager
    def _writer(self) -> Iterator[Index]:
        """A connection that may keep the fleet's per-experiment parts (a read-only file or
        mount still answers, without keeping them)."""
        try:
            index = open_index(self.index_path, readonly=False)
        except (IndexProblem, OSError):
            index = open_index(self.index_path, readonly=True)
        try:
            yield index
        finally:
            index.close()

    # -- evidence ------------------------------------------------------------------------------

    def preflight(
        self, node: str, *, now: int, window_ms: int | None, lookback_ms: int | None
    ) -> dict[str, Any]:
        """Is the node safe to start on: node-level evidence only, so anyone signed in may ask."""
        from whyjob.explain.preflight import preflight

        with self._index() as index:
            result = preflight(
                index,
                self.rules,
                node,
                now=now,
                window_ms=window_ms or self.preflight_ms[0],
                lookback_ms=lookback_ms or self.preflight_ms[1],
            )
        return result.to_json()

    def evidence(self, principal: Principal, public_id: str) -> dict[str, Any]:
        """One record and its raw source, if the principal may see what it is about: its
        namespace, or for a node's, GPU's or instance's record, a pod of theirs on that node."""
        try:
            number = parse_id(public_id)
        except ValueError:
            raise NotFound(f"no evidence {public_id!r}") from None
        with self._index() as index:
            found = index.get([number])
            if not found or not self._visible(index, principal, found[0]):
                raise NotFound(f"no evidence {public_id!r}")
            record = found[0]
            raw = index.raw(number)
        return evidence_document(record, raw)

    def _visible(self, index: Index, principal: Principal, record: Any) -> bool:
        if principal.everything:
            return True
        namespace = record.namespace
        if namespace is None and record.pod_uid:
            pod = index.pod(record.pod_uid)
            if pod is None:
                return False  # about a pod whyjob cannot place: nobody's but an operator's
            namespace = pod.namespace
        if namespace is not None:
            return principal.may_read(namespace)
        node = record.node
        if node is None and (record.gpu_uuid or record.instance_id):
            kind, subject = (
                ("gpu.node", record.gpu_uuid)
                if record.gpu_uuid
                else ("node.instance", record.instance_id)
            )
            bound = (
                index.bindings(kind, subjects=[subject])
                if kind == "gpu.node"
                else index.bindings(kind, objects=[subject])
            )
            node = (bound[0].object if kind == "gpu.node" else bound[0].subject) if bound else None
        if node is None or not principal.namespaces:
            return False
        # A node's records are theirs only around the time one of their pods was on it.
        margin = 86_400_000
        pods = index.pods_on_node(node, record.ts - margin, record.ts + margin)
        return any(principal.may_read(p.namespace) for p in pods)
