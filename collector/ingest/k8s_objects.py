"""Pod and Node objects (`kubectl get pods|nodes -o json|yaml`, a List or a single object).

A pod object is a snapshot. It becomes one `pod.snapshot` record that keeps the raw object,
plus a record per fact that explains a death: each container termination (`lastState` and
`state`), waiting reasons, the DisruptionTarget condition, an unschedulable PodScheduled
condition, an eviction or shutdown `status.reason`, and a pending deletion. Facts are keyed by
what identifies them (a containerID, a condition's transition time), so several snapshots of
one pod add each fact once. Nodes give their conditions, taints, maintenance labels and the
instance behind them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from whyjob.collector.ingest.base import Context, Item, Rejected
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Severity
from whyjob.core.experiments import recognise
from whyjob.core.timeutil import parse_ts

__all__ = ["instance_from_provider_id", "parse_node", "parse_pod"]

_GPU_RESOURCE = "nvidia.com/gpu"
_QUIET_WAITING = frozenset({"ContainerCreating", "PodInitializing"})
# Node conditions whose healthy status is True; for every other type True is the problem.
_POSITIVE_CONDITIONS = frozenset({"Ready"})
_AWS_PROVIDER = re.compile(r"^aws:///[^/]*/(?P<id>i-[0-9a-f]+)$")
_GCE_PROVIDER = re.compile(r"^gce://[^/]+/[^/]+/(?P<id>[^/]+)$")
_AZURE_PROVIDER = re.compile(r"/virtualMachines/(?P<id>[^/]+)$", re.IGNORECASE)
# A scale-set VM is named <scale set>_<index>, as Azure's Scheduled Events name it.
_AZURE_VMSS = re.compile(
    r"/virtualMachineScaleSets/(?P<set>[^/]+)/virtualMachines/(?P<index>\d+)$", re.IGNORECASE
)

_MAINTENANCE_LABELS = {
    "cloud.google.com/scheduled-maintenance-time": "scheduled",
    "cloud.google.com/active-node-maintenance": "active",
}


def instance_from_provider_id(provider_id: str) -> str | None:
    """The cloud instance behind a node: an EC2 instance id, a GCE instance or an Azure VM."""
    if match := _AZURE_VMSS.search(provider_id):
        return f"{match.group('set')}_{match.group('index')}"
    for pattern in (_AWS_PROVIDER, _GCE_PROVIDER, _AZURE_PROVIDER):
        if match := pattern.search(provider_id):
            return match.group("id")
    return None


def _ts(value: Any) -> int | None:
    return parse_ts(value) if isinstance(value, str) and value else None


def _latest_time(status: Mapping[str, Any], meta: Mapping[str, Any]) -> int | None:
    """The newest timestamp an object carries: a snapshot's best estimate of when it was taken."""
    stamps: list[int] = []

    def add(value: Any) -> None:
        if isinstance(value, str) and value:
            stamps.append(parse_ts(value))

    for condition in status.get("conditions") or ():
        add(condition.get("lastTransitionTime"))
        add(condition.get("lastHeartbeatTime"))
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or ():
            for state_key in ("state", "lastState"):
                for state in (cs.get(state_key) or {}).values():
                    if isinstance(state, dict):
                        add(state.get("startedAt"))
                        add(state.get("finishedAt"))
    add(status.get("startTime"))
    add(meta.get("creationTimestamp"))
    return max(stamps) if stamps else None


def _gpus(spec: Mapping[str, Any]) -> int | None:
    total = 0
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(_GPU_RESOURCE) or (
            resources.get("requests") or {}
        ).get(_GPU_RESOURCE)
        if amount is not None:
            try:
                total += int(amount)
            except (TypeError, ValueError):
                continue
    return total or None


