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

from whyjob.collector.ingest.base import IngestOptions, Item
from whyjob.collector.live.health import Health
from whyjob.collector.live.logs import LogRetention, decode_otlp, otlp_items
from whyjob.collector.live.sink import Batch, Writer
from whyjob.collector.live.wire import decode_items

__all__ = ["Receiver"]

_MAX_BODY = 64 * 1024 * 1024


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
                if owner.token and not hmac.compare_digest(
                    self.headers.get("Authorization", ""), f"Bearer {owner.token}"
                ):
                    self._reply(
                        401, b'{"message": "missing or wrong bearer token"}', "application/json"
                    )
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if length > _MAX_BODY:
                    self._reply(413, b'{"message": "body too large"}', "application/json")
                    return
                body = self.rfile.read(length)
                kind = self.headers.get("Content-Type", "application/json")
                try:
                    if path == "/v1/logs":
                        answer = owner.logs(body, kind)
                        self._reply(
                            200,
                            answer,
                            "application/x-protobuf" if "protobuf" in kind else "application/json",
                        )
                    elif path == "/whyjob/v1/items":
                        stored = owner.items(body)
                        self._reply(200, b'{"received": %d}' % stored, "application/json")
                    else:
                        self._reply(404, b'{"message": "not found"}', "application/json")
                except ValueError as exc:
                    owner.health.error("receiver", f"{path}: {exc}", down=False)
                    self._reply(400, f'{{"message": "{exc!s:.200}"}}'.encode(), "application/json")

            def _reply(self, code: int, body: bytes, kind: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
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

    def _commit(self, source: str, items: list[Item]) -> None:
        done = threading.Event()
        self.writer.put(Batch(source, f"receiver:{source}", items, done=done))
        if not done.wait(60):
            raise ValueError("the index did not take the records in time; send them again")
        self.health.ok(source)

    def logs(self, body: bytes, content_type: str) -> bytes:
        try:
            document = decode_otlp(body, content_type)
        except Exception as exc:
            raise ValueError(f"not an OTLP logs request: {exc}") from None
        items = otlp_items(document, self.options)
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
