"""Kubernetes audit events: who deleted or evicted a pod.

The API server's audit log (`--audit-log-path`, one `audit.k8s.io/v1` Event a line; the webhook
backend sends them as an `EventList`) is the one record that names who removed a pod: a person
through `kubectl delete`, a controller's service account (the job controller, the pod
garbage collector, the cluster autoscaler), or the kubelet (`system:node:NAME`). Two requests
are evidence, and only once the API server answered them with success:

- `delete` of a pod → `pod.deleting`, naming the user and the client (`userAgent`);
- `create` of a pod's `eviction` subresource (a drain) → `pod.disruption` with reason
  `EvictionByEvictionAPI`, what the API server also writes into the pod's DisruptionTarget
  condition.

Every other request (reads, other resources, refused or failed calls, the `RequestReceived`
stage of a request logged again when it completed) is skipped without a record. The request
and response bodies are never kept: at the `RequestResponse` level they hold whole objects,
secrets included.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

from whyjob.collector.ingest.base import Context, Item, Rejected
from whyjob.core.evidence import Severity
from whyjob.core.timeutil import parse_ts

__all__ = ["is_audit_event", "parse_audit_event"]

# The fields kept as the record's raw copy: who asked for what, and the answer's status.
_KEPT: Final = (
    "auditID",
    "stage",
    "verb",
    "requestURI",
    "user",
    "impersonatedUser",
    "userAgent",
    "objectRef",
    "responseStatus",
    "requestReceivedTimestamp",
    "stageTimestamp",
)


def is_audit_event(doc: Any) -> bool:
    """An audit event, alone (`apiVersion: audit.k8s.io/v1`) or an item of an `EventList` (which
    drops the items' apiVersion): its `auditID` and `verb` tell it from a core/v1 Event."""
    return isinstance(doc, dict) and "auditID" in doc and "verb" in doc


def _succeeded(event: Mapping[str, Any]) -> bool:
    if event.get("stage") not in (None, "ResponseComplete"):
        return False
    status = event.get("responseStatus")
    code = status.get("code") if isinstance(status, dict) else None
    return code is None or (isinstance(code, int) and 200 <= code < 300)


def _who(event: Mapping[str, Any]) -> tuple[str, str]:
    user = event.get("impersonatedUser") or event.get("user")
    name = user.get("username") if isinstance(user, dict) else None
    return str(name or "an unknown user"), str(event.get("userAgent") or "")


def parse_audit_event(ctx: Context, event: Mapping[str, Any], line: int | None) -> Iterator[Item]:
    """A pod deleted or evicted through the API, from one audit event; nothing for the rest."""
    ref = event.get("objectRef")
    if not isinstance(ref, dict) or ref.get("resource") != "pods" or not _succeeded(event):
        return
    verb, subresource = event.get("verb"), ref.get("subresource")
    name, namespace = ref.get("name"), ref.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return
    if verb == "delete" and not subresource:
        kind, what, attrs = "pod.deleting", "deleted", {}
    elif verb == "create" and subresource == "eviction":
        kind, what = "pod.disruption", "evicted through the Eviction API"
        attrs = {"condition": "audit", "reason": "EvictionByEvictionAPI"}
    else:
        return
    audit_id = str(event.get("auditID"))
    kept = orjson.dumps({k: event[k] for k in _KEPT if k in event})
    stamp = event.get("stageTimestamp") or event.get("requestReceivedTimestamp")
    try:
        ts = parse_ts(stamp) if isinstance(stamp, str) else None
    except ValueError as exc:
        yield Rejected(line, f"audit event {audit_id}: {exc}", kept)
        return
    user, agent = _who(event)
    yield ctx.evidence(
        source="k8s.audit",
        native_id=audit_id,
        ts=ts if ts is not None else ctx.options.at or ctx.mtime_ms or int(time.time() * 1000),
        kind=kind,
        message=f"Pod {namespace}/{name} {what} by {user}" + (f" ({agent})" if agent else ""),
        severity=Severity.NOTICE,
        attrs={**attrs, "user": user, "user_agent": agent, "verb": verb, "audit_id": audit_id},
        raw=kept,
        line=line,
        namespace=namespace,
        pod=name,
        pod_uid=ref.get("uid") if isinstance(ref.get("uid"), str) else None,
    )
