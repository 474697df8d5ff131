"""Is the index there and answering? For readiness probes: `whyjob collect`'s and `whyjob
serve`'s /readyz ask it, at most every few seconds and never for longer than a timeout."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from whyjob.core.index.elastic import ElasticSettings

__all__ = ["IndexProbe", "check_index"]


def check_index(location: Path | ElasticSettings, *, writable: bool = False) -> str | None:
    """None when the index opens read-only and answers a read of its write counter (a count
    over an index, cheap on either backend); else why not. `writable`: a SQLite file and its
    folder must also be writable by this process (a writer adds the WAL files beside it)."""
    from whyjob.core.index import open_index

    if writable and isinstance(location, Path):
        for path in (location, location.parent):
            if path.exists() and not os.access(path, os.W_OK):
                return f"{path} is not writable by this process"
    try:
        with open_index(
            location, readonly=True, busy_timeout_s=5.0, cache_mib=1, mmap_mib=0
        ) as index:
            index.last_seq()
    except Exception as exc:
        return f"the index does not answer: {type(exc).__name__}: {exc}"
    return None


class IndexProbe:
    """`check_index` for readiness probes: run on a thread of its own, one at a time; an
    answer that the index is fine is kept for `every_s` (the kubelet and a scraper may both
    ask), one that it is not is checked again at the next ask (so a replica comes back as soon
    as its index does); an index that has not answered within `timeout_s` is reported as such,
    so a hung Elasticsearch never hangs the endpoint."""

    def __init__(
        self,
        location: Path | ElasticSettings,
        *,
        every_s: float = 5.0,
        timeout_s: float = 5.0,
        writable: bool = False,
        check: Callable[[Path | ElasticSettings], str | None] | None = None,
    ) -> None:
        self.location = location
        self.every_s, self.timeout_s = every_s, timeout_s
        self._check = check or (lambda where: check_index(where, writable=writable))
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._at = -float("inf")
        self._pending: threading.Event | None = None

    def __call__(self) -> str | None:
        with self._lock:
            fresh = self._reason is None and time.monotonic() - self._at < self.every_s
            if self._pending is None and not fresh:
                self._pending = threading.Event()
                threading.Thread(
                    target=self._run, args=(self._pending,), name="whyjob-index-probe", daemon=True
                ).start()
            pending = self._pending
        if pending is not None and not pending.wait(self.timeout_s):
            return f"the index did not answer within {self.timeout_s:g} s"
        with self._lock:
            return self._reason

    def _run(self, done: threading.Event) -> None:
        try:
            reason = self._check(self.location)
        except Exception as exc:  # a probe never dies of what it probes
            reason = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._reason, self._at, self._pending = reason, time.monotonic(), None
        done.set()
