"""`whyjob serve`: the HTTP API and the web timeline (FastAPI).

Routes (OpenAPI at /openapi.json, docs at /docs):
- `GET /api/v1/experiments?q=&status=`: experiments the caller may read, with their status
- `GET /api/v1/experiments/{namespace}/{name}`: one experiment's status
- `GET /api/v1/experiments/{namespace}/{name}/explanation`: the Explanation (as `--json`)
- `GET /api/v1/experiments/{namespace}/{name}/timeline`: the timeline's swimlane data
- `GET /api/v1/experiments/{namespace}/{name}/trace?format=protobuf|json`: the story as OTLP
- `GET /api/v1/fleet?since=&until=`: the nodes and GPUs that keep killing jobs
- `GET /api/v1/nodes/{node}?since=`: one node's standing and history
- `GET /api/v1/nodes/{node}/preflight`: is the node safe to start a job on
- `GET /api/v1/evidence/{id}`: one record and its raw source
- `GET /`, `/experiments/{namespace}/{name}`, `/nodes`, `/nodes/{node}`, `/evidence/{id}`: the
  web pages
- `POST /slack/command`: the `/whyjob` slash command (when Slack is configured)
- `GET /livez` (`/healthz`), `GET /readyz`, `GET /metrics`: unauthenticated, say nothing about
  experiments

Every other route needs a principal (access.py) and checks the namespace of what it returns.
Each request is written to the audit log: who, what, the answer's status.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TextIO

import orjson
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from whyjob.api import web
from whyjob.api.access import Access, Principal
from whyjob.api.service import Service, status_of
from whyjob.api.timeline import timeline_view
from whyjob.core import telemetry
from whyjob.core.errors import NotFound, WhyjobError
from whyjob.core.timeutil import parse_ts

__all__ = ["ApiOptions", "create_app"]

_COOKIE = "whyjob_token"


@dataclass
class ApiOptions:
    access: Access
    audit: TextIO | None = None
    public_url: str = ""
    login_links: bool = False  # `/login?token=...` sets the cookie (a link for a browser)
    open_docs: bool = False  # /docs and /openapi.json readable without a principal
    slack_command: Callable[[dict[str, str], bytes], dict[str, Any]] | None = None
    counters: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    ready_for_s: float = 5.0  # how long /readyz keeps an answer that the index is fine


def _now_ms() -> int:
    return int(time.time() * 1000)


def _redacted(query: str) -> str | None:
    """The query string for the audit log, with login tokens blanked."""
    if not query:
        return None
    from urllib.parse import parse_qsl, urlencode

    pairs = [
        (k, "REDACTED" if k == "token" else v) for k, v in parse_qsl(query, keep_blank_values=True)
    ]
    return urlencode(pairs)


def _principal(request: Request) -> Principal:
    """The caller, from a bearer token (header, or the login cookie) or the trusted proxy."""
    options: ApiOptions = request.app.state.options
    headers = {k.lower(): v for k, v in request.headers.items()}
    if "authorization" not in headers and (cookie := request.cookies.get(_COOKIE)):
        headers["authorization"] = f"Bearer {cookie}"
    found = options.access.principal(request.client.host if request.client else None, headers)
    if found is None:
        request.state.who = "anonymous"
        raise HTTPException(
            401,
            "a bearer token (or the trusted proxy's headers) is needed",
            {"WWW-Authenticate": "Bearer"},
        )
    request.state.who = f"{found.via}:{found.name}"
    return found


Who = Annotated[Principal, Depends(_principal)]


def create_app(service: Service, options: ApiOptions) -> FastAPI:
    app = FastAPI(
        title="whyjob",
        description="What happened to my training job? Explanations of GPU training failures.",
        version="1",
        # Served below, behind the same principal check as the API unless `api.open_docs`.
        docs_url=None,
        openapi_url=None,
    )
    app.state.options = options

    def audit(request: Request, who: str, status: int) -> None:
        with options.lock:
            options.counters[f"{request.method} {status}"] += 1
            if options.audit is not None:
                options.audit.write(
                    orjson.dumps(
                        {
                            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            "who": who,
                            "method": request.method,
                            "path": request.url.path,
                            "query": _redacted(request.url.query),
                            "status": status,
                            "client": request.client.host if request.client else None,
                        }
                    ).decode()
                    + "\n"
                )
                options.audit.flush()

    @app.middleware("http")
    async def audited(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        with telemetry.span(
            f"HTTP {request.method}", **{"http.request.method": request.method}
        ) as current:
            response = await call_next(request)
            if current is not None:  # the route's template, never a namespace or a name
                route = getattr(request.scope.get("route"), "path", "")
                current.set_attributes(
                    {"http.route": route, "http.response.status_code": response.status_code}
                )
        audit(request, getattr(request.state, "who", "-"), response.status_code)
        _secure(request.url.path, response)
        return response

    def explained(who: Principal, namespace: str, name: str, cluster: str | None) -> Any:
        try:
            return service.explanation(who, namespace, name, cluster=cluster)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        except WhyjobError as exc:  # the name is in several clusters: which one
            raise HTTPException(409, str(exc)) from None

    # -- API -----------------------------------------------------------------------------------

    @app.get("/api/v1/experiments")
    def list_experiments(
        who: Who, q: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        return service.experiments(who, q, status)

    @app.get("/api/v1/experiments/{namespace}/{name}")
    def experiment_status(
        namespace: str, name: str, who: Who, cluster: str | None = None
    ) -> dict[str, Any]:
        explanation = explained(who, namespace, name, cluster)
        return {
            "experiment": explanation.experiment.to_json(),
            "status": status_of(explanation),
            "verdict": explanation.verdict.to_json(),
            "loop": explanation.loop.to_json(),
            "gpu_hours": explanation.gpu_hours.to_json(),
        }

    @app.get("/api/v1/experiments/{namespace}/{name}/explanation")
    def explanation(namespace: str, name: str, who: Who, cluster: str | None = None) -> Response:
        try:
            document = service.explanation_json(who, namespace, name, cluster)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        except WhyjobError as exc:
            raise HTTPException(409, str(exc)) from None
        return Response(document, media_type="application/json")

    @app.get("/api/v1/experiments/{namespace}/{name}/timeline")
    def timeline(namespace: str, name: str, who: Who, cluster: str | None = None) -> Response:
        view = timeline_view(explained(who, namespace, name, cluster), now_ms=_now_ms())
        return Response(orjson.dumps(view), media_type="application/json")

    @app.get("/api/v1/experiments/{namespace}/{name}/trace")
    def story_trace(
        namespace: str, name: str, who: Who, cluster: str | None = None, format: str = "protobuf"
    ) -> Response:
        """The story as an OTLP trace (ExportTraceServiceRequest): protobuf to POST to a
        collector's /v1/traces as it is, or `format=json` (OTLP/JSON)."""
        from whyjob.api.storytrace import story_request

        request = story_request(explained(who, namespace, name, cluster))
        if format == "json":
            from google.protobuf.json_format import MessageToJson

            return Response(MessageToJson(request), media_type="application/json")
        if format != "protobuf":
            raise HTTPException(422, "format is protobuf or json")
        return Response(request.SerializeToString(), media_type="application/x-protobuf")

    @app.get("/api/v1/nodes/{node}/preflight")
    def node_preflight(
        node: str,
        who: Who,
        window: str | None = None,
        lookback: str | None = None,
        at: str | None = None,
    ) -> dict[str, Any]:
        """Safe, unsafe or unknown to start a job on, with the reasons (docs/preflight.md)."""
        from whyjob.explain.ruleset import parse_duration

        try:
            window_ms = parse_duration(window) if window else None
            lookback_ms = parse_duration(lookback) if lookback else None
            now = parse_ts(at) if at else _now_ms()
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        return service.preflight(node, now=now, window_ms=window_ms, lookback_ms=lookback_ms)

    def fleet_of(who: Principal, since: str, until: str | None) -> Any:
        try:
            return service.fleet(who, since, until)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None

    @app.get("/api/v1/fleet")
    def fleet(who: Who, since: str = "30d", until: str | None = None) -> Response:
        """The nodes and GPUs that keep killing jobs (whyjob.fleet/v1, as `whyjob nodes --json`)."""
        return Response(
            orjson.dumps(fleet_of(who, since, until).to_json()), media_type="application/json"
        )

    @app.get("/api/v1/nodes/{node}")
    def node_history(node: str, who: Who, since: str = "30d", until: str | None = None) -> Response:
        """One node's standing and history (whyjob.node/v1, as `whyjob nodes NODE --json`)."""
        fleet_of(who, since, until)  # a bad window is a 422 before anything else
        try:
            history = service.node_history(who, node, since, until)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        return Response(orjson.dumps(history.to_json()), media_type="application/json")

    @app.get("/api/v1/evidence/{evidence_id}")
    def evidence(evidence_id: str, who: Who) -> dict[str, Any]:
        try:
            return service.evidence(who, evidence_id)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None

    # -- web -----------------------------------------------------------------------------------

    @app.get("/", response_class=HTMLResponse)
    def index_page(who: Who, q: str | None = None, status: str | None = None) -> str:
        return web.index_page(who, service.experiments(who, q, status or None), q, status)

    @app.get("/experiments/{namespace}/{name}", response_class=HTMLResponse)
    def experiment_page(namespace: str, name: str, who: Who, cluster: str | None = None) -> str:
        explanation = explained(who, namespace, name, cluster)
        return web.experiment_page(who, explanation, status_of(explanation), _now_ms())

    @app.get("/nodes", response_class=HTMLResponse)
    def fleet_page(who: Who, since: str = "30d") -> str:
        return web.fleet_page(who, fleet_of(who, since, None), since)

    @app.get("/nodes/{node}", response_class=HTMLResponse)
    def node_page(node: str, who: Who, since: str = "30d") -> str:
        fleet = fleet_of(who, since, None)
        try:
            history = service.node_history(who, node, since, None)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        return web.node_page(who, history, fleet, since)

    @app.get("/evidence/{evidence_id}", response_class=HTMLResponse)
    def evidence_page(evidence_id: str, who: Who) -> str:
        try:
            record = service.evidence(who, evidence_id)
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from None
        return web.evidence_page(who, record)

    @app.get("/login", include_in_schema=False)
    def login(token: str, next: str = "/") -> Response:
        if not options.login_links:
            raise HTTPException(404, "login links are off (api.login_links)")
        if options.access.principal(None, {"authorization": f"Bearer {token}"}) is None:
            raise HTTPException(401, "unknown token")
        target = next if next.startswith("/") and not next.startswith("//") else "/"
        response = RedirectResponse(target, status_code=303)
        secure = options.public_url.startswith("https://")
        response.set_cookie(_COOKIE, token, httponly=True, samesite="strict", secure=secure)
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    # -- the API's own description ---------------------------------------------------------------

    def _docs_reader(request: Request) -> None:
        if not options.open_docs:
            _principal(request)  # 401 without a token, like every other route

    @app.get("/openapi.json", include_in_schema=False)
    def openapi(request: Request) -> JSONResponse:
        _docs_reader(request)
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def docs(request: Request) -> HTMLResponse:
        from fastapi.openapi.docs import get_swagger_ui_html

        _docs_reader(request)
        return get_swagger_ui_html(openapi_url="/openapi.json", title="whyjob API")

    # -- Slack ---------------------------------------------------------------------------------

    @app.post("/slack/command", include_in_schema=False)
    async def slack_command(request: Request) -> Response:
        if options.slack_command is None:
            raise HTTPException(404, "Slack is not configured")
        # The raw body (the signature covers it byte for byte), read only up to what Slack ever
        # sends: an unsigned 500 MB body must not be buffered before the signature is checked.
        body = await _bounded_body(request, _SLACK_BODY_LIMIT)
        request.state.who = "slack"
        headers = {k.lower(): v for k, v in request.headers.items()}
        # Explaining reads the index: off the event loop, or one command would stall every request.
        answer = await run_in_threadpool(options.slack_command, headers, body)
        status = int(answer.pop("_status", 200))
        return JSONResponse(answer, status_code=status)

    # -- operations ----------------------------------------------------------------------------

    # Liveness (/livez, and /healthz, its older name) says only that the process answers: a
    # restart cures nothing an index outage causes. Readiness (/readyz, Kubernetes' names)
    # opens the index read-only and reads its write counter, and answers 503 with the reason
    # when it cannot, so a replica is taken out of its Service until the index is back.
    @app.get("/livez", include_in_schema=False)
    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    from whyjob.core.index.probe import IndexProbe

    # One check at a time, a good answer kept a while, none waited on longer than 5 s: probes
    # cannot fill the thread pool the API's routes share, whatever the index is doing.
    probe = IndexProbe(service.index_path, every_s=options.ready_for_s)

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        from starlette.concurrency import run_in_threadpool

        reason = await run_in_threadpool(probe)
        if reason is None:
            return JSONResponse({"ready": True})
        # The details (a path, a cluster's error) go to the log; this route needs no token.
        sys.stderr.write(f"whyjob serve: not ready: {reason}\n")
        short = reason.split(":", 1)[0]
        return JSONResponse({"ready": False, "reason": short}, status_code=503)

    # The official client writes the exposition (escaping, number formats), as the
    # collector's /metrics does; a registry of the app's own, not the process-global one.
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, Metric
    from prometheus_client.registry import Collector

    class _Requests(Collector):
        def collect(self) -> Iterator[Metric]:
            with options.lock:
                counts = dict(options.counters)
            family = CounterMetricFamily(
                "whyjob_api_requests", "API requests answered", labels=["method", "status"]
            )
            for key, value in sorted(counts.items()):
                family.add_metric(key.split(" "), value)
            yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Requests())

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _secure(path: str, response: Response) -> None:
    """Headers every answer carries: no sniffing, no framing, no referrer; pages may run only
    their own script and load nothing from elsewhere; API answers are never cached."""
    headers = response.headers
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("Referrer-Policy", "no-referrer")
    if path == "/docs":
        # Swagger UI is FastAPI's page, with its script and styles from a CDN.
        headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
    elif response.headers.get("content-type", "").startswith("text/html"):
        headers.setdefault("Content-Security-Policy", web.page_policy())
    if path.startswith("/api/") or path == "/openapi.json":
        headers["Cache-Control"] = "no-store"


# A slash command's form is a few hundred bytes (its text is at most 4,000 characters).
_SLACK_BODY_LIMIT = 64 << 10


async def _bounded_body(request: Request, limit: int) -> bytes:
    """The request body, or 413 as soon as it is known to exceed `limit` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise HTTPException(413, f"request body over {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, f"request body over {limit} bytes")
    return bytes(body)


def open_audit(path: Path | None) -> TextIO | None:
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("a", encoding="utf-8")
