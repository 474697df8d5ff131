"""Waiting between retries: exponential with full jitter, capped, honouring Retry-After."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass(slots=True)
class Backoff:
    """`wait()` sleeps longer after each failure (until `reset()`), or until `stop` is set."""

    stop: threading.Event
    base_s: float = 0.5
    cap_s: float = 60.0
    _failures: int = field(default=0, init=False)
    _rng: random.Random = field(default_factory=random.Random, init=False)

    def reset(self) -> None:
        self._failures = 0

    def delay(self, retry_after_s: float | None = None) -> float:
        """The next wait: the server's Retry-After when it gave one, else jittered exponential."""
        self._failures += 1
        if retry_after_s is not None:
            return min(self.cap_s, max(0.0, retry_after_s))
        ceiling = min(self.cap_s, self.base_s * 2 ** min(self._failures - 1, 16))
        return self._rng.uniform(ceiling / 2, ceiling)

    def wait(self, retry_after_s: float | None = None) -> bool:
        """Sleep the next delay; False when asked to stop meanwhile."""
        return not self.stop.wait(self.delay(retry_after_s))
