"""What the watches of `whyjob serve` have fired, kept where every replica and every restart
finds it: in the index, so a new leader does not fire again what the last one fired, nor a
restarted server what it fired before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import orjson

if TYPE_CHECKING:
    from whyjob.core.index import Index
    from whyjob.core.index.elastic import ElasticSettings

__all__ = ["AlertState", "IndexAlertState", "MemoryAlertState"]

_T = TypeVar("_T")


class AlertState(Protocol):
    def load(self, kind: str) -> dict[str, dict[str, Any]]:
        """The alerts of a kind (`loop`, `risk`) firing now, by key."""
        ...

    def save(self, kind: str, firing: Mapping[str, Mapping[str, Any]]) -> None:
        """Replace the alerts of a kind firing now."""
        ...


class MemoryAlertState:
    """One process's memory: forgets on restart (tests, and `serve` without an index file)."""

    def __init__(self) -> None:
        self._kinds: dict[str, dict[str, dict[str, Any]]] = {}

    def load(self, kind: str) -> dict[str, dict[str, Any]]:
        return dict(self._kinds.get(kind, {}))

    def save(self, kind: str, firing: Mapping[str, Mapping[str, Any]]) -> None:
        self._kinds[kind] = {k: dict(v) for k, v in firing.items()}


class IndexAlertState:
    """In the index itself (a derived document per kind, `alerts/loop`, `alerts/risk`), so it
    works the same on SQLite and Elasticsearch. One connection, kept open between rounds (on
    Elasticsearch an open costs a few requests) and opened again after a failure."""

    def __init__(self, location: Path | ElasticSettings) -> None:
        self.location = location
        self._index: Index | None = None
        self._lock = threading.Lock()

    def load(self, kind: str) -> dict[str, dict[str, Any]]:
        held = self._use(lambda index: index.derived(f"alerts/{kind}").get("firing"))
        return dict(orjson.loads(held[2])) if held else {}

    def save(self, kind: str, firing: Mapping[str, Mapping[str, Any]]) -> None:
        body = orjson.dumps({key: dict(value) for key, value in firing.items()})
        self._use(lambda index: index.put_derived(f"alerts/{kind}", [("firing", "state", 0, body)]))

    def _use(self, work: Callable[[Index], _T]) -> _T:
        from whyjob.core.index import open_index

        with self._lock:
            if self._index is None:
                self._index = open_index(self.location, readonly=False)
            try:
                return work(self._index)
            except BaseException:
                self._index.close()  # whatever went wrong, the next call starts afresh
                self._index = None
                raise

    def close(self) -> None:
        with self._lock:
            if self._index is not None:
                self._index.close()
                self._index = None
