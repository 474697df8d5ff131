"""Real services for tests, started on free loopback ports and stopped after: Prometheus from the
Debian package, and a small HTTP endpoint that serves whatever text a test gives it (a
dcgm-exporter /metrics page)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

__all__ = ["LoopbackServer", "TextEndpoint", "alertmanager", "free_port", "prometheus"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LoopbackServer:
    """An HTTP handler class served on a free loopback port from `with` to the end of it."""

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class TextEndpoint(LoopbackServer):
    """`GET /metrics` answers `self.text` (Prometheus text format), changeable at any time."""

    def __init__(self, text: str = "") -> None:
        self.text = text
        self.scrapes = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = owner.text.encode()
                owner.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._serve(Handler)


@contextmanager
def prometheus(workdir: Path, targets: list[str], scrape_interval: str = "1s") -> Iterator[str]:
    """A real Prometheus scraping `targets` (HOST:PORT); yields its base URL once it is ready."""
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {scrape_interval}\n"
        f"  evaluation_interval: {scrape_interval}\n"
        "scrape_configs:\n"
        "  - job_name: dcgm-exporter\n"
        f"    static_configs: [{{targets: [{', '.join(repr(t) for t in targets)}]}}]\n"
    )
    with _service(
        ["prometheus"],
        "prometheus",
        workdir,
        [f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}"],
    ) as url:
        yield url


@contextmanager
def alertmanager(workdir: Path) -> Iterator[str]:
    """A real Alertmanager (Debian `prometheus-alertmanager`), clustering off; yields its URL."""
    config = workdir / "alertmanager.yml"
    config.write_text("route:\n  receiver: quiet\nreceivers:\n  - name: quiet\n")
    with _service(
        ["prometheus-alertmanager", "alertmanager"],
        "prometheus-alertmanager",
        workdir,
        [
            f"--config.file={config}",
            f"--storage.path={workdir / 'am-data'}",
            "--cluster.listen-address=",
        ],
    ) as url:
        yield url


@contextmanager
def _service(names: list[str], package: str, workdir: Path, args: list[str]) -> Iterator[str]:
    """One of the Prometheus family's daemons on a free port, until the block ends."""
    binary = next((found for name in names if (found := shutil.which(name))), None)
    if binary is None:
        raise RuntimeError(
            f"the {names[0]} binary is missing: ./scripts/setup installs the Debian package "
            f"{package} (WHYJOB_TEST_DEBS), or `apt-get install {package}`"
        )
    port = free_port()
    log_path = workdir / f"{names[0]}.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [binary, *args, f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url + "/-/ready", process, log_path)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not come up: {log.read_text()[-2000:]}")
        time.sleep(0.1)
