"""How each collector is doing, served as Prometheus metrics on whyjob's own endpoint.

Counters (records read, errors, reconnects), gauges (lag, queue depth) and each collector's
state. The exposition is the Prometheus text format written out by hand: a dozen series do not
need a client library.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

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
        """The Prometheus text format."""
        with self._lock:
            lines = [
                "# HELP whyjob_collector_up 1 while the collector is reading its source.",
                "# TYPE whyjob_collector_up gauge",
            ]
            lines += [
                f'whyjob_collector_up{{collector="{n}"}} {int(s.up)}' for n, s in self._sorted()
            ]
            lines += [
                "# HELP whyjob_collector_last_success_timestamp_seconds Last successful read.",
                "# TYPE whyjob_collector_last_success_timestamp_seconds gauge",
            ]
            lines += [
                f'whyjob_collector_last_success_timestamp_seconds{{collector="{n}"}} {s.last_success:.3f}'
                for n, s in self._sorted()
                if s.last_success is not None
            ]
            lines += [
                "# HELP whyjob_collector_lag_seconds How far behind its source the collector is.",
                "# TYPE whyjob_collector_lag_seconds gauge",
            ]
            lines += [
                f'whyjob_collector_lag_seconds{{collector="{n}"}} {s.lag_s:.3f}'
                for n, s in self._sorted()
                if s.lag_s is not None
            ]
            lines += [
                "# HELP whyjob_collector_events_total Counts by collector and what was counted.",
                "# TYPE whyjob_collector_events_total counter",
            ]
            lines += [
                f'whyjob_collector_events_total{{collector="{c}",what="{w}"}} {v:g}'
                for (c, w), v in sorted(self.counters.items())
            ]
            for name, value in sorted(self.gauges.items()):
                lines += [f"# TYPE whyjob_{name} gauge", f"whyjob_{name} {value:g}"]
        return "\n".join(lines) + "\n"

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


class MetricsServer:
    """`/metrics` (Prometheus text) and `/healthz` (JSON) on a loopback or pod port."""

    def __init__(self, health: Health, host: str = "127.0.0.1", port: int = 0) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    body = owner.health.exposition().encode()
                    kind = "text/plain; version=0.0.4; charset=utf-8"
                elif self.path.split("?")[0] == "/healthz":
                    summary = owner.health.summary()
                    body = orjson.dumps({"fatal": owner.health.fatal, "collectors": summary})
                    kind = "application/json"
                    if owner.health.fatal is not None:
                        self.send_response(503)
                        self.send_header("Content-Type", kind)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                        return
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # scrapes every few seconds would drown the collector's own log

        self.health = health
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="whyjob-metrics", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
