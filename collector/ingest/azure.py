"""Azure IMDS Scheduled Events (`/metadata/scheduledevents`), one record per event and VM.

`Freeze`, `Reboot` and `Redeploy` → `maintenance.scheduled`; `Preempt` (Spot eviction) →
`spot.interruption`; `Terminate` (a scale-set or user delete) → `instance.terminate_notice`.
`NotBefore` is RFC 1123 and is empty once an event has `Started`; then the time is --at, or
else the file's modification time (attrs `ts_source` says which). `DurationInSeconds` > 0 gives
the end of the window.

Node names. An event names VMs, not nodes. A Uniform scale-set VM is `{scale-set}_{instance id}`
with a decimal instance id, and its computer name (the hostname, which AKS uses as the node
name) is the computer-name prefix followed by the instance id in base 36, zero-padded to six
characters ("nsgvmss" and id 85 → "nsgvmss00002D" in Microsoft's scale-set instance-id docs).
AKS sets the prefix to the scale-set name, and node names are lower case, so
`aks-gpupool-12345678-vmss_3` → `aks-gpupool-12345678-vmss000003` and `…-vmss_36` →
`…-vmss000010`; the Azure Disk CSI driver's `getVMSSInstanceName` does the same conversion
(`strconv.FormatInt(id, 36)`, `%06s`). Flexible-mode VMs (`{scale-set}_{8 hex}`) have no
derivable computer name, so they get a node only when --instance names them and --node is
given; a plain VM name (AKS VirtualMachines pools) is its node name.

Ids hash the EventId with the VM; the version is the status and NotBefore, so a Scheduled
event that later Starts, or is moved, is a new version, while the DocumentIncarnation (which
changes whenever any event in the document changes) is not part of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

from whyjob.collector.ingest.base import Context, Item, Rejected, text_or_none
from whyjob.core.evidence import Severity
from whyjob.core.timeutil import parse_ts

__all__ = [
    "looks_like_scheduled_events",
    "parse_scheduled_events",
    "vmss_node_name",
]

_UNIFORM_VM = re.compile(r"^(?P<prefix>.+)_(?P<index>\d+)$")
_FLEX_VM = re.compile(r"_[0-9a-f]{8}$", re.IGNORECASE)
_DIGITS36: Final = "0123456789abcdefghijklmnopqrstuvwxyz"
_MAINTENANCE: Final = {
    "Freeze": Severity.NOTICE,
    "Reboot": Severity.WARNING,
    "Redeploy": Severity.WARNING,
}
_STATES: Final = {"Scheduled": "scheduled", "Started": "active"}
# Azure gives a Spot VM at least 30 s between the Preempt event and the eviction.
PREEMPT_NOTICE_MS: Final = 30_000


def _base36(number: int) -> str:
    digits = ""
    while True:
        number, rest = divmod(number, 36)
        digits = _DIGITS36[rest] + digits
        if number == 0:
            return digits


def vmss_node_name(resource: str) -> str | None:
    """The AKS node name of a scale-set VM: `aks-gpupool-12345678-vmss_3` →
    `aks-gpupool-12345678-vmss000003` (instance id in base 36, six characters).

    None for a Flexible-mode VM, whose computer name cannot be derived from its VM name.
    A name without an instance suffix is a standalone VM and is its own node name.
    """
    if match := _UNIFORM_VM.match(resource):
        index = int(match.group("index"))
        return f"{match.group('prefix')}{_base36(index).rjust(6, '0')}".lower()
    if _FLEX_VM.search(resource):
        return None
    return resource.lower()


def looks_like_scheduled_events(doc: Any) -> bool:
    return (
        isinstance(doc, dict)
        and isinstance(doc.get("Events"), list)
        and "DocumentIncarnation" in doc
    )


def parse_scheduled_events(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """Every event of the document, once per VM it names."""
    for event in doc.get("Events") or ():
        if not isinstance(event, Mapping):
            yield Rejected(line, "scheduled event is not a JSON object")
            continue
        yield from _event(ctx, event, line)


def _event(ctx: Context, event: Mapping[str, Any], line: int | None) -> Iterator[Item]:
    raw = orjson.dumps(event)
    event_id = text_or_none(event.get("EventId"))
    event_type = text_or_none(event.get("EventType"))
    if event_id is None or event_type is None:
        yield Rejected(line, "scheduled event without EventId or EventType", raw)
        return
    not_before = event.get("NotBefore")
    ts_source = "not_before"
    try:
        ts = parse_ts(not_before) if isinstance(not_before, str) and not_before.strip() else None
    except ValueError as exc:
        yield Rejected(line, f"scheduled event {event_id}: {exc}", raw)
        return
    if ts is None:
        if ctx.options.at is not None:
            ts, ts_source = ctx.options.at, "at"
        elif ctx.mtime_ms is not None:
            ts, ts_source = ctx.mtime_ms, "mtime"
        else:
            yield Rejected(line, f"event {event_id} has no NotBefore: pass --at TIME", raw)
            return
    duration = event.get("DurationInSeconds")
    duration = duration if isinstance(duration, int) and not isinstance(duration, bool) else None
    ts_end = ts + duration * 1000 if duration is not None and duration > 0 else None
    status = text_or_none(event.get("EventStatus")) or "Scheduled"
    state = _STATES.get(status, status.lower())
    resources = [r for r in event.get("Resources") or () if isinstance(r, str) and r]
    if not resources:
        own = ctx.options.instance or ctx.node_hint
        if own is None:
            yield Rejected(
                line, f"event {event_id} names no VM: pass --instance VM_NAME or --node NODE", raw
            )
            return
        resources = [own]
    for resource in resources:
        node = vmss_node_name(resource)
        if ctx.options.node and resource in (ctx.options.instance, ctx.options.node):
            node = ctx.options.node
        yield _record(
            ctx, event, event_id, event_type, state, status, ts, ts_end, ts_source, duration,
            resource, node, raw, line,
        )  # fmt: skip


def _record(
    ctx: Context,
    event: Mapping[str, Any],
    event_id: str,
    event_type: str,
    state: str,
    status: str,
    ts: int,
    ts_end: int | None,
    ts_source: str,
    duration: int | None,
    resource: str,
    node: str | None,
    raw: bytes,
    line: int | None,
) -> Item:
    description = text_or_none(event.get("Description"))
    event_source = text_or_none(event.get("EventSource"))
    common: dict[str, Any] = {
        "source": "azure",
        "native_id": f"{event_id}/{resource}",
        "version": f"{status}/{event.get('NotBefore') or ''}",
        "instance_id": resource,
        "node": node,
        "raw": raw,
        "line": line,
    }
    where = f"{resource}" + (f" (node {node})" if node and node != resource else "")
    if event_type in _MAINTENANCE:
        return ctx.evidence(
            ts=ts,
            ts_end=ts_end,
            kind="maintenance.scheduled",
            message=f"Azure {event_type} {state} for {where}"
            + (f": {description}" if description else ""),
            severity=_MAINTENANCE[event_type],
            attrs={
                "provider": "azure",
                "type": event_type,
                "state": state,
                "description": description,
                "event_id": event_id,
                "event_source": event_source,
                "duration_seconds": duration,
                "ts_source": ts_source,
            },
            **common,
        )
    if event_type == "Preempt":
        notice = ts - PREEMPT_NOTICE_MS if ts_source == "not_before" else ts
        return ctx.evidence(
            ts=notice,
            ts_end=ts,
            kind="spot.interruption",
            message=f"Azure Spot eviction ({state}) of {where}",
            severity=Severity.WARNING,
            attrs={
                "provider": "azure",
                "action": "preempt",
                "notice_time": notice,
                "action_time": ts,
                "event_id": event_id,
                "ts_source": ts_source,
            },
            **common,
        )
    return ctx.evidence(
        ts=ts,
        ts_end=ts_end,
        kind="instance.terminate_notice" if event_type == "Terminate" else "maintenance.scheduled",
        message=f"Azure {event_type} ({state}) of {where}"
        + (f": {description}" if description else ""),
        severity=Severity.WARNING,
        attrs={
            "provider": "azure",
            "event_type": event_type,
            "event_source": event_source,
            "type": event_type,
            "state": state,
            "description": description,
            "event_id": event_id,
            "ts_source": ts_source,
        },
        **common,
    )
