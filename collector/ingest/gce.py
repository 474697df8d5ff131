"""Google Compute Engine: host events from the operations list, and upcoming maintenance.

`gcloud compute operations list --format=json` lists every operation of a project. Only the
system events that take a VM away are evidence: `terminateOnHostMaintenance` and
`migrateOnHostMaintenance` (host maintenance; GPU VMs cannot live-migrate, so they are
terminated), `hostError` (the host hardware failed under the VM) → `maintenance.host_event`,
and `preempted` → `spot.interruption`. Every other operation (insert, delete, setMetadata, …) is
ignored without a record or a count: they are the bulk of the list and say nothing about a
death. The node is the instance name at the end of `targetLink`: a GKE node is named after its
GCE instance, and the node's providerID (`gce://project/zone/name`) names the same instance, so
both `node` and `instance_id` are set to it.

The metadata server's `instance/upcoming-maintenance` document (reference B6) names no
instance, so it needs --node; it becomes `maintenance.scheduled` for the window.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

from whyjob.collector.ingest.base import Context, Item, Rejected
from whyjob.core.evidence import Severity
from whyjob.core.timeutil import parse_ts

__all__ = [
    "looks_like_operations",
    "looks_like_upcoming_maintenance",
    "parse_operations",
    "parse_upcoming_maintenance",
]

_HOST_EVENTS: Final = {
    "compute.instances.terminateOnHostMaintenance": Severity.WARNING,
    "compute.instances.migrateOnHostMaintenance": Severity.NOTICE,
    "compute.instances.hostError": Severity.ERROR,
}
_PREEMPTED: Final = "compute.instances.preempted"
# GCE sends the ACPI soft-off and gives the guest 30 s before it stops the VM.
PREEMPT_NOTICE_MS: Final = 30_000
_STATUS: Final = {"PENDING": "scheduled", "ONGOING": "active", "COMPLETE": "completed"}
# The same document in snake_case (metadata server) and camelCase (Compute API resourceStatus).
_KEYS: Final = {
    "window_start_time": "windowStartTime",
    "window_end_time": "windowEndTime",
    "latest_window_start_time": "latestWindowStartTime",
    "maintenance_status": "maintenanceStatus",
    "maintenance_reasons": "maintenanceReasons",
    "can_reschedule": "canReschedule",
    "type": "type",
}


def _is_operation(doc: Any) -> bool:
    return isinstance(doc, dict) and (
        doc.get("kind") == "compute#operation" or ("operationType" in doc and "targetLink" in doc)
    )


def looks_like_operations(doc: Any) -> bool:
    """A list of `compute#operation` objects (or one of them)."""
    if isinstance(doc, list):
        return bool(doc) and _is_operation(doc[0])
    return _is_operation(doc)


def _ts(value: Any) -> int | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"not a timestamp: {value!r}")
    return parse_ts(value)


def parse_operations(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """Host maintenance, host errors and preemptions out of an operations list."""
    for operation in doc if isinstance(doc, list) else (doc,):
        if not isinstance(operation, Mapping):
            yield Rejected(line, "operation is not a JSON object")
            continue
        kind = operation.get("operationType")
        if kind not in _HOST_EVENTS and kind != _PREEMPTED:
            continue
        yield from _operation(ctx, operation, str(kind), line)


def _operation(
    ctx: Context, operation: Mapping[str, Any], kind: str, line: int | None
) -> Iterator[Item]:
    raw = orjson.dumps(operation)
    target = operation.get("targetLink")
    name = target.rstrip("/").rsplit("/", 1)[-1] if isinstance(target, str) and target else None
    if not name:
        yield Rejected(line, f"{kind} operation without targetLink", raw)
        return
    try:
        start = _ts(operation.get("startTime")) or _ts(operation.get("insertTime"))
        end = _ts(operation.get("endTime"))
    except ValueError as exc:
        yield Rejected(line, f"{kind} operation for {name}: {exc}", raw)
        return
    if start is None:
        yield Rejected(line, f"{kind} operation for {name} without startTime or insertTime", raw)
        return
    short = kind.rsplit(".", 1)[-1]
    status = operation.get("status")
    native = str(operation.get("id") or operation.get("name") or f"{name}/{short}/{start}")
    status_message = operation.get("statusMessage")
    if isinstance(status_message, str) and status_message:
        detail = f": {status_message}"
    else:
        status_message, detail = None, ""
    common: dict[str, Any] = {
        "source": "gce",
        "native_id": native,
        "version": str(status or ""),
        "ts": start,
        "node": name,
        "instance_id": name,
        "raw": raw,
        "line": line,
    }
    if kind == _PREEMPTED:
        action_time = end if end is not None else start + PREEMPT_NOTICE_MS
        yield ctx.evidence(
            kind="spot.interruption",
            ts_end=action_time,
            message=f"GCE preempted {name}{detail}",
            severity=Severity.WARNING,
            attrs={
                "provider": "gce",
                "action": "preempt",
                "notice_time": start,
                "action_time": action_time,
            },
            **common,
        )
        return
    yield ctx.evidence(
        kind="maintenance.host_event",
        ts_end=end,
        message=f"GCE {short} on {name}{detail}",
        severity=_HOST_EVENTS[kind],
        attrs={"provider": "gce", "operation_type": short, "status_message": status_message},
        **common,
    )


def _get(doc: Mapping[str, Any], key: str) -> Any:
    value = doc.get(key)
    return doc.get(_KEYS[key]) if value is None else value


def looks_like_upcoming_maintenance(doc: Any) -> bool:
    """The metadata server's `instance/upcoming-maintenance` JSON (snake or camel case)."""
    if not isinstance(doc, dict):
        return False
    return ("maintenance_status" in doc or "maintenanceStatus" in doc) and (
        "window_start_time" in doc
        or "windowStartTime" in doc
        or "latest_window_start_time" in doc
        or "start_time_window" in doc
    )


