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
from typing import Any

import orjson

from whyjob.collector.ingest.base import IngestOptions, Item
from whyjob.collector.live.health import Health
from whyjob.collector.live.logs import LogRetention, decode_otlp, otlp_items
from whyjob.collector.live.sink import Batch, Writer
from whyjob.collector.live.wire import decode_items

__all__ = ["Receiver"]

_MAX_BODY = 64 * 1024 * 1024


class _Busy(Exception):
    """The index cannot take records now: answered 503, which senders retry."""


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


class Receiver:
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
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        owner = self
        self.writer, self.health, self.options = writer, health, options
        self.retention = retention
        self.token = token
        self._lock = threading.Lock()  # retention state is shared by the handler threads

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                path = self.path.split("?")[0]
                try:
                    given = self.headers.get("Authorization", "").encode("utf-8", "replace")
                    if owner.token and not hmac.compare_digest(
                        given, f"Bearer {owner.token}".encode()
                    ):
                        self._fail(401, "missing or wrong bearer token")
                        return
                    try:
                        length = int(self.headers.get("Content-Length") or "")
                    except ValueError:
                        self._fail(411, "a Content-Length is needed")
                        return
                    if not 0 <= length <= _MAX_BODY:
                        self._fail(413, "body too large")
                        return
                    body = _decoded(self.rfile.read(length), self.headers.get("Content-Encoding"))
                    kind = self.headers.get("Content-Type", "application/json")
                    if path == "/v1/logs":
                        answer = owner.logs(body, kind)
                        self._reply(
                            200,
                            answer,
                            "application/x-protobuf" if "protobuf" in kind else "application/json",
                        )
                    elif path == "/whyjob/v1/items":
                        stored = owner.items(body)
                        self._reply(200, orjson.dumps({"received": stored}), "application/json")
                    else:
                        self._fail(404, "not found")
                except _Busy as exc:  # retryable: OTLP senders and agents try again later
                    self._fail(503, str(exc), retry_after=5)
                except (
                    ValueError
                ) as exc:  # the request itself is wrong: sending it again won't help
                    owner.health.error("receiver", f"{path}: {exc}", down=False)
                    self._fail(400, str(exc))
                except Exception as exc:
                    owner.health.error(
                        "receiver", f"{path}: {type(exc).__name__}: {exc}", down=False
                    )
                    self._fail(500, f"{type(exc).__name__}: {exc}")

            def _fail(self, code: int, message: str, retry_after: int | None = None) -> None:
                self.close_connection = (
                    True  # an unread body must not be taken for the next request
                )
                headers = {"Retry-After": str(retry_after)} if retry_after else {}
                self._reply(
                    code, orjson.dumps({"message": message[:500]}), "application/json", headers
                )

            def _reply(
                self, code: int, body: bytes, kind: str, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="whyjob-receiver", daemon=True
        )
        self._stop = threading.Event()
        self._flusher = threading.Thread(
            target=self._flush_idle, name="whyjob-log-tails", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> Receiver:
        self._thread.start()
        self._flusher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            tails = self.retention.flush_all()
        if tails:
            self.writer.put(Batch("otlp", "receiver:otlp", tails))

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