def parse_pod(ctx: Context, item: Mapping[str, Any], line: int | None) -> Iterator[Item]:
    meta = item.get("metadata") or {}
    spec = item.get("spec") or {}
    status = item.get("status") or {}
    uid, name, namespace = meta.get("uid"), meta.get("name"), meta.get("namespace")
    if not (isinstance(uid, str) and isinstance(name, str) and isinstance(namespace, str)):
        yield Rejected(line, "Pod without metadata.uid, name or namespace")
        return
    try:
        seen = _latest_time(status, meta)
        created = _ts(meta.get("creationTimestamp"))
        started = _ts(status.get("startTime"))
        deletion = _ts(meta.get("deletionTimestamp"))
    except ValueError as exc:
        yield Rejected(line, f"Pod {namespace}/{name}: {exc}")
        return
    if seen is None:
        seen = ctx.mtime_ms or 0
    labels = meta.get("labels") or {}
    controller = next(
        (o.get("kind") for o in meta.get("ownerReferences") or () if o.get("controller")), None
    )
    member = recognise(
        name,
        labels,
        meta.get("annotations"),
        ctx.options.launchers,
        controller if isinstance(controller, str) else None,
    )
    node = spec.get("nodeName")
    common: dict[str, Any] = {
        "namespace": namespace,
        "pod": name,
        "pod_uid": uid,
        "node": node,
        "experiment": member.experiment if member else None,
    }
    phase = status.get("phase")
    restarts = {
        cs.get("name"): cs.get("restartCount", 0) for cs in status.get("containerStatuses") or ()
    }
    owner = next(
        (
            {"kind": o.get("kind"), "name": o.get("name")}
            for o in meta.get("ownerReferences") or ()
            if o.get("controller")
        ),
        None,
    )
    snapshot = ctx.evidence(
        source="k8s.pod",
        native_id=uid,
        version=str(meta.get("resourceVersion") or seen),
        ts=seen,
        kind="pod.snapshot",
        message=(
            f"Pod {namespace}/{name} {phase or 'Unknown'}"
            + (f" on {node}" if node else "")
            + (f", restarts {sum(restarts.values())}" if any(restarts.values()) else "")
        ),
        severity=Severity.DEBUG,
        attrs={
            "phase": phase,
            "restarts": restarts,
            "labels": labels,
            "gpus": _gpus(spec),
            "owner": owner,
            "restart_policy": spec.get("restartPolicy"),
            "containers": [c.get("name") for c in spec.get("containers") or () if c.get("name")],
            "priority_class": spec.get("priorityClassName"),
        },
        raw=orjson.dumps(item),
        line=line,
        **common,
    )
    yield snapshot
    snap = {"snapshot": snapshot.public_id}
    yield PodRecord(
        uid=uid,
        namespace=namespace,
        name=name,
        seen=seen,
        experiment=member.experiment if member else None,
        launcher=member.launcher if member else None,
        label=member.label if member else None,
        rank=member.rank if member else None,
        job_attempt=member.job_attempt if member else None,
        node=node,
        created=created,
        deleted=deletion,
        phase=phase,
        gpus=_gpus(spec),
        labels=dict(labels),
    )
    if node:
        yield Binding("pod.node", uid, node, started or created or seen, seen)

    for key, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        for cs in status.get(key) or ():
            try:
                yield from _container(ctx, cs, init, seen, common, snap, line)
            except (ValueError, TypeError) as exc:
                yield Rejected(line, f"Pod {namespace}/{name} container {cs.get('name')}: {exc}")

    reason = status.get("reason")
    if isinstance(reason, str) and reason:
        yield ctx.evidence(
            source="k8s.pod",
            native_id=uid,
            version=f"status/{reason}",
            ts=seen,
            kind="pod.status",
            message=f"Pod {reason}: {status.get('message') or ''}".strip(),
            severity=Severity.WARNING,
            attrs={"reason": reason, "message": status.get("message"), "phase": phase, **snap},
            line=line,
            **common,
        )
    for condition in status.get("conditions") or ():
        yield from _pod_condition(ctx, condition, seen, common, snap, line)
    if deletion is not None:
        grace = meta.get("deletionGracePeriodSeconds") or 0
        yield ctx.evidence(
            source="k8s.pod",
            native_id=uid,
            version="deleting",
            ts=deletion - int(grace) * 1000,
            kind="pod.deleting",
            message=f"Pod deletion requested (grace period {grace}s)",
            severity=Severity.NOTICE,
            attrs={"grace_seconds": grace, "deletion_deadline": deletion, **snap},
            line=line,
            **common,
        )


