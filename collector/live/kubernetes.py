"""Kubernetes: list and watch Events (both API groups), Pods and Nodes; capture at failure time.

One thread per resource runs the informer loop the API server expects: list (in pages), then
watch from the list's resourceVersion with bookmarks, resuming from the last resourceVersion
after a dropped connection and relisting after 410 Gone. Objects go through the same parsers as
`whyjob ingest`, so live and offline evidence are the same records with the same ids: what a
relist or a restart reads again is dropped by the index.

The resourceVersion a resource resumes from is committed with the records read up to it, so a
collector killed at any point resumes where its index says and loses nothing the API server
still has.

Watches stream raw JSON (`_preload_content=False`) instead of the client's model objects:
the parsers want dicts, and deserialising into models costs more than everything else here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

import orjson
import tenacity
from urllib3.exceptions import HTTPError

from whyjob.collector.ingest import podlogs
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected, guarded
from whyjob.collector.ingest.formats import parse_k8s_object
from whyjob.collector.live.backoff import Backoff
from whyjob.collector.live.health import Health
from whyjob.collector.live.sink import Batch, Writer
from whyjob.core.evidence import Evidence
from whyjob.core.experiments import recognise
from whyjob.core.timeutil import parse_ts

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["RESOURCES", "KubernetesCollector", "KubernetesOptions", "Resource"]


@dataclass(frozen=True, slots=True)
class Resource:
    """A watched collection: the API class and list method, and the kind of its items."""

    name: str
    api: str  # kubernetes.client class name
    method: str  # its cluster-wide list method
    kind: str


RESOURCES: Final = (
    Resource("events", "CoreV1Api", "list_event_for_all_namespaces", "Event"),
    Resource("events.k8s.io", "EventsV1Api", "list_event_for_all_namespaces", "Event"),
    Resource("pods", "CoreV1Api", "list_pod_for_all_namespaces", "Pod"),
    Resource("nodes", "CoreV1Api", "list_node", "Node"),
)


@dataclass(frozen=True, slots=True)
class KubernetesOptions:
    """`collectors.kubernetes` in the collect config file (docs/collect.md)."""

    # core/v1 Events and events.k8s.io/v1 Events are the same objects seen through two APIs
    # (they become the same records); the newer API alone loses nothing.
    resources: tuple[str, ...] = ("events.k8s.io", "pods", "nodes")
    page_size: int = 500
    watch_timeout_s: int = 300  # the server ends a watch after this; the loop starts another
    # Bookmarks arrive about once a minute on a quiet watch: this long without a byte (not even
    # a bookmark) means the watch hung, and it is reopened from the last resourceVersion.
    watch_silence_s: float = 180.0
    batch_size: int = 1000  # records per batch handed to the writer
    batch_wait_s: float = 0.25  # or this long after the first record of a batch
    capture: bool = True  # capture at failure time
    capture_tail_lines: int = 500
    capture_all_pods: bool = False  # capture for every pod, not only experiment members
    capture_workers: int = 4
    ingest: IngestOptions = field(default_factory=IngestOptions)


# A 503 or a dropped connection on /log is retried: the log disappears with the next restart.
_CAPTURE_TRIES = 4
_CONNECTION_ERRORS = (OSError, HTTPError)  # urllib3's errors, and the socket's
_CAPTURE_KEY = "capture/"
_DONE_KEY = "capture-done/"
# A capture owed across a restart is still tried this long after its run ended (the kubelet
# keeps a dead container's log until the next restart of that container, or the pod's deletion).
_CAPTURE_OWED_S = 6 * 3600.0


class WatchError(RuntimeError):
    """The server ended a watch with an ERROR event other than 410."""


class Expired(Exception):
    """The resourceVersion to resume from is older than the server keeps (410 Gone)."""


def _checkpoint_key(resource: Resource) -> str:
    return f"kubernetes/{resource.name}"


def _lines(response: Any) -> Iterator[bytes]:
    """Lines of a chunked watch response, as they arrive."""
    pending = b""
    for chunk in response.stream(65536, decode_content=False):
        if not chunk:
            continue
        pending += chunk
        if b"\n" not in chunk:
            continue
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line)
    if pending.strip():
        yield pending


def _transient(exc: BaseException) -> bool:
    """A 5xx or 429, or the connection failing: worth another try. Anything else (a 4xx: the
    log is gone; a bug) is not."""
    status = getattr(exc, "status", None)
    if status is None:
        return isinstance(exc, _CONNECTION_ERRORS)
    return bool(status >= 500 or status == 429)


def _retry_after(exc: Any) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class _Pending:
    """What one watch has read and not yet handed over, with the resourceVersion it reached."""

    def __init__(self, resource: Resource) -> None:
        self.resource = resource
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.items: list[Item] = []
        self.rv: str | None = None
        self.first_at = 0.0
        self.last_ts: int | None = None

    @property
    def size(self) -> int:
        return len(self.items)

    def add(self, items: list[Item], rv: str) -> None:
        with self.lock:
            if not self.items:
                self.first_at = time.monotonic()
            self.items.extend(items)
            self.rv = rv
            stamps = [i.ts for i in items if isinstance(i, Evidence)]
            if stamps:
                self.last_ts = max(self.last_ts or 0, *stamps)


class _Changes:
    """Keeps the last state signature of each object, so that an update that changes nothing
    whyjob reads (a heartbeat, a probe) does not store another snapshot."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self._lock = threading.Lock()

    def changed(self, key: str, signature: Any) -> bool:
        digest = hash(orjson.dumps(signature, option=orjson.OPT_SORT_KEYS))
        with self._lock:
            if self._seen.get(key) == digest:
                return False
            self._seen[key] = digest
            return True

    def forget(self, key: str) -> None:
        with self._lock:
            self._seen.pop(key, None)


