"""An experiment's story as an OpenTelemetry trace, to open in Jaeger or Tempo beside the job's
own traces.

One root span for the experiment (first run to last), a child span per run with its cause as
attributes and status, the records it cites as span events at their own times, and a link from
each collateral run to the run whose failure took it down. The trace id is derived from the
experiment (cluster, namespace, name), so exporting it again lands on the same trace.

Built with opentelemetry-sdk and encoded with the OTLP exporter's own encoder; the SDK is
imported only here, so only `--otlp` and the trace route pay for it.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from whyjob.core.taxonomy import CATEGORIES
from whyjob.explain.model import Attempt, Explanation

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["export_story", "story_request", "trace_id_of"]

_NS = 1_000_000  # epoch ms -> ns


def trace_id_of(explanation: Explanation) -> int:
    """The experiment's trace id: the same for every export of it."""
    info = explanation.experiment
    key = f"{info.cluster or ''}\x1f{info.namespace}\x1f{info.name}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=16).digest(), "big") or 1


def _span_id(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") or 1


def _spans(explanation: Explanation) -> list[ReadableSpan]:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import Link, Status, StatusCode

    info, verdict = explanation.experiment, explanation.verdict
    ids = iter([_span_id(f"experiment\x1f{info.cluster or ''}\x1f{info.namespace}\x1f{info.name}")] + [
        _span_id(a.id) for a in explanation.attempts
    ])  # fmt: skip

    class StoryIds(IdGenerator):
        """The experiment's trace id and a span id per run, stable across exports."""

        def generate_trace_id(self) -> int:
            return trace_id_of(explanation)

        def generate_span_id(self) -> int:
            return next(ids)

    attributes: dict[str, Any] = {"service.name": "whyjob", "k8s.namespace.name": info.namespace}
    if info.cluster:
        attributes["k8s.cluster.name"] = info.cluster
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(attributes), id_generator=StoryIds())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("whyjob.story")
    times = [t for a in explanation.attempts for t in (a.started_at, a.ended_at) if t]
    start = min(times, default=explanation.generated_at)
    end = max(times, default=explanation.generated_at)
    cited = {t.id: t for t in explanation.timeline}
    root = tracer.start_span(
        f"experiment {info.namespace}/{info.name}",
        # A root of its own, never a child of whatever span is current (the API request's when
        # whyjob traces itself): the story's trace id stays the experiment's.
        context=otel_context.Context(),
        start_time=start * _NS,
        attributes={
            "whyjob.verdict.category": verdict.category,
            "whyjob.verdict.grade": verdict.grade,
            "whyjob.verdict.outcome": verdict.outcome,
            "whyjob.verdict.owner": verdict.owner,
            "whyjob.verdict.summary": verdict.summary,
            "whyjob.gpu_hours.used": round(explanation.gpu_hours.used, 2),
            "whyjob.gpu_hours.lost": round(explanation.gpu_hours.lost, 2),
            "whyjob.loop.looping": explanation.loop.looping,
            "whyjob.launcher": info.launcher or "",
        },
    )
    for step in explanation.chain:
        root.add_event(
            f"chain.{step.role}",
            {"summary": step.summary, "evidence": step.evidence},
            timestamp=(step.at or start) * _NS,
        )
    context = trace.set_span_in_context(root)
    made: dict[str, Any] = {}
    for attempt in explanation.attempts:  # oldest first: a cause is made before its collateral
        links = []
        if attempt.caused_by and attempt.caused_by in made:
            links.append(
                Link(made[attempt.caused_by].get_span_context(), {"whyjob.link": "caused_by"})
            )
        span = tracer.start_span(
            _name(attempt),
            context=context,
            links=links,
            start_time=(attempt.started_at or attempt.ended_at or start) * _NS,
            attributes=_attributes(attempt),
        )
        for evidence_id in attempt.evidence:
            entry = cited.get(evidence_id)
            if entry is not None:
                span.add_event(
                    entry.kind,
                    {"whyjob.evidence.id": entry.id, "message": entry.message[:1000]},
                    timestamp=entry.at * _NS,
                )
        if attempt.failed:
            span.set_status(Status(StatusCode.ERROR, attempt.summary or attempt.category or ""))
        span.end(end_time=(attempt.ended_at or end) * _NS)
        made[attempt.id] = span
    if verdict.outcome == "failed":
        root.set_status(Status(StatusCode.ERROR, verdict.summary))
    root.end(end_time=end * _NS)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def _name(attempt: Attempt) -> str:
    who = attempt.rank or attempt.pod
    return f"run {who} restart {attempt.restart}"


def _attributes(attempt: Attempt) -> dict[str, Any]:
    out: dict[str, Any] = {
        "k8s.pod.name": attempt.pod,
        "k8s.pod.uid": attempt.pod_uid,
        "k8s.container.name": attempt.container,
        "whyjob.attempt.id": attempt.id,
        "whyjob.restart": attempt.restart,
        "whyjob.state": attempt.state,
    }
    optional = {
        "k8s.node.name": attempt.node,
        "whyjob.rank": attempt.rank,
        "whyjob.category": attempt.category,
        "whyjob.grade": attempt.grade,
        "whyjob.summary": attempt.summary,
        "whyjob.exit_code": attempt.exit_code,
        "whyjob.caused_by": attempt.caused_by,
        "whyjob.gpu_hours_lost": attempt.gpu_hours_lost,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    if attempt.category in CATEGORIES:
        out["whyjob.owner"] = CATEGORIES[attempt.category].owner
    return out


def story_request(explanation: Explanation) -> ExportTraceServiceRequest:
    """The story as the OTLP protobuf an exporter would send (ExportTraceServiceRequest)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(_spans(explanation))


def export_story(explanation: Explanation, endpoint: str, timeout_s: float = 10.0) -> int:
    """Send the story to an OTLP/HTTP endpoint (`http://collector:4318`, or its full
    `/v1/traces` URL); returns how many spans. Raises RuntimeError when it is refused."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    url = (
        endpoint
        if endpoint.rstrip("/").endswith("/v1/traces")
        else endpoint.rstrip("/") + "/v1/traces"
    )
    spans = _spans(explanation)
    exporter = OTLPSpanExporter(endpoint=url, timeout=timeout_s)
    try:
        result = exporter.export(spans)
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
    if result is not SpanExportResult.SUCCESS:
        raise RuntimeError(f"the OTLP endpoint {url} did not take the trace")
    return len(spans)
