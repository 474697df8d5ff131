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

from whyjob.collector.ingest.base import Context, Item, Rejected, in_cluster, text_or_none
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, Severity, evidence_id
from whyjob.core.experiments import EXPERIMENT_KINDS
from whyjob.core.timeutil import parse_ts

__all__ = ["parse_event"]


# Kinds whose name other projects use too: only their own API group names an experiment.
_GROUPS = {"Workflow": "argoproj.io/", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/"}

_FIELD_CONTAINER = re.compile(r"spec\.(?:initContainers|containers|ephemeralContainers)\{([^}]+)\}")
_SCHEDULED = re.compile(r"Successfully assigned (?P<ns>[^/\s]+)/(?P<pod>\S+) to (?P<node>\S+)")
_NODE_COMPONENTS = frozenset({"kubelet"})


def parse_event(ctx: Context, item: Mapping[str, Any], line: int | None) -> Iterator[Item]:
    """One Event object (either API group) into a `k8s.event` record.

    This is the hottest loop of an import (tens of thousands of events a second), so field
    lookups are written out rather than factored into helpers.
    """
    get = item.get
    meta = get("metadata")
    obj = get("regarding") or get("involvedObject")
    if obj.__class__ is not dict or meta.__class__ is not dict:
        yield Rejected(line, "Event without involvedObject/regarding or metadata")
        return
    series = get("series")
    if series.__class__ is not dict:
        series = _EMPTY
    stamp = (
        series.get("lastObservedTime")
        or get("lastTimestamp")
        or get("deprecatedLastTimestamp")
        or get("eventTime")
        or meta.get("creationTimestamp")
    )
    first_stamp = get("firstTimestamp") or get("deprecatedFirstTimestamp") or get("eventTime")
    try:
        ts = parse_ts(stamp) if stamp.__class__ is str else None
        first = parse_ts(first_stamp) if first_stamp.__class__ is str else None
    except ValueError as exc:
        yield Rejected(line, f"Event {meta.get('name')!r}: {exc}")
        return
    if ts is None:
        yield Rejected(line, f"Event {meta.get('name')!r} has no timestamp at all")
        return
    source = get("deprecatedSource") or get("source") or _EMPTY
    count = series.get("count") or get("count") or get("deprecatedCount") or 1
    reason = get("reason") or "Unknown"
    note = get("note") or get("message") or ""
    component = get("reportingController") or get("reportingComponent") or source.get("component")
    host = (
        source.get("host")
        or (get("reportingInstance") if component in _NODE_COMPONENTS else None)
        or None
    )
    kind = obj.get("kind") or ""
    name = text_or_none(obj.get("name"))
    namespace = text_or_none(obj.get("namespace")) or text_or_none(meta.get("namespace"))
    event_type = get("type") or "Normal"
    pod = pod_uid = container = node = experiment = None
    if kind == "Pod":
        pod, pod_uid, node = name, obj.get("uid") or None, host
        field_path = obj.get("fieldPath")
        if field_path and (match := _FIELD_CONTAINER.search(field_path)):
            container = match.group(1)
    elif kind == "Node":
        node, namespace = name, None
    elif kind in EXPERIMENT_KINDS and _GROUPS.get(kind, "") in str(obj.get("apiVersion") or ""):
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
    if action := get("action"):
        attrs["action"] = action
    related = get("related")
    if related.__class__ is dict and related.get("name"):
        attrs["related"] = {
            k: related[k] for k in ("kind", "namespace", "name", "uid") if k in related
        }
    if kind != "Pod" and kind != "Node" and obj.get("uid"):
        attrs["object_uid"] = obj["uid"]

    native = meta.get("uid") or f"{namespace}/{meta.get('name')}"
    yield Evidence(
        id=evidence_id("k8s.event", in_cluster(ctx.options.cluster, native), f"{count}/{ts}"),
        ts=ts,
        source="k8s.event",
        kind="k8s.event",
        message=f"{reason}: {note}" if note else reason,
        severity=Severity.WARNING if event_type == "Warning" else Severity.INFO,
        cluster=ctx.options.cluster,
        namespace=namespace,
        experiment=experiment,
        pod=pod,
        pod_uid=pod_uid,
        container=container,
        node=node,
        attrs=attrs,
        raw=orjson.dumps(item),
        origin=f"{ctx.origin}:{line}",
    )
    if pod_uid and name and namespace:
        if reason == "Scheduled" and (match := _SCHEDULED.search(note)):
            node = match.group("node")
        memory = ctx.memory
        known = memory.get(_KNOWN_PODS)
        if known is None:
            known = memory[_KNOWN_PODS] = set()
        if pod_uid not in known:  # once per file: the pods table needs one sighting
            known.add(pod_uid)
            yield PodRecord(uid=pod_uid, namespace=namespace, name=name, seen=ts, node=node)
            placed: set[tuple[str, str]] = memory.setdefault(_PLACED, set())
            if node:
                placed.add((pod_uid, node))
                yield Binding("pod.node", pod_uid, node, first or ts, ts)
        elif node and (pod_uid, node) not in memory[_PLACED]:
            memory[_PLACED].add((pod_uid, node))
            yield Binding("pod.node", pod_uid, node, first or ts, ts)


_EMPTY: Mapping[str, Any] = {}
_KNOWN_PODS = "k8s.event.pods"
_PLACED = "k8s.event.placed"
