"""Kubernetes Event objects, core/v1 and events.k8s.io/v1, as one evidence kind: `k8s.event`.

Each UPDATE of a repeated event (a new `count` or `series.count`) is its own version and is
kept: the id hashes the event uid with the count and the last-seen time. The event says which
pod ran on which node (kubelet events come from the node; `Scheduled` names it), so pods and
pod.node bindings are learnt here too, even when no pod object was captured.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from whyjob.collector.ingest.base import Context, Item, Rejected
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Severity
from whyjob.core.timeutil import parse_ts

__all__ = ["EXPERIMENT_KINDS", "parse_event"]

# Objects whose name is the experiment's name (training operators, JobSet, Ray, Volcano, Job).
EXPERIMENT_KINDS = frozenset(
    {
        "PyTorchJob",
        "TFJob",
        "MPIJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
        "TrainJob",
        "JobSet",
        "RayJob",
        "RayCluster",
        "Job",
    }
)

_FIELD_CONTAINER = re.compile(r"spec\.(?:initContainers|containers|ephemeralContainers)\{([^}]+)\}")
_SCHEDULED = re.compile(r"Successfully assigned (?P<ns>[^/\s]+)/(?P<pod>\S+) to (?P<node>\S+)")
_NODE_COMPONENTS = frozenset({"kubelet"})


def _first_ts(*values: Any) -> int | None:
    for value in values:
        if value.__class__ is str and value:
            return parse_ts(value)
    return None


def _str(value: Any) -> str | None:
    return value if value.__class__ is str and value else None


def parse_event(ctx: Context, item: Mapping[str, Any], line: int | None) -> Iterator[Item]:
    """One Event object (either API group) into a `k8s.event` record."""
    get = item.get
    meta = get("metadata")
    obj = get("regarding") or get("involvedObject")
    if not isinstance(obj, dict) or not isinstance(meta, dict):
        yield Rejected(line, "Event without involvedObject/regarding or metadata")
        return
    series = get("series")
    if not isinstance(series, dict):
        series = {}
    source = get("deprecatedSource") or get("source") or {}
    try:
        ts = _first_ts(
            series.get("lastObservedTime"),
            get("lastTimestamp"),
            get("deprecatedLastTimestamp"),
            get("eventTime"),
            meta.get("creationTimestamp"),
        )
        first = _first_ts(get("firstTimestamp"), get("deprecatedFirstTimestamp"), get("eventTime"))
    except ValueError as exc:
        yield Rejected(line, f"Event {meta.get('name')!r}: {exc}")
        return
    if ts is None:
        yield Rejected(line, f"Event {meta.get('name')!r} has no timestamp at all")
        return
    count = series.get("count") or get("count") or get("deprecatedCount") or 1
    reason = _str(get("reason")) or "Unknown"
    note = _str(get("note")) or _str(get("message")) or ""
    component = (
        _str(get("reportingController"))
        or _str(get("reportingComponent"))
        or _str(source.get("component"))
    )
    host = _str(source.get("host"))
    if host is None and component in _NODE_COMPONENTS:
        host = _str(get("reportingInstance"))
    kind = _str(obj.get("kind")) or ""
    name = _str(obj.get("name"))
    namespace = _str(obj.get("namespace")) or _str(meta.get("namespace"))
    event_type = _str(get("type")) or "Normal"
    pod = pod_uid = container = node = experiment = None
    if kind == "Pod":
        pod, pod_uid, node = name, _str(obj.get("uid")), host
        field_path = obj.get("fieldPath")
        if field_path and (match := _FIELD_CONTAINER.search(field_path)):
            container = match.group(1)
    elif kind == "Node":
        node, namespace = name, None
    elif kind in EXPERIMENT_KINDS:
        experiment = name
    attrs: dict[str, Any] = {
        "reason": reason,
        "type": event_type,
        "object_kind": kind,
        "object_name": name,
        "count": count,
    }
    if component:
        attrs["component"] = component
    if first is not None and first != ts:
        attrs["first_ts"] = first
    if action := _str(get("action")):
        attrs["action"] = action
    related = get("related")
    if isinstance(related, dict) and related.get("name"):
        attrs["related"] = {
            k: related[k] for k in ("kind", "namespace", "name", "uid") if k in related
        }
    if kind not in ("Pod", "Node") and obj.get("uid"):
        attrs["object_uid"] = obj["uid"]

    yield ctx.evidence(
        source="k8s.event",
        native_id=_str(meta.get("uid")) or f"{namespace}/{meta.get('name')}",
        version=f"{count}/{ts}",
        ts=ts,
        kind="k8s.event",
        message=f"{reason}: {note}" if note else reason,
        severity=Severity.WARNING if event_type == "Warning" else Severity.INFO,
        attrs=attrs,
        raw=orjson.dumps(item),
        line=line,
        namespace=namespace,
        pod=pod,
        pod_uid=pod_uid,
        container=container,
        node=node,
        experiment=experiment,
    )
    if pod_uid and name and namespace:
        if reason == "Scheduled" and (match := _SCHEDULED.search(note)):
            node = match.group("node")
        known: set[str] = ctx.memory.setdefault("k8s.event.pods", set())
        if pod_uid not in known:  # once per file: the pods table needs one sighting
            known.add(pod_uid)
            yield PodRecord(uid=pod_uid, namespace=namespace, name=name, seen=ts, node=node)
        placed: set[tuple[str, str]] = ctx.memory.setdefault("k8s.event.placed", set())
        if node and (pod_uid, node) not in placed:  # where it ran; the pod object gives the span
            placed.add((pod_uid, node))
            yield Binding("pod.node", pod_uid, node, first or ts, ts)
