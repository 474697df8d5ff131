"""How `whyjob agent` gets its records to the collector: spooled on disk, then sent.

Each batch a source hands over is written to the spool folder (and fsynced) together with the
checkpoints it advances, and only then does the source move on; a sender thread posts the
spooled files in order to the collector's receiver and deletes each once it answered 200. An
agent killed at any point restarts from the checkpoints of its last spooled batch and sends
whatever is still in the spool: nothing is lost, and what is sent twice (a lost answer) is
stored once, because records carry their ids.
"""

from __future__ import annotations

import contextlib
import os
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

import orjson

from whyjob.collector.live.backoff import Backoff
from whyjob.collector.live.health import Health
from whyjob.collector.live.sink import Batch
from whyjob.collector.live.wire import encode_items

__all__ = ["Forwarder"]

_STATE: Final = "checkpoints.json"
_REQUEST_BYTES: Final = 4 * 1024 * 1024  # spooled files sent together, up to this much


class Forwarder:
    """Has the writer's `put` so sources cannot tell an agent from a collector."""

    def __init__(
        self,
        spool: Path,
        url: str,
        health: Health,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.spool = spool
        self.url = url.rstrip("/") + "/whyjob/v1/items"
        self.health = health
        self.token = token
        self.timeout_s = timeout_s
        spool.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._state = self._read_state()
        existing = [int(p.stem) for p in spool.glob("*.ndjson")]
        self._next = max(existing, default=0) + 1
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the sources' side ---------------------------------------------------------------------

    def checkpoints(self) -> dict[str, str]:
        with self._lock:
            return dict(self._state)

    def put(self, batch: Batch) -> None:
        body = encode_items(batch.items)
        with self._lock:
            if body:
                path = self.spool / f"{self._next:012d}.ndjson"
                self._next += 1
                _write_durably(path, body)
            if batch.checkpoints:
                self._state.update(batch.checkpoints)
                _write_durably(self.spool / _STATE, orjson.dumps(self._state))
        if batch.done is not None:
            batch.done.set()
        self.health.gauge("spool_files", self.pending())
        self._wake.set()

    def pending(self) -> int:
        return sum(1 for _ in self.spool.glob("*.ndjson"))

    # -- the sender ----------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> Forwarder:
        self._thread = threading.Thread(
            target=self._send_loop, args=(stop,), name="whyjob-forward", daemon=True
        )
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def send_pending(self) -> int:
        """Send every spooled file in order, several to a request; returns how many were sent.
        Raises when the collector cannot be reached or is busy (they stay for the next try). A
        file the collector refuses for what it holds (a 4xx other than 408 and 429) is moved
        to `rejected/`, reported, and no longer holds up the ones behind it."""
        sent = 0
        files = sorted(self.spool.glob("*.ndjson"))
        while files:
            group: list[Path] = []
            size = 0
            while files and (not group or size + files[0].stat().st_size <= _REQUEST_BYTES):
                size += files[0].stat().st_size
                group.append(files.pop(0))
            body = b"".join(path.read_bytes() for path in group)
            request = urllib.request.Request(
                self.url, body, {"Content-Type": "application/x-ndjson"}, method="POST"
            )
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    response.read()
            except urllib.error.HTTPError as exc:
                if exc.code in (408, 429) or exc.code >= 500:
                    raise
                self._reject(group, f"HTTP {exc.code}: {exc.read()[:200]!r}")
                continue
            for path in group:
                path.unlink()
            sent += len(group)
            self.health.count("forward", "batches", len(group))
        self.health.gauge("spool_files", self.pending())
        return sent

    def _reject(self, group: list[Path], why: str) -> None:
        folder = self.spool / "rejected"
        folder.mkdir(exist_ok=True)
        for path in group:
            path.replace(folder / path.name)
        self.health.error(
            "forward",
            f"the collector refused {len(group)} spooled batch(es), kept in {folder}: {why}",
            down=False,
        )

    def _send_loop(self, stop: threading.Event) -> None:
        backoff = Backoff(stop, base_s=1.0, cap_s=60.0)
        while not stop.is_set():
            self._wake.wait(1.0)
            self._wake.clear()
            try:
                self.send_pending()
                backoff.reset()
                self.health.ok("forward")
            except Exception as exc:  # the collector is away or busy: keep spooling, retry
                self.health.error("forward", f"{self.url}: {type(exc).__name__}: {exc}")
                if not backoff.wait():
                    return
        with contextlib.suppress(Exception):  # a last try on the way out
            self.send_pending()

    def _read_state(self) -> dict[str, str]:
        path = self.spool / _STATE
        if not path.exists():
            return {}
        return {str(k): str(v) for k, v in orjson.loads(path.read_bytes()).items()}


def _write_durably(path: Path, data: bytes) -> None:
    """Write, fsync and rename into place: after a crash the file is whole or absent."""
    temporary = path.with_suffix(path.suffix + ".tmp")
    with temporary.open("wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    temporary.replace(path)
