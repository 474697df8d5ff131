"""whyjob's own traces and metrics, sent over OTLP/HTTP when the standard OpenTelemetry
environment names a destination (OTEL_EXPORTER_OTLP_ENDPOINT, or its _TRACES_ / _METRICS_
forms; OTEL_SERVICE_NAME, default `whyjob`; OTEL_EXPORTER_OTLP_HEADERS for a token).

Without one, nothing of OpenTelemetry is imported: `span` is a no-op and costs a dictionary
lookup, so `whyjob EXPERIMENT` starts as fast as before. With one, spans cover ingest (a span
per file), explain (gather, then the rules) and API requests, and `observe` turns a collecting
process's gauges (lag, queue depth, up) into OTLP metrics.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["enabled", "flush", "observe", "shutdown", "span"]

_lock = threading.Lock()
_tracer: Any = None
_providers: list[Any] = []


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return (
        any(
            env.get(name)
            for name in (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            )
        )
        and env.get("OTEL_SDK_DISABLED", "").lower() != "true"
    )


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    return Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "whyjob")})


def _get_tracer() -> Any:
    global _tracer
    with _lock:
        if _tracer is None:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor

            provider = TracerProvider(resource=_resource())
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            _providers.append(provider)
            _tracer = provider.get_tracer("whyjob")
            atexit.register(flush)
        return _tracer


@contextmanager
def span(name: str, **attributes: Any) -> Iterator[Any]:
    """A span around the block when telemetry is on (the current span is its parent)."""
    if not enabled():
        yield None
        return
    clean = {k: v for k, v in attributes.items() if isinstance(v, str | bool | int | float)}
    with _get_tracer().start_as_current_span(name, attributes=clean) as current:
        yield current


def observe(
    gauges: Callable[[], Mapping[str, Mapping[tuple[tuple[str, str], ...], float]]],
) -> Callable[[], None]:
    """Report `gauges()` (metric name -> {labels: value}) as OTLP gauges, read at each export
    (every OTEL_METRIC_EXPORT_INTERVAL, 60 s by default). Returns what stops it (its reader
    thread and a last export), for whoever owns the gauges to call when they end."""
    if not enabled():
        return lambda: None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(resource=_resource(), metric_readers=[reader])
    with _lock:
        _providers.append(provider)
    meter = provider.get_meter("whyjob")
    for name in gauges():

        def read(options: CallbackOptions, name: str = name) -> list[Observation]:
            return [
                Observation(value, dict(labels)) for labels, value in gauges().get(name, {}).items()
            ]

        meter.create_observable_gauge(name, callbacks=[read])
    atexit.register(flush)

    def stop() -> None:
        with _lock:
            if provider not in _providers:
                return  # shut down already
            _providers.remove(provider)
        provider.shutdown()

    return stop


def flush() -> None:
    """Send what is pending (at exit, and when a command ends)."""
    with _lock:
        providers = list(_providers)
    for provider in providers:
        provider.force_flush()


def shutdown() -> None:
    """Flush and stop every provider (a later span or `observe` starts afresh)."""
    global _tracer
    with _lock:
        providers, _providers[:] = list(_providers), []
        _tracer = None
    for provider in providers:
        provider.shutdown()