def _container(
    ctx: Context,
    cs: Mapping[str, Any],
    init: bool,
    seen: int,
    common: dict[str, Any],
    snap: dict[str, str],
    line: int | None,
) -> Iterator[Item]:
    name = str(cs.get("name") or "-")
    restart_count = int(cs.get("restartCount") or 0)
    state = cs.get("state") or {}
    last = cs.get("lastState") or {}
    fields = {**common, "container": name}
    uid = common["pod_uid"]
    # The kubelet reports the newest container's own restart index as restartCount; while the
    # container waits to be restarted, the newest one is the dead one in lastState.
    last_index = restart_count if "waiting" in state else max(restart_count - 1, 0)
    current = state.get("terminated")
    current_index = restart_count
    if isinstance(current, dict) and current.get("reason") == "ContainerStatusUnknown":
        # The kubelet bumps restartCount when it fills in a container it lost with its node.
        current_index = max(restart_count - 1, 0)
    for terminated, restart in (
        (last.get("terminated"), last_index),
        (current, current_index),
    ):
        if isinstance(terminated, dict):
            yield _terminated(ctx, terminated, name, restart, init, seen, fields, snap, line)
    running = state.get("running")
    if isinstance(running, dict) and running.get("startedAt"):
        started = parse_ts(running["startedAt"])
        yield ctx.evidence(
            source="k8s.pod",
            native_id=cs.get("containerID") or f"{uid}/{name}/{restart_count}",
            version="running",
            ts=started,
            kind="container.running",
            message=f"Container {name} running (restart {restart_count})",
            severity=Severity.DEBUG,
            attrs={"restart": restart_count, "init": init, **snap},
            line=line,
            **fields,
        )
    waiting = state.get("waiting")
    if isinstance(waiting, dict) and waiting.get("reason") not in _QUIET_WAITING:
        reason = waiting.get("reason") or "Waiting"
        yield ctx.evidence(
            source="k8s.pod",
            native_id=f"{uid}/{name}",
            version=f"waiting/{reason}/{restart_count}",
            ts=seen,
            kind="container.waiting",
            message=f"Container {name} waiting: {reason}"
            + (f": {waiting['message']}" if waiting.get("message") else ""),
            severity=Severity.WARNING,
            attrs={
                "reason": reason,
                "message": waiting.get("message"),
                "restart": restart_count,
                "init": init,
                **snap,
            },
            line=line,
            **fields,
        )
    for resource in cs.get("allocatedResourcesStatus") or ():
        for device in resource.get("resources") or ():
            device_id = device.get("resourceID")
            if resource.get("name") == _GPU_RESOURCE and device_id:
                key = f"{common['namespace']}/{common['pod']}"
                yield Binding("pod.gpu", key, device_id, seen, seen)
                if device.get("health") == "Unhealthy":
                    yield ctx.evidence(
                        source="k8s.pod",
                        native_id=f"{uid}/{device_id}",
                        version="unhealthy",
                        ts=seen,
                        kind="gpu.unhealthy",
                        message=f"Device plugin reports {device_id} Unhealthy",
                        severity=Severity.ERROR,
                        gpu_uuid=device_id,
                        attrs={"health": "Unhealthy", **snap},
                        line=line,
                        **fields,
                    )


def _terminated(
    ctx: Context,
    terminated: Mapping[str, Any],
    container: str,
    restart: int,
    init: bool,
    seen: int,
    fields: dict[str, Any],
    snap: dict[str, str],
    line: int | None,
) -> Item:
    finished = _ts(terminated.get("finishedAt"))
    started = _ts(terminated.get("startedAt"))
    exit_code = terminated.get("exitCode")
    reason = terminated.get("reason") or ("Completed" if exit_code == 0 else "Error")
    signal = terminated.get("signal")
    if signal is None and isinstance(exit_code, int) and 128 < exit_code < 160:
        signal_note = f" (signal {exit_code - 128})"
    else:
        signal_note = f" (signal {signal})" if signal else ""
    message = terminated.get("message")
    attrs: dict[str, Any] = {
        "exit_code": exit_code,
        "reason": reason,
        "restart": restart,
        "init": init,
        "started_at": started,
        "finished_at": finished,
        **snap,
    }
    if signal is not None:
        attrs["signal"] = signal
    if isinstance(message, str) and message:
        attrs["termination_message"] = message[-4096:]
    if terminated.get("containerID"):
        attrs["container_id"] = terminated["containerID"]
    native = terminated.get("containerID") or f"{fields['pod_uid']}/{container}/{restart}"
    return ctx.evidence(
        source="k8s.pod",
        native_id=native,
        version="terminated",
        ts=finished or started or seen,
        kind="container.terminated",
        # The container's own last words (its termination message) are evidence too.
        message=f"Container {container} terminated: {reason}, exit code {exit_code}{signal_note}"
        + (f": {_first_line(message)}" if isinstance(message, str) and message.strip() else ""),
        severity=Severity.INFO if exit_code == 0 else Severity.ERROR,
        attrs=attrs,
        line=line,
        **fields,
    )