def parse_upcoming_maintenance(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """Scheduled host maintenance of the node the document was read on (needs --node)."""
    node = ctx.node_hint or ctx.options.instance
    if node is None:
        yield Rejected(None, "upcoming-maintenance does not name its instance: pass --node NODE")
        return
    raw = orjson.dumps(doc)
    window = doc.get("start_time_window") if isinstance(doc.get("start_time_window"), dict) else {}
    try:
        start = (
            _ts(_get(doc, "window_start_time"))
            or _ts(window.get("earliest"))
            or _ts(_get(doc, "latest_window_start_time"))
        )
        end = _ts(_get(doc, "window_end_time"))
        latest = _ts(_get(doc, "latest_window_start_time")) or _ts(window.get("latest"))
    except ValueError as exc:
        yield Rejected(line, f"upcoming-maintenance: {exc}", raw)
        return
    if start is None:
        yield Rejected(line, "upcoming-maintenance without window_start_time", raw)
        return
    status = str(_get(doc, "maintenance_status") or "PENDING")
    state = _STATUS.get(status.upper(), status.lower())
    kind = _get(doc, "type")
    reasons = _get(doc, "maintenance_reasons")
    reasons = [str(r) for r in reasons] if isinstance(reasons, list) else []
    can_reschedule = _get(doc, "can_reschedule")
    if isinstance(can_reschedule, str):
        can_reschedule = can_reschedule.lower() == "true"
    yield ctx.evidence(
        source="gce",
        native_id=f"{node}/upcoming-maintenance/{start}",
        version=state,
        ts=start,
        ts_end=end,
        kind="maintenance.scheduled",
        message=f"GCE {kind or 'scheduled'} maintenance {state} for {node}"
        + (f" ({', '.join(reasons)})" if reasons else ""),
        severity=Severity.WARNING if state in ("scheduled", "active") else Severity.NOTICE,
        node=node,
        instance_id=ctx.options.instance or node,
        attrs={
            "provider": "gce",
            "type": kind,
            "state": state,
            "description": ", ".join(reasons) or None,
            "event_id": None,
            "reasons": reasons,
            "can_reschedule": can_reschedule,
            "latest_start": latest,
        },
        raw=raw,
        line=line,
    )
