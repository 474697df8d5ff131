"""An experiment's story as an OTLP trace: sent by `whyjob explain --otlp` to a receiver that
decodes what arrives with the OTLP protobuf, and served by the trace route."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from typer.testing import CliRunner

from tests.api.conftest import Api, World
from whyjob.api.storytrace import trace_id_of
from whyjob.cli.app import app
from whyjob.cli.main import route
from whyjob.core.index import SqliteIndex
from whyjob.explain.engine import explain_experiment
from whyjob.explain.ruleset import load_rules


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """An OTLP/HTTP endpoint that keeps what it is sent (path and body)."""
    got: list[tuple[str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", got
    server.shutdown()
    server.server_close()


def _spans(request: ExportTraceServiceRequest) -> list[Any]:
    return [s for r in request.resource_spans for scope in r.scope_spans for s in scope.spans]


def _attributes(span: Any) -> dict[str, Any]:
    return {a.key: a.value.string_value or a.value.int_value for a in span.attributes}


def test_explain_sends_the_story_as_one_trace(
    world: World, receiver: tuple[str, list[tuple[str, bytes]]]
) -> None:
    url, got = receiver
    namespace, name = world.a
    argv = ["--index", str(world.index), "explain", name, "--otlp", url]
    result = CliRunner().invoke(app, route(argv))
    assert result.exit_code == 0, result.output
    ((path, body),) = got
    assert path == "/v1/traces"
    spans = _spans(ExportTraceServiceRequest.FromString(body))
    with SqliteIndex(world.index, readonly=True) as index:
        explanation = explain_experiment(index, load_rules(), name, namespace)
    assert {s.trace_id for s in spans} == {trace_id_of(explanation).to_bytes(16, "big")}
    (root,) = [s for s in spans if not s.parent_span_id]
    assert root.name == f"experiment {namespace}/{name}"
    assert _attributes(root)["whyjob.verdict.category"] == "gpu.xid"
    runs = {_attributes(s)["whyjob.attempt.id"]: s for s in spans if s.parent_span_id}
    assert set(runs) == {a.id for a in explanation.attempts}
    first = next(a for a in explanation.attempts if a.category == "gpu.xid")
    xid = runs[first.id]
    assert xid.status.code == 2 and {e.name for e in xid.events} >= {"gpu.xid"}
    collateral = [a for a in explanation.attempts if a.caused_by == first.id]
    assert collateral
    for attempt in collateral:
        (link,) = runs[attempt.id].links
        assert link.span_id == xid.span_id  # from the collateral run to the first domino
    assert f"trace {trace_id_of(explanation):032x}" in result.output


def test_the_trace_route_serves_the_same_story(api: Api, world: World) -> None:
    namespace, name = world.a
    answer = api.get(f"/api/v1/experiments/{namespace}/{name}/trace", "team-a")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/x-protobuf"
    spans = _spans(ExportTraceServiceRequest.FromString(answer.content))
    assert len(spans) >= 3
    as_json = api.get(f"/api/v1/experiments/{namespace}/{name}/trace?format=json", "team-a")
    assert len(json.loads(as_json.text)["resourceSpans"][0]["scopeSpans"][0]["spans"]) == len(spans)
    hidden = api.get(f"/api/v1/experiments/{world.b[0]}/{world.b[1]}/trace", "team-a")
    assert hidden.status_code == 404


def test_the_story_stays_its_own_trace_while_whyjob_traces_itself(
    api: Api, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With self-tracing on, the API request has a span of its own; the story must not become
    # its child (a random trace id and a parent missing from the export).
    from whyjob.core import telemetry

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    namespace, name = world.a
    try:
        body = api.get(f"/api/v1/experiments/{namespace}/{name}/trace", "team-a").content
    finally:
        telemetry.shutdown()
    spans = _spans(ExportTraceServiceRequest.FromString(body))
    with SqliteIndex(world.index, readonly=True) as index:
        want = trace_id_of(explain_experiment(index, load_rules(), name, namespace))
    assert {s.trace_id for s in spans} == {want.to_bytes(16, "big")}
    ids = {s.span_id for s in spans}
    assert [s for s in spans if s.parent_span_id and s.parent_span_id not in ids] == []


def test_whyjob_traces_itself_when_the_otel_environment_says_where(
    world: World, receiver: tuple[str, list[tuple[str, bytes]]], tmp_path: Any
) -> None:
    import os
    import subprocess
    import sys

    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )

    url, got = receiver
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_SERVICE_NAME": "whyjob-test"}
    name = world.a[1]
    whyjob = [sys.executable, "-m", "whyjob.cli", "--index", str(world.index)]
    subprocess.run([*whyjob, name], env=env, check=True, capture_output=True)
    traces = [ExportTraceServiceRequest.FromString(b) for p, b in got if p == "/v1/traces"]
    names = {s.name for request in traces for s in _spans(request)}
    assert {"whyjob.explain", "whyjob.explain.gather", "whyjob.explain.rules"} <= names
    service = traces[0].resource_spans[0].resource.attributes
    assert any(a.key == "service.name" and a.value.string_value == "whyjob-test" for a in service)
    # Without the environment, nothing is sent (and OpenTelemetry is never imported).
    got.clear()
    quiet = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
    subprocess.run([*whyjob, name], env=quiet, check=True, capture_output=True)
    assert got == []
    # A collecting process's gauges become OTLP metrics.
    from whyjob.collector.live.health import Health
    from whyjob.core import telemetry

    health = Health()
    health.ok("kubernetes", lag_s=4.5)
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = url
    try:
        telemetry.observe(health.gauge_table)
        telemetry.flush()
    finally:
        del os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
        telemetry.shutdown()
    metrics = [ExportMetricsServiceRequest.FromString(b) for p, b in got if p == "/v1/metrics"]
    points = {
        m.name: [pt.as_double for pt in m.gauge.data_points]
        for request in metrics
        for r in request.resource_metrics
        for scope in r.scope_metrics
        for m in scope.metrics
    }
    assert points["whyjob.collector.lag"] == [4.5] and points["whyjob.collector.up"] == [1.0]