def _pod_signature(pod: Mapping[str, Any]) -> Any:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return (
        spec.get("nodeName"),
        meta.get("deletionTimestamp"),
        status.get("phase"),
        status.get("reason"),
        [(c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or ()],
        [
            (c.get("name"), c.get("restartCount"), c.get("state"), c.get("lastState"))
            for key in ("initContainerStatuses", "containerStatuses")
            for c in status.get(key) or ()
        ],
    )


def _node_signature(node: Mapping[str, Any]) -> Any:
    meta, spec, status = (
        node.get("metadata") or {},
        node.get("spec") or {},
        node.get("status") or {},
    )
    return (
        meta.get("labels"),
        spec.get("taints"),
        spec.get("unschedulable"),
        [(c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or ()],
    )


class KubernetesCollector:
    """Follows the cluster through `api_client` (a configured `kubernetes.client.ApiClient`)."""

    name = "kubernetes"

    def __init__(
        self,
        api_client: ApiClient,
        writer: Writer,
        health: Health,
        checkpoints: Mapping[str, str],
        options: KubernetesOptions | None = None,
    ) -> None:
        from kubernetes import client as k8s

        self.options = options or KubernetesOptions()
        self.writer = writer
        self.health = health
        self._core = k8s.CoreV1Api(api_client)
        self._apis: dict[str, Any] = {
            "CoreV1Api": self._core,
            "EventsV1Api": k8s.EventsV1Api(api_client),
        }
        self._resume = {r.name: checkpoints.get(_checkpoint_key(r)) for r in RESOURCES}
        self._changes = _Changes()
        # (pod uid, container) -> the restart count and finish time last seen terminated
        self._terminations: dict[tuple[str, str], tuple[int, str | None]] = {}
        self._capture_pool = ThreadPoolExecutor(
            self.options.capture_workers, thread_name_prefix="whyjob-capture"
        )
        self._threads: list[threading.Thread] = []
        self._open: set[Any] = set()  # watch responses being read, closed to stop at once
        self._pending: dict[str, _Pending] = {}
        self._open_lock = threading.Lock()
        # The last resourceVersion each resource's watch received (event or bookmark), and
        # whether the current watch streamed anything: a cut watch resumes from the former,
        # and a watch that streamed before it was cut starts its back-off afresh.
        self._received: dict[str, str] = {}
        self._streamed: dict[str, bool] = {}
        # Captures owed, kept in the index as checkpoints (capture/<uid>/<container>/<run> ->
        # the request as JSON; capture-done/... once fetched or gone): a request is written
        # with the pod batch whose resourceVersion it follows, so a crash between the two
        # cannot lose it.
        self._owed = {
            k: v
            for k, v in checkpoints.items()
            if k.startswith(_CAPTURE_KEY) and _DONE_KEY + k[len(_CAPTURE_KEY) :] not in checkpoints
        }
        self._marks: dict[str, str] = {}
        self._marks_lock = threading.Lock()
        self._stop = threading.Event()  # the run's stop event, once started

    # -- running -------------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        self._stop = stop
        if self.options.capture:
            for key, token in self._owed.items():
                self._resume_capture(key, token)
        for resource in RESOURCES:
            if resource.name not in self.options.resources:
                continue
            thread = threading.Thread(
                target=self._follow,
                args=(resource, stop),
                name=f"whyjob-k8s-{resource.name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        flusher = threading.Thread(
            target=self._flush_quiet, args=(stop,), name="whyjob-k8s-flush", daemon=True
        )
        flusher.start()
        self._threads.append(flusher)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the threads; a watch blocked on a quiet stream is closed under them."""
        with self._open_lock:
            for response in list(self._open):
                response.close()
        for thread in self._threads:
            thread.join(timeout)
        self._capture_pool.shutdown(wait=True, cancel_futures=False)

    def _follow(self, resource: Resource, stop: threading.Event) -> None:
        """The informer loop of one resource, until `stop`."""
        who = f"kubernetes/{resource.name}"
        backoff = Backoff(stop)
        rv = self._resume.get(resource.name)
        while not stop.is_set():
            self._streamed[resource.name] = False
            try:
                if rv is None:
                    rv = self._list(resource, stop)
                    self._received[resource.name] = rv  # what a cut watch resumes from now
                    self.health.count(who, "relists")
                rv = self._watch(resource, rv, stop)
                backoff.reset()
            except Expired:
                self._received.pop(resource.name, None)
                self.health.count(who, "expired")
                rv = None  # relist: what the watch missed is still in the list, or gone for good
            except Exception as exc:  # any failure is retried; the message is kept
                if rv is not None:
                    # Resume after what was received, not from where this watch started:
                    # replaying it would only end in 410 and a relist.
                    rv = self._received.get(resource.name, rv)
                if self._streamed[resource.name]:
                    backoff.reset()  # a healthy watch that was cut: reconnect at once
                status = getattr(exc, "status", None)
                self.health.error(who, f"{type(exc).__name__}: {status or ''} {exc}".strip())
                if status == 429:
                    self.health.count(who, "throttled")
                if not backoff.wait(_retry_after(exc) if status == 429 else None):
                    return
                self.health.count(who, "reconnects")

    def _call(self, resource: Resource, **kwargs: Any) -> Any:
        api = self._apis[resource.api]
        return getattr(api, resource.method)(_preload_content=False, **kwargs)

    def _list(self, resource: Resource, stop: threading.Event) -> str:
        """Every object, page by page; returns the resourceVersion to watch from."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"limit": self.options.page_size}
            if token:
                kwargs["_continue"] = token
            response = self._call(resource, **kwargs)
            try:
                document = orjson.loads(response.data)
            finally:
                response.release_conn()
            meta = document.get("metadata") or {}
            items = [self._parse(resource, obj, forced=True) for obj in document.get("items") or ()]
            token = meta.get("continue") or None
            rv = str(meta.get("resourceVersion") or "")
            # The list's resourceVersion is only a safe resume point once every page is stored.
            self._emit(resource, [i for part in items for i in part], None if token else rv)
            if not token or stop.is_set():
                return rv

    def _watch(self, resource: Resource, rv: str, stop: threading.Event) -> str:
        """Stream changes after `rv` until the server ends the watch; returns the last rv."""
        response = self._call(
            resource,
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self.options.watch_timeout_s,
            # A read timeout is per read: silence past it (no event, no bookmark) means the
            # watch hung or the link is half-open, and the watch is reopened.
            _request_timeout=(10, self.options.watch_silence_s),
        )
        pending = self._pending[resource.name] = _Pending(resource)
        with self._open_lock:
            self._open.add(response)
        try:
            for line in _lines(response):
                if stop.is_set():
                    break
                try:
                    rv = self._on_event(resource, pending, line, rv)
                except (Expired, WatchError):
                    raise
                except Exception as exc:  # a poisoned event costs itself, never the stream
                    reason = f"unreadable watch event ({type(exc).__name__}: {str(exc)[:200]})"
                    pending.add([Rejected(None, reason, bytes(line[:65536]))], rv)
                if pending.size >= self.options.batch_size:
                    self._flush(pending)
        except Exception:
            if stop.is_set():
                return rv  # the stream was closed under us to stop
            raise
        finally:
            with self._open_lock:
                self._open.discard(response)
            response.release_conn()
            self._flush(pending)
        return rv

    def _on_event(self, resource: Resource, pending: _Pending, line: bytes, rv: str) -> str:
        """Read one watch event into `pending`; returns the resourceVersion it brings."""
        who = f"kubernetes/{resource.name}"
        event = orjson.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired(obj.get("message") or "resourceVersion expired")
            raise WatchError(f"watch error: {obj.get('message') or obj}")
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
        self._received[resource.name] = rv
        self._streamed[resource.name] = True
        if kind == "BOOKMARK":
            pending.add([], rv)
            self._flush(pending)
            self.health.ok(who)
            return rv
        if kind == "DELETED":
            self._forget(resource, obj)
            if resource.kind != "Pod":
                return rv  # a deleted event or node says nothing new
        pending.add(self._parse(resource, obj, forced=False), rv)
        return rv

    def _flush(self, pending: _Pending) -> None:
        """Hand over what a watch has read (under the batch's lock, so batches stay in order)."""
        with pending.lock:
            if pending.items or pending.rv is not None:
                self._emit(pending.resource, pending.items, pending.rv, pending.last_ts)
            pending.reset()

    def _flush_quiet(self, stop: threading.Event) -> None:
        """A lone event must not wait for the next one: flush batches older than batch_wait."""
        while not stop.wait(self.options.batch_wait_s):
            for pending in list(self._pending.values()):
                if (
                    pending.items
                    and time.monotonic() - pending.first_at >= self.options.batch_wait_s
                ):
                    try:
                        self._flush(pending)
                    except Exception as exc:  # the watch's own flush will try again
                        self.health.error(
                            f"kubernetes/{pending.resource.name}", str(exc), down=False
                        )

    def _emit(
        self, resource: Resource, items: list[Item], rv: str | None, last_ts: int | None = None
    ) -> None:
        checkpoints = {_checkpoint_key(resource): rv} if rv else {}
        if resource.kind == "Pod":
            with self._marks_lock:
                checkpoints.update(self._marks)
                self._marks.clear()
        if not items and not checkpoints:
            return
        who = f"kubernetes/{resource.name}"
        self.writer.put(Batch(who, f"kubernetes:{resource.name}", items, checkpoints))
        self.health.count(who, "objects", sum(1 for i in items if isinstance(i, Evidence)))
        self.health.ok(who, lag_s=(time.time() - last_ts / 1000) if last_ts else None)

    # -- parsing -------------------------------------------------------------------------------

    def _context(self, resource: Resource) -> Context:
        return Context(f"kubernetes:{resource.name}", self.options.ingest)

    def _parse(self, resource: Resource, obj: Mapping[str, Any], *, forced: bool) -> list[Item]:
        # An object no reader can handle is quarantined with its bytes; the stream goes on.
        return guarded(self._read(resource, obj, forced=forced), None, obj)

    def _read(self, resource: Resource, obj: Mapping[str, Any], *, forced: bool) -> Iterator[Item]:
        ctx = self._context(resource)
        items = list(parse_k8s_object(ctx, obj, resource.kind, None))
        meta = obj.get("metadata") or {}
        if resource.kind == "Pod":
            key = f"pod/{meta.get('uid')}"
            if not self._changes.changed(key, _pod_signature(obj)) and not forced:
                items = [
                    i for i in items if not (isinstance(i, Evidence) and i.kind == "pod.snapshot")
                ]
            if self.options.capture:
                self._check_terminations(obj)
        elif resource.kind == "Node":
            key = f"node/{meta.get('name')}"
            if not self._changes.changed(key, _node_signature(obj)) and not forced:
                items = [
                    i for i in items if not (isinstance(i, Evidence) and i.kind == "node.snapshot")
                ]
        yield from items

    def _forget(self, resource: Resource, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if resource.kind == "Pod":
            self._changes.forget(f"pod/{meta.get('uid')}")
        elif resource.kind == "Node":
            self._changes.forget(f"node/{meta.get('name')}")

    # -- capture at failure time ---------------------------------------------------------------

    def _check_terminations(self, pod: Mapping[str, Any]) -> None:
        """A container of a tracked pod that just terminated: fetch what disappears soon."""
        meta, spec, status = (
            pod.get("metadata") or {},
            pod.get("spec") or {},
            pod.get("status") or {},
        )
        uid, name, namespace = meta.get("uid"), meta.get("name"), meta.get("namespace")
        if not (uid and name and namespace):
            return
        if (
            not self.options.capture_all_pods
            and recognise(
                name, meta.get("labels"), meta.get("annotations"), self.options.ingest.launchers
            )
            is None
        ):
            return
        for cs in status.get("containerStatuses") or ():
            container = cs.get("name")
            restarts = int(cs.get("restartCount") or 0)
            current = (cs.get("state") or {}).get("terminated")
            last = (cs.get("lastState") or {}).get("terminated")
            if current:  # terminated now: this run's log is the current one
                ended, run, previous = current, restarts, False
            elif last and (cs.get("state") or {}).get("waiting") is not None:
                # In back-off no new container exists yet: restartCount is still the dead
                # container's index (its log file is N.log), and its log is the "previous".
                ended, run, previous = last, restarts, True
            elif last:  # restarted already: the ended run's log is the previous one
                ended, run, previous = last, max(restarts - 1, 0), True
            else:
                continue
            key = (uid, container)
            mark = (run, ended.get("finishedAt"))
            if self._terminations.get(key) == mark:
                continue
            first_sight = key not in self._terminations
            self._terminations[key] = mark
            if first_sight and not self._recent(ended.get("finishedAt")):
                continue  # an old termination met on the first list: its log is long gone
            request = {
                "namespace": namespace,
                "name": name,
                "uid": uid,
                "container": container,
                "restart": run,
                "previous": previous,
                "node": spec.get("nodeName"),
                "container_id": ended.get("containerID"),
                "finished": ended.get("finishedAt"),
            }
            with self._marks_lock:
                self._marks[f"{_CAPTURE_KEY}{uid}/{container}/{run}"] = orjson.dumps(
                    request
                ).decode()
            self._capture_pool.submit(self._capture, **request)

    def _still_previous(self, namespace: str, name: str, container: str, container_id: str) -> bool:
        """Is the container run that ended still the one `previous=true` reads?"""
        response: Any = self._core.read_namespaced_pod(name, namespace, _preload_content=False)
        pod = orjson.loads(response.data)
        for cs in (pod.get("status") or {}).get("containerStatuses") or ():
            if cs.get("name") == container:
                last = (cs.get("lastState") or {}).get("terminated") or {}
                return last.get("containerID") in (None, container_id)
        return False

    @staticmethod
    def _recent(finished: Any, within_s: float = 600) -> bool:
        try:
            return isinstance(finished, str) and time.time() - parse_ts(finished) / 1000 < within_s
        except ValueError:
            return False

    def _read_log(
        self,
        namespace: str,
        name: str,
        container: str,
        previous: bool,
        container_id: str | None,
    ) -> str | None:
        """The container's log; None when it restarted again since (its "previous" log is now
        a later run's, which filed under this one would be wrong: this run's log is gone)."""
        if (
            previous
            and container_id
            and not self._still_previous(namespace, name, container, container_id)
        ):
            return None
        raw: Any = self._core.read_namespaced_pod_log(
            name,
            namespace,
            container=container,
            previous=previous,
            tail_lines=self.options.capture_tail_lines,
            timestamps=True,
            _preload_content=False,
        )
        return str(raw.data.decode("utf-8", "replace"))

    def _capture(
        self,
        namespace: str,
        name: str,
        uid: str,
        container: str,
        restart: int,
        previous: bool,
        node: str | None,
        container_id: str | None = None,
        finished: str | None = None,
    ) -> None:
        who = "kubernetes/capture"
        items: list[Item] = []

        def pause(seconds: float) -> None:  # a stopping collector does not sit the wait out
            self._stop.wait(seconds)

        # Up to _CAPTURE_TRIES reads of the log, a transient failure between them waited out
        # (full jitter, doubling from 0.5 s).
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(_CAPTURE_TRIES),
            wait=tenacity.wait_random_exponential(multiplier=0.5, max=8.0),
            retry=tenacity.retry_if_exception(_transient),
            sleep=pause,
            before_sleep=lambda _: self.health.count(who, "retries"),
            reraise=True,
        )
        try:
            text = retrying(self._read_log, namespace, name, container, previous, container_id)
            settled = True  # fetched, or gone for good: either way no longer owed
        except Exception as exc:  # a log that is gone already is a note, not a crash
            settled = not _transient(exc)  # a 4xx: the log is gone; a 5xx: owed to the next start
            self.health.error(who, f"log of {namespace}/{name}/{container}: {exc}", down=False)
        else:
            if text is None:
                self.health.count(who, "too_late")
            else:
                items += _log_items(
                    self.options.ingest, namespace, name, uid, container, restart, text
                )
                self.health.count(who, "logs")
        if node:
            try:
                response: Any = self._core.read_node(node, _preload_content=False)
                node_doc = orjson.loads(response.data)
                ctx = Context("kubernetes:capture", self.options.ingest)
                items += list(parse_k8s_object(ctx, node_doc, "Node", None))
                self.health.count(who, "nodes")
            except Exception as exc:
                self.health.error(who, f"node {node}: {exc}", down=False)
        # Its own key, not the request's: the pod batch that carries the request may commit
        # after this one, and must not make a finished capture owed again.
        done = {f"{_DONE_KEY}{uid}/{container}/{restart}": "1"} if settled else {}
        if items or done:
            self.writer.put(Batch(who, f"kubernetes:capture/{namespace}/{name}", items, done))
            self.health.ok(who)

    def _resume_capture(self, key: str, token: str) -> None:
        """A capture owed from before a restart: fetched now, if its run ended recently."""
        try:
            request = orjson.loads(token)
            if not self._recent(request.get("finished"), within_s=_CAPTURE_OWED_S):
                return
            self._capture_pool.submit(self._capture, **request)
            self.health.count("kubernetes/capture", "resumed")
        except (orjson.JSONDecodeError, TypeError, AttributeError) as exc:
            self.health.error(
                "kubernetes/capture", f"{key}: unreadable owed capture: {exc}", down=False
            )


def _log_items(
    options: IngestOptions,
    namespace: str,
    pod: str,
    uid: str,
    container: str,
    restart: int,
    text: str,
) -> list[Item]:
    """`kubectl logs --timestamps` text as the kubelet's CRI lines of that run."""
    hints = {
        "namespace": namespace,
        "pod": pod,
        "uid": uid,
        "container": container,
        "restart": restart,
    }
    ctx = Context(
        f"kubernetes:log/{namespace}/{pod}/{container}/{restart}",
        replace(options, pod=None),
        path_hints=hints,
    )
    lines = []
    for number, line in enumerate(text.splitlines(), start=1):
        stamp, _, rest = line.partition(" ")
        lines.append((number, f"{stamp} stdout F {rest}"))
    return list(podlogs.parse_cri_text(ctx, lines))


def api_client_from(settings: Mapping[str, Any]) -> ApiClient:
    """An ApiClient from `collectors.kubernetes`: in-cluster, or a kubeconfig and context."""
    from kubernetes import client, config

    if settings.get("in_cluster"):
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        return client.ApiClient()
    configuration = client.Configuration()
    kubeconfig = settings.get("kubeconfig")
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig) if kubeconfig else None,
        context=settings.get("context"),
        client_configuration=configuration,
    )
    return client.ApiClient(configuration)


def options_from(settings: Mapping[str, Any], ingest: IngestOptions) -> KubernetesOptions:
    return KubernetesOptions(
        resources=tuple(settings["resources"]),
        page_size=settings["page_size"],
        watch_timeout_s=int(settings["watch_timeout"]),
        watch_silence_s=settings["watch_silence"],
        capture=settings["capture"],
        capture_tail_lines=settings["capture_tail_lines"],
        capture_all_pods=settings["capture_all_pods"],
        ingest=ingest,
    )
