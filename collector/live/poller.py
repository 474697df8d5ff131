"""Collectors that ask their source every so often (cloud APIs, metadata services, Prometheus).

A poller calls `poll(checkpoint)` every `interval_s`; what it returns goes to the writer with
the new checkpoint, in one batch, so a restart resumes from the last committed poll. A failed
poll is reported and retried with backoff, never faster than the interval.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from whyjob.collector.ingest.base import Item
from whyjob.collector.live.backoff import Backoff
from whyjob.collector.live.health import Health
from whyjob.collector.live.sink import Batch, Sink
from whyjob.core.evidence import Evidence

__all__ = ["Poll", "Poller"]


@dataclass(slots=True)
class Poll:
    """One poll's result: items, the checkpoint to resume from, and the source's newest time."""

    items: list[Item]
    checkpoint: str | None = None
    newest_ms: int | None = None


class Poller:
    """Runs `poll` in its own thread until stopped; `name` is the collector's name in metrics
    and the key of its checkpoint."""

    def __init__(
        self,
        name: str,
        poll: Callable[[str | None], Poll],
        interval_s: float,
        writer: Sink,
        health: Health,
        checkpoint: str | None = None,
    ) -> None:
        self.name = name
        self._poll = poll
        self.interval_s = interval_s
        self.writer = writer
        self.health = health
        self._checkpoint = checkpoint
        self._thread: threading.Thread | None = None

    def start(self, stop: threading.Event) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name=f"whyjob-{self.name}", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def poll_once(self) -> Poll:
        """One poll, handed to the writer; returns what it read."""
        result = self._poll(self._checkpoint)
        checkpoints = {self.name: result.checkpoint} if result.checkpoint is not None else {}
        self.writer.put(Batch(self.name, self.name, result.items, checkpoints))
        if result.checkpoint is not None:
            self._checkpoint = result.checkpoint
        lag = time.time() - result.newest_ms / 1000 if result.newest_ms else None
        self.health.ok(self.name, lag_s=lag)
        self.health.count(self.name, "polls")
        self.health.count(
            self.name, "objects", sum(1 for i in result.items if isinstance(i, Evidence))
        )
        return result

    def _run(self, stop: threading.Event) -> None:
        backoff = Backoff(stop, base_s=min(5.0, self.interval_s), cap_s=max(60.0, self.interval_s))
        while not stop.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # reported and retried: a source being down is normal
                self.health.error(self.name, f"{type(exc).__name__}: {exc}")
                if not backoff.wait():
                    return
                continue
            backoff.reset()
            if stop.wait(self.interval_s):
                return
