"""What `whyjob collect` accepts over HTTP (`receiver.listen`, default port 4318, OTLP's):

- `POST /v1/logs`: OTLP/HTTP logs (protobuf or JSON), so an existing OpenTelemetry Collector can
  forward job logs; answered with an empty ExportLogsServiceResponse.
- `POST /whyjob/v1/items`: newline-delimited items from `whyjob agent` (wire.py).

Both go through the one writer. With `receiver.token` set, a request must carry
`Authorization: Bearer TOKEN`. A body is answered only once its records are committed, so a
sender that sees 200 may forget them, and one that does not may send them again safely.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

import orjson

from whyjob.collector.ingest.base import IngestOptions, Item
from whyjob.collector.live.health import Health
from whyjob.collector.live.logs import LogRetention, decode_otlp, otlp_items
from whyjob.collector.live.serving import ThreadedServer
from whyjob.collector.live.sink import Batch, Writer
from whyjob.collector.live.wire import decode_items

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["Receiver"]

_MAX_BODY = 64 * 1024 * 1024
_ROUTES = ("/v1/logs", "/whyjob/v1/items")
# On stop, uploads under way get this long to finish (then the agents send them again): a
# slow 64 MiB post must not hold a SIGTERM up until the kubelet's SIGKILL.
_GRACE_S = 10


class _Busy(Exception):
    """The index cannot take records now: answered 503, which senders retry."""


class _Refused(Exception):
    """Answered before the body is read: the status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _decoded(body: bytes, encoding: str | None) -> bytes:
    """The body as sent before compression (the otlphttp exporter gzips by default)."""
    if not encoding or encoding == "identity":
        return body
    if encoding != "gzip":
        raise ValueError(f"Content-Encoding {encoding!r} is not supported (gzip is)")
    import zlib

    inflater = zlib.decompressobj(wbits=31)
    out = inflater.decompress(body, _MAX_BODY)
    if inflater.unconsumed_tail:
        raise ValueError("body too large once decompressed")
    return out