def _pod_condition(
    ctx: Context,
    condition: Mapping[str, Any],
    seen: int,
    common: dict[str, Any],
    snap: dict[str, str],
    line: int | None,
) -> Iterator[Item]:
    kind = condition.get("type")
    status = condition.get("status")
    if kind == "DisruptionTarget" and status == "True":
        record_kind = "pod.disruption"
    elif kind == "PodScheduled" and status == "False":
        record_kind = "pod.unschedulable"
    else:
        return
    at = _ts(condition.get("lastTransitionTime")) or seen
    reason = condition.get("reason") or kind
    yield ctx.evidence(
        source="k8s.pod",
        native_id=common["pod_uid"],
        version=f"{kind}/{reason}/{at}",
        ts=at,
        kind=record_kind,
        message=f"{kind}: {reason}"
        + (f": {condition['message']}" if condition.get("message") else ""),
        severity=Severity.WARNING,
        attrs={"condition": kind, "reason": reason, "message": condition.get("message"), **snap},
        line=line,
        **common,
    )


def _first_line(text: str, limit: int = 300) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def parse_node(ctx: Context, item: Mapping[str, Any], line: int | None) -> Iterator[Item]:
    meta = item.get("metadata") or {}
    spec = item.get("spec") or {}
    status = item.get("status") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        yield Rejected(line, "Node without metadata.name")
        return
    try:
        seen = _latest_time(status, meta) or ctx.mtime_ms or 0
    except ValueError as exc:
        yield Rejected(line, f"Node {name}: {exc}")
        return
    labels = meta.get("labels") or {}
    provider_id = spec.get("providerID") or ""
    instance = instance_from_provider_id(provider_id)
    capacity = status.get("capacity") or {}
    yield ctx.evidence(
        source="k8s.node",
        native_id=name,
        version=str(meta.get("resourceVersion") or seen),
        ts=seen,
        kind="node.snapshot",
        message=f"Node {name}" + (f" ({instance})" if instance else ""),
        severity=Severity.DEBUG,
        node=name,
        instance_id=instance,
        attrs={
            "provider_id": provider_id or None,
            "labels": labels,
            "gpus": capacity.get(_GPU_RESOURCE),
            "unschedulable": bool(spec.get("unschedulable")),
            "node_info": status.get("nodeInfo"),
        },
        raw=orjson.dumps(item),
        line=line,
    )
    if instance:
        yield Binding(
            "node.instance", name, instance, _ts(meta.get("creationTimestamp")) or seen, seen
        )
    for condition in status.get("conditions") or ():
        kind, value = condition.get("type"), condition.get("status")
        healthy = (value == "True") if kind in _POSITIVE_CONDITIONS else (value == "False")
        try:
            at = _ts(condition.get("lastTransitionTime")) or seen
        except ValueError as exc:
            yield Rejected(line, f"Node {name} condition {kind}: {exc}")
            continue
        if healthy and kind != "Ready":
            continue
        yield ctx.evidence(
            source="k8s.node",
            native_id=name,
            version=f"condition/{kind}/{value}/{at}",
            ts=at,
            kind="node.condition",
            message=f"Node condition {kind}={value}"
            + (f" ({condition.get('reason')})" if condition.get("reason") else "")
            + (f": {condition['message']}" if condition.get("message") else ""),
            severity=Severity.INFO if healthy else Severity.WARNING,
            node=name,
            instance_id=instance,
            attrs={
                "condition": kind,
                "status": value,
                "reason": condition.get("reason"),
                "message": condition.get("message"),
            },
            line=line,
        )
    for taint in spec.get("taints") or ():
        key = taint.get("key")
        if not key:
            continue
        try:
            at = _ts(taint.get("timeAdded")) or seen
        except ValueError:
            at = seen
        effect = taint.get("effect")
        yield ctx.evidence(
            source="k8s.node",
            native_id=name,
            version=f"taint/{key}/{effect}/{at}",
            ts=at,
            kind="node.taint",
            message=f"Node tainted {key}"
            + (f"={taint['value']}" if taint.get("value") else "")
            + f":{effect}",
            severity=Severity.NOTICE,
            node=name,
            instance_id=instance,
            attrs={"key": key, "value": taint.get("value"), "effect": effect},
            line=line,
        )
    for label, state in _MAINTENANCE_LABELS.items():
        value = labels.get(label)
        if value is None:
            continue
        at = int(value) * 1000 if str(value).isdigit() else seen
        yield ctx.evidence(
            source="k8s.node",
            native_id=name,
            version=f"label/{label}/{value}",
            ts=at,
            kind="maintenance.scheduled",
            message=f"GKE node maintenance {state} ({label}={value})",
            severity=Severity.NOTICE,
            node=name,
            instance_id=instance,
            attrs={"provider": "gce", "state": state, "label": label, "value": value},
            line=line,
        )
