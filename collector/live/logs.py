"""Job logs arriving live: what to keep of them, and OTLP/HTTP log requests as records.

A training job prints a progress line every step; storing every line of every rank would
drown the index in lines no explanation reads. `LogRetention` keeps what explanations use:
errors, warnings, tracebacks and checkpoint lines always, with the lines just before each
error as context; progress lines at most every `progress_every_s`; and the tail of a container
that went quiet (it may have died: that tail is what a person reads first). `keep: all` keeps
every line instead. Secrets are redacted before any of this (loglines.redact).

OTLP: an OpenTelemetry Collector's `otlphttp` exporter posts `ExportLogsServiceRequest`s
(protobuf or JSON) whose resource attributes name the pod (`k8s.pod.uid`, `k8s.pod.name`,
`k8s.namespace.name`, `k8s.container.name`, `k8s.container.restart_count`, `k8s.node.name`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from whyjob.collector.ingest import podlogs
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, Severity

__all__ = ["LogRetention", "decode_otlp", "otlp_items"]

_ALWAYS = frozenset({"log.error", "log.traceback", "log.checkpoint"})


@dataclass(slots=True)
class _Stream:
    context: deque[Evidence]
    last_progress: int = -(10**15)
    last_seen: float = field(default_factory=time.monotonic)


class LogRetention:
    """Filters one collector's log records as they arrive (see the module docstring)."""

    def __init__(
        self,
        *,
        keep_all: bool = False,
        context_lines: int = 20,
        progress_every_s: float = 30.0,
        idle_flush_s: float = 60.0,
    ) -> None:
        self.keep_all = keep_all
        self.context_lines = context_lines
        self.progress_every_ms = int(progress_every_s * 1000)
        self.idle_flush_s = idle_flush_s
        self._streams: dict[tuple[str | None, str | None, Any], _Stream] = {}
        self.dropped = 0

    def _stream(self, ev: Evidence) -> _Stream:
        key = (ev.pod_uid or ev.pod, ev.container, ev.attrs.get("restart"))
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = _Stream(deque(maxlen=max(1, self.context_lines)))
        stream.last_seen = time.monotonic()
        return stream

    def filter(self, items: Iterable[Item]) -> list[Item]:
        if self.keep_all:
            return list(items)
        kept: list[Item] = []
        for item in items:
            if not isinstance(item, Evidence) or not item.kind.startswith("log."):
                kept.append(item)
                continue
            stream = self._stream(item)
            if item.kind in _ALWAYS or item.severity >= Severity.WARNING:
                kept.extend(stream.context)  # what led up to it
                stream.context.clear()
                kept.append(item)
            elif item.kind == "log.progress":
                if item.ts - stream.last_progress >= self.progress_every_ms:
                    stream.last_progress = item.ts
                    kept.append(item)
                else:
                    self.dropped += 1
            else:
                if len(stream.context) == stream.context.maxlen:
                    self.dropped += 1
                stream.context.append(item)
        return kept

    def flush_stream(self, pod: str, container: str, restart: object) -> list[Item]:
        """The held last lines of one container run, which has ended."""
        stream = self._streams.pop((pod, container, restart), None)
        return list(stream.context) if stream else []

    def flush_all(self) -> list[Item]:
        """Every held tail (on the way out: the checkpoints are already past these lines)."""
        out: list[Item] = [item for stream in self._streams.values() for item in stream.context]
        self._streams.clear()
        return out

    def flush_idle(self, now: float | None = None) -> list[Item]:
        """The held tails of containers that have gone quiet (and may have died)."""
        now = time.monotonic() if now is None else now
        out: list[Item] = []
        for key, stream in list(self._streams.items()):
            if now - stream.last_seen >= self.idle_flush_s:
                out.extend(stream.context)
                del self._streams[key]
        return out


def _attributes(values: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attribute in values or ():
        value = attribute.get("value") or {}
        for kind in ("stringValue", "intValue", "boolValue", "doubleValue"):
            if kind in value:
                out[str(attribute.get("key"))] = value[kind]
                break
    return out


def decode_otlp(body: bytes, content_type: str) -> dict[str, Any]:
    """An ExportLogsServiceRequest as the JSON mapping of the OTLP spec (camelCase keys)."""
    if "protobuf" in content_type:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
        )

        request = ExportLogsServiceRequest()
        request.ParseFromString(body)
        return dict(MessageToDict(request))
    import orjson

    document = orjson.loads(body)
    if not isinstance(document, dict):
        raise ValueError("an OTLP logs request is a JSON object")
    return document


def otlp_items(document: Mapping[str, Any], options: IngestOptions) -> list[Item]:
    """Log records of each pod and container as the same records a kubelet log file gives."""
    items: list[Item] = []
    for resource_logs in document.get("resourceLogs") or ():
        resource = _attributes((resource_logs.get("resource") or {}).get("attributes") or ())
        pod, namespace = resource.get("k8s.pod.name"), resource.get("k8s.namespace.name")
        if not pod or not namespace:
            items.append(
                Rejected(None, "OTLP resource without k8s.pod.name and k8s.namespace.name")
            )
            continue
        restart = resource.get("k8s.container.restart_count")
        hints = {
            "namespace": namespace,
            "pod": pod,
            "uid": resource.get("k8s.pod.uid"),
            "container": resource.get("k8s.container.name") or "main",
            "restart": int(restart) if restart is not None else None,
        }
        lines: list[tuple[int, str]] = []
        for scope in resource_logs.get("scopeLogs") or ():
            for record in scope.get("logRecords") or ():
                nanos = int(record.get("timeUnixNano") or record.get("observedTimeUnixNano") or 0)
                body = _attributes([{"key": "body", "value": record.get("body") or {}}]).get("body")
                if not nanos or body is None:
                    continue
                stamp = (
                    datetime.fromtimestamp(nanos / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"
                )
                lines.append((len(lines) + 1, f"{stamp} stdout F {body}"))
        ctx = Context(
            f"otlp:{namespace}/{pod}",
            options,
            path_hints={k: v for k, v in hints.items() if v is not None},
        )
        parsed = list(podlogs.parse_cri_text(ctx, lines))
        items += parsed
        node = resource.get("k8s.node.name")
        stamps = [i.ts for i in parsed if isinstance(i, Evidence)]
        if node and hints["uid"] and stamps:
            uid = str(hints["uid"])
            items.append(
                PodRecord(uid=uid, namespace=namespace, name=pod, seen=max(stamps), node=node)
            )
            items.append(Binding("pod.node", uid, node, min(stamps), max(stamps)))
    return items