def _failure(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    from starlette.responses import Response

    # Connection: close, so an unread body is never taken for the next request.
    headers = {**(headers or {}), "Connection": "close"}
    body = orjson.dumps({"message": message[:500]})
    return Response(body, status, headers, media_type="application/json")


def _app(owner: Receiver) -> Starlette:
    """The two routes on Starlette; uvicorn serves them (see `Receiver`)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect
    from starlette.responses import Response
    from starlette.routing import Route

    async def body_of(request: Request) -> bytes:
        given = request.headers.get("Authorization", "").encode("utf-8", "replace")
        if owner.token and not hmac.compare_digest(given, f"Bearer {owner.token}".encode()):
            raise _Refused(401, "missing or wrong bearer token")
        length = request.headers.get("Content-Length")  # the HTTP parser checked its syntax
        if length is None and "chunked" not in request.headers.get("Transfer-Encoding", ""):
            raise _Refused(411, "a Content-Length is needed")
        if length is not None and int(length) > _MAX_BODY:
            raise _Refused(413, "body too large")
        body = bytearray()
        async for chunk in request.stream():  # a chunked body is held to the limit as it comes
            body += chunk
            if len(body) > _MAX_BODY:
                raise _Refused(413, "body too large")
        return bytes(body)

    async def receive(request: Request) -> Response:
        path = request.url.path
        try:
            body = await body_of(request)
            # Decoding and the wait for the commit block: off the event loop.
            answer, kind = await run_in_threadpool(
                owner.answer,
                path,
                body,
                request.headers.get("Content-Encoding"),
                request.headers.get("Content-Type", "application/json"),
            )
            return Response(answer, 200, media_type=kind)
        except _Refused as exc:
            return _failure(exc.status, str(exc))
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is there to read it
        except _Busy as exc:  # retryable: OTLP senders and agents try again later
            return _failure(503, str(exc), {"Retry-After": "5"})
        except ValueError as exc:  # the request itself is wrong: sending it again won't help
            owner.health.error("receiver", f"{path}: {exc}", down=False)
            return _failure(400, str(exc))
        except Exception as exc:
            owner.health.error("receiver", f"{path}: {type(exc).__name__}: {exc}", down=False)
            return _failure(500, f"{type(exc).__name__}: {exc}")

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)  # unknown paths (404) and methods (405)
        return _failure(exc.status_code, exc.detail, exc.headers)  # a 405 says Allow: POST

    return Starlette(
        routes=[Route(path, receive, methods=["POST"]) for path in _ROUTES],
        exception_handlers={HTTPException: refused},
    )


class Receiver:
    """The HTTP server: a Starlette app that uvicorn serves from a thread of its own.

    The socket is bound here, so a port in use fails at construction and `address` is the real
    one when port 0 was asked for. 2,000 posts of a 100-record batch, records taken at once:
    about 480 requests/s, as many as the stdlib's ThreadingHTTPServer once Nagle's algorithm
    was off there too (it was not: 23/s); into a real index both take 150-180/s.
    """

    def __init__(
        self,
        writer: Writer,
        health: Health,
        options: IngestOptions,
        retention: LogRetention,
        *,
        host: str = "127.0.0.1",
        port: int = 4318,
        token: str | None = None,
    ) -> None:

        self.writer, self.health, self.options = writer, health, options
        self.retention = retention
        self.token = token
        self._lock = threading.Lock()  # retention state is shared by the handler threads
        self._server = ThreadedServer(_app(self), host, port, name="receiver", grace_s=_GRACE_S)
        self._stop = threading.Event()
        self._flusher = threading.Thread(
            target=self._flush_idle, name="whyjob-log-tails", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        return self._server.address

    def start(self) -> Receiver:
        self._server.start(within_s=30)
        self._flusher.start()
        return self

    def stop(self) -> None:
        """Stops taking connections, lets requests under way finish, and keeps the log tails."""
        self._stop.set()
        self._server.stop()
        with self._lock:
            tails = self.retention.flush_all()
        if tails:
            self.writer.put(Batch("otlp", "receiver:otlp", tails))

    def answer(
        self, path: str, body: bytes, encoding: str | None, content_type: str
    ) -> tuple[bytes, str]:
        """What a route answers once the body is in, and its content type."""
        body = _decoded(body, encoding)
        if path == "/v1/logs":
            protobuf = "protobuf" in content_type
            kind = "application/x-protobuf" if protobuf else "application/json"
            return self.logs(body, content_type), kind
        return orjson.dumps({"received": self.items(body)}), "application/json"

    def _commit(self, source: str, items: list[Item]) -> None:
        done = threading.Event()
        try:
            self.writer.put(Batch(source, f"receiver:{source}", items, done=done))
        except RuntimeError as exc:
            raise _Busy(str(exc)) from None
        if not done.wait(60):
            raise _Busy("the index did not take the records in time; send them again")
        self.health.ok(source)

    def logs(self, body: bytes, content_type: str) -> bytes:
        try:
            document = decode_otlp(body, content_type)
            items = otlp_items(document, self.options)
        except Exception as exc:
            raise ValueError(f"not an OTLP logs request: {type(exc).__name__}: {exc}") from None
        self.health.count(
            "otlp", "lines", sum(1 for i in items if getattr(i, "kind", "").startswith("log."))
        )
        with self._lock:
            kept = self.retention.filter(items)
        self._commit("otlp", kept)
        return b"" if "protobuf" in content_type else b"{}"

    def items(self, body: bytes) -> int:
        items = list(decode_items(body))
        self._commit("agent", items)
        return len(items)

    def _flush_idle(self) -> None:
        while not self._stop.wait(10):
            with self._lock:
                tails = self.retention.flush_idle()
            if tails:
                self.writer.put(Batch("otlp", "receiver:otlp", tails))
