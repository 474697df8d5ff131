"""`whyjob bench api`: latency of the explanation route under concurrent clients.

A real `whyjob serve` process (uvicorn, token auth) over a large index; the clients are threads
in this process, each on its own keep-alive connection, asking in a closed loop (the next
request as soon as the answer is in) for the explanation of one of the simulated incidents,
chosen at random. With every client waiting on the server, latency is mostly time in line:
about clients x service time. So each round also prints the server's CPU time per request
(the service time) and the throughput. A round may run with a collector stand-in committing
to the index meanwhile, so cached explanations expire and are recomputed under load.
"""

from __future__ import annotations

import http.client
import os
import random
import secrets
import socket
import statistics
import subprocess
import sys
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import orjson

__all__ = ["Round", "run_round"]

_CONNECTION_ERRORS = (OSError, http.client.HTTPException)


@dataclass
class Round:
    latencies_ms: list[float]
    errors: int
    wall_s: float
    server_cpu_s: float
    commits: int = 0

    def summary(self) -> str:
        done = len(self.latencies_ms)
        if not done:
            return f"no request succeeded; {self.errors} errors"
        ordered = sorted(self.latencies_ms)

        def pct(p: float) -> float:
            return ordered[min(done - 1, int(done * p))]

        writer = f"; {self.commits} index commits meanwhile" if self.commits else ""
        return (
            f"{done:,} requests in {self.wall_s:.1f} s = {done / self.wall_s:,.0f} req/s; "
            f"p50 {statistics.median(ordered):.1f} ms, p95 {pct(0.95):.1f} ms, "
            f"p99 {pct(0.99):.1f} ms, max {ordered[-1]:.1f} ms; {self.errors} errors; "
            f"server CPU {self.server_cpu_s / done * 1000:.2f} ms per request{writer}"
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _launch(index: Path, scratch: Path, cache: str) -> tuple[subprocess.Popen[bytes], int, str]:
    token = secrets.token_urlsafe(24)
    port = _free_port()
    (scratch / "tokens.yaml").write_text(
        f'tokens: [{{name: bench, token: "{token}", namespaces: ["*"]}}]\n', encoding="utf-8"
    )
    config = scratch / f"whyjob-{cache}.yaml"
    config.write_text(
        "api:\n"
        f"  listen: 127.0.0.1:{port}\n"
        f"  tokens: {scratch / 'tokens.yaml'}\n"
        f"  cache: {cache}\n",
        encoding="utf-8",
    )
    command = [sys.executable, "-m", "whyjob.cli", "--config", str(config), "--index", str(index)]
    return subprocess.Popen([*command, "serve"], stderr=subprocess.DEVNULL), port, token


def _wait_ready(server: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"whyjob serve exited with {server.returncode}")
        with closing(http.client.HTTPConnection("127.0.0.1", port, timeout=2)) as conn:
            try:
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    return
            except _CONNECTION_ERRORS:
                pass
        time.sleep(0.1)
    raise RuntimeError("whyjob serve did not answer /healthz within 30 s")


def _collector(index: Path, per_s: float, stop: threading.Event, commits: list[int]) -> None:
    """A collector's steady trickle: one small kernel record per commit."""
    from whyjob.core.evidence import Evidence, Severity, evidence_id
    from whyjob.core.index import SqliteIndex

    with SqliteIndex(index) as db:
        n = 0
        while not stop.wait(1 / per_s):
            n += 1
            db.write(
                [
                    Evidence(
                        evidence_id("bench.writer", str(time.time_ns()), str(n)),
                        int(time.time() * 1000),
                        "kernel",
                        "kernel.line",
                        f"bench writer {n}",
                        Severity.DEBUG,
                        node="bench-writer",
                    )
                ]
            )
            commits[0] += 1


def run_round(
    index: Path,
    scratch: Path,
    experiments: list[tuple[str, str]],
    *,
    cache: str,
    clients: int,
    requests: int,
    writer_per_s: float = 0.0,
    seed: int = 0,
) -> Round:
    """`requests` explanation requests from `clients` concurrent connections."""
    server, port, token = _launch(index, scratch, cache)
    stop = threading.Event()
    writer: threading.Thread | None = None
    try:
        _wait_ready(server, port)
        headers = {"Authorization": f"Bearer {token}"}
        paths = [f"/api/v1/experiments/{ns}/{name}/explanation" for name, ns in experiments]
        with closing(http.client.HTTPConnection("127.0.0.1", port, timeout=60)) as warm:
            for path in paths:  # the page cache (and, with the cache on, every explanation)
                warm.request("GET", path, headers=headers)
                answer = warm.getresponse()
                body = answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"GET {path}: HTTP {answer.status}: {body[:200]!r}")
                orjson.loads(body)
        latencies: list[float] = []
        errors = [0]
        remaining = [requests]
        commits = [0]
        lock = threading.Lock()
        start = threading.Barrier(clients + 1, timeout=60)

        def client(number: int) -> None:
            rng = random.Random(seed * 1000 + number)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            mine: list[float] = []
            try:
                start.wait()
            except threading.BrokenBarrierError:
                return
            while True:
                with lock:
                    if remaining[0] <= 0:
                        break
                    remaining[0] -= 1
                path = paths[rng.randrange(len(paths))]
                t0 = time.perf_counter()
                try:
                    conn.request("GET", path, headers=headers)
                    answer = conn.getresponse()
                    answer.read()
                    ok = answer.status == 200
                except _CONNECTION_ERRORS:
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                    ok = False
                if ok:
                    mine.append((time.perf_counter() - t0) * 1000)
                else:
                    with lock:
                        errors[0] += 1
            conn.close()
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
        for thread in threads:
            thread.start()
        if writer_per_s > 0:
            writer = threading.Thread(
                target=_collector, args=(index, writer_per_s, stop, commits), daemon=True
            )
            writer.start()
        try:
            cpu0 = _cpu_seconds(server.pid)
        except OSError:
            start.abort()
            raise
        start.wait()
        t0 = time.perf_counter()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - t0
        cpu = _cpu_seconds(server.pid) - cpu0
        return Round(latencies, errors[0], wall, cpu, commits[0])
    finally:
        stop.set()
        if writer is not None:
            writer.join(timeout=30)
        _stop(server)
