"""What the watches of `whyjob serve` have fired, kept where every replica and every restart
finds it: in the index, so a new leader does not fire again what the last one fired, nor a
restarted server what it fired before.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

if TYPE_CHECKING:
    from whyjob.core.index.elastic import ElasticSettings

__all__ = ["AlertState", "IndexAlertState", "MemoryAlertState"]


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
    works the same on SQLite and Elasticsearch; each load and save opens its own connection."""

    def __init__(self, location: Path | ElasticSettings) -> None:
        self.location = location

    def load(self, kind: str) -> dict[str, dict[str, Any]]:
        from whyjob.core.index import open_index

        with open_index(self.location, readonly=False) as index:
            held = index.derived(f"alerts/{kind}").get("firing")
        return dict(orjson.loads(held[2])) if held else {}

    def save(self, kind: str, firing: Mapping[str, Mapping[str, Any]]) -> None:
        from whyjob.core.index import open_index

        body = orjson.dumps({key: dict(value) for key, value in firing.items()})
        with open_index(self.location, readonly=False) as index:
            index.put_derived(f"alerts/{kind}", [("firing", "state", 0, body)])
