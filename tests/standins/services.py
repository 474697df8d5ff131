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
from typing import Any

__all__ = ["TextEndpoint", "alertmanager", "free_port", "prometheus"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TextEndpoint:
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

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def __enter__(self) -> TextEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def prometheus(workdir: Path, targets: list[str], scrape_interval: str = "1s") -> Iterator[str]:
    """A real Prometheus scraping `targets` (HOST:PORT); yields its base URL once it is ready."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise RuntimeError(
            "the prometheus binary is missing: ./scripts/setup installs the Debian package "
            "(WHYJOB_TEST_DEBS), or `apt-get install prometheus`"
        )
    port = free_port()
    config = workdir / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {scrape_interval}\n"
        f"  evaluation_interval: {scrape_interval}\n"
        "scrape_configs:\n"
        "  - job_name: dcgm-exporter\n"
        f"    static_configs: [{{targets: [{', '.join(repr(t) for t in targets)}]}}]\n"
    )
    log = (workdir / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url + "/-/ready", process, workdir / "prometheus.log")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@contextmanager
def alertmanager(workdir: Path) -> Iterator[str]:
    """A real Alertmanager (Debian `prometheus-alertmanager`), clustering off; yields its URL."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        raise RuntimeError(
            "the alertmanager binary is missing: ./scripts/setup installs the Debian package "
            "prometheus-alertmanager (WHYJOB_TEST_DEBS)"
        )
    port = free_port()
    config = workdir / "alertmanager.yml"
    config.write_text("route:\n  receiver: quiet\nreceivers:\n  - name: quiet\n")
    log = (workdir / "alertmanager.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url + "/-/ready", process, workdir / "alertmanager.log")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
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
