"""How each collector is doing, served on whyjob's own endpoint: Prometheus metrics, liveness
and readiness.

Counters (records read, errors, reconnects), gauges (lag, queue depth) and each collector's
state live in one Health object. `/metrics` is prometheus_client's exposition of a custom
Collector that reads that object at scrape time (no second set of counters to keep in step; the
client does the escaping, number formats and OpenMetrics negotiation). `/livez` (and `/healthz`,
its older name) answers 503 once the process can no longer do its job, so the kubelet restarts
it; `/readyz` also while the index does not answer, so no traffic (the agents' records) is
sent to it. Only `/healthz` details each collector's state and last error. Served by uvicorn with a small Starlette app: the HTTP stack
`whyjob serve` already runs.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from whyjob.collector.live.serving import ThreadedServer

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response


__all__ = ["CollectorState", "Health", "MetricsServer"]


@dataclass(slots=True)
class CollectorState:
    up: bool = False
    last_success: float | None = None  # unix seconds of the last successful read
    last_error: str | None = None
    last_error_at: float | None = None
    lag_s: float | None = None  # how far behind its source the collector is, when it can tell


@dataclass
class Health:
    """Thread-safe counters, gauges and states keyed by collector name."""

    counters: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    gauges: dict[str, float] = field(default_factory=dict)
    states: dict[str, CollectorState] = field(default_factory=dict)
    on_error: Callable[[str, str], object] | None = None  # e.g. a log line per error
    fatal: str | None = None  # set when the process can no longer do its job (/healthz: 503)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def state(self, collector: str) -> CollectorState:
        with self._lock:
            return self.states.setdefault(collector, CollectorState())

    def count(self, collector: str, what: str, n: float = 1) -> None:
        with self._lock:
            self.counters[(collector, what)] += n

    def gauge(self, name: str, value: float) -> None:
        with self._lock:
            self.gauges[name] = value

    def ok(self, collector: str, lag_s: float | None = None) -> None:
        state = self.state(collector)
        with self._lock:
            state.up, state.last_success = True, time.time()
            if lag_s is not None:
                state.lag_s = max(0.0, lag_s)

    def error(self, collector: str, message: str, *, down: bool = True) -> None:
        state = self.state(collector)
        with self._lock:
            state.last_error, state.last_error_at = message, time.time()
            if down:
                state.up = False
            self.counters[(collector, "errors")] += 1
        if self.on_error is not None:
            self.on_error(collector, message)

    def gauge_table(self) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
        """The gauges as OTLP metrics read them: name -> {labels: value}."""
        with self._lock:
            table: dict[str, dict[tuple[tuple[str, str], ...], float]] = {
                "whyjob.collector.up": {},
                "whyjob.collector.lag": {},
            }
            for name, state in self.states.items():
                table["whyjob.collector.up"][(("collector", name),)] = float(state.up)
                if state.lag_s is not None:
                    table["whyjob.collector.lag"][(("collector", name),)] = state.lag_s
            for name, value in self.gauges.items():
                table[f"whyjob.{name}"] = {(): value}
        return table

    def exposition(self) -> str:
        """The Prometheus text format, as a scrape of /metrics gets it."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_HealthCollector(self))
        return generate_latest(registry).decode()

    def snapshot(
        self,
    ) -> tuple[list[tuple[str, CollectorState]], dict[tuple[str, str], float], dict[str, float]]:
        """States (copied), counters and gauges at one instant."""
        with self._lock:
            states = [(name, replace(s)) for name, s in self._sorted()]
            return states, dict(self.counters), dict(self.gauges)

    def not_ready(self) -> str | None:
        """Why this process should get no traffic, or None: it can no longer store anything
        (`fatal`). Sources being down is no reason: the traffic is the agents' records, which
        the receiver takes whatever the Kubernetes API or a cloud poller is doing (taking the
        pod out of its Service would cut them off too, and no post could then clear it); each
        source's loop retries it, and `whyjob_collector_up` is what to alert on."""
        with self._lock:
            return self.fatal

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {
                name: {
                    "up": s.up,
                    "last_success": s.last_success,
                    "lag_s": s.lag_s,
                    "last_error": s.last_error,
                }
                for name, s in self._sorted()
            }

    def _sorted(self) -> list[tuple[str, CollectorState]]:
        return sorted(self.states.items())


class _HealthCollector(Collector):
    """The Health object as Prometheus metric families, read at each scrape."""

    def __init__(self, health: Health) -> None:
        self.health = health

    def collect(self) -> Iterator[Metric]:
        states, counters, gauges = self.health.snapshot()
        up = GaugeMetricFamily(
            "whyjob_collector_up",
            "1 while the collector is reading its source.",
            labels=["collector"],
        )
        last = GaugeMetricFamily(
            "whyjob_collector_last_success_timestamp_seconds",
            "Last successful read.",
            labels=["collector"],
        )
        lag = GaugeMetricFamily(
            "whyjob_collector_lag_seconds",
            "How far behind its source the collector is.",
            labels=["collector"],
        )
        for name, state in states:
            up.add_metric([name], float(state.up))
            if state.last_success is not None:
                last.add_metric([name], state.last_success)
            if state.lag_s is not None:
                lag.add_metric([name], state.lag_s)
        events = CounterMetricFamily(
            "whyjob_collector_events",
            "Counts by collector and what was counted.",
            labels=["collector", "what"],
        )
        for (collector, what), value in sorted(counters.items()):
            events.add_metric([collector, what], value)
        yield from (up, last, lag, events)
        for name, value in sorted(gauges.items()):
            yield GaugeMetricFamily(f"whyjob_{name}", f"whyjob's {name.replace('_', ' ')}.", value)


class MetricsServer:
    """`/metrics` (Prometheus), `/livez` and `/healthz` (liveness, JSON) and `/readyz`
    (readiness, JSON: 503 with the reason) on a loopback or pod port. `probe` is the index's
    readiness (IndexProbe); a process without an index (the agent) has none."""

    def __init__(
        self,
        health: Health,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        probe: Callable[[], str | None] | None = None,
    ) -> None:
        from starlette.applications import Starlette
        from starlette.routing import Route

        self.health = health
        self.probe = probe
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_HealthCollector(health))
        app = Starlette(
            routes=[
                Route("/metrics", self._metrics),
                Route("/livez", self._live),
                Route("/healthz", self._live),
                Route("/readyz", self._ready),
            ]
        )
        self._server = ThreadedServer(app, host, port, name="metrics endpoint")

    async def _metrics(self, request: Request) -> Response:
        from starlette.responses import Response

        encoder, kind = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(self._registry), media_type=kind)

    async def _live(self, request: Request) -> Response:
        from starlette.responses import Response

        body: dict[str, Any] = {"fatal": self.health.fatal}
        if request.url.path == "/healthz":  # the detailed view; the probes need only the verdict
            body["collectors"] = self.health.summary()
        status = 200 if self.health.fatal is None else 503
        return Response(orjson.dumps(body), status, media_type="application/json")

    async def _ready(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import Response

        reason = self.health.not_ready()
        if reason is None and self.probe is not None:
            reason = await run_in_threadpool(self.probe)  # may wait on the index
        body = {"ready": reason is None, "reason": reason}
        status = 200 if reason is None else 503
        return Response(orjson.dumps(body), status, media_type="application/json")

    @property
    def address(self) -> tuple[str, int]:
        return self._server.address

    def start(self) -> MetricsServer:
        """Serve on a thread of its own; returns once the endpoint answers."""
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()
