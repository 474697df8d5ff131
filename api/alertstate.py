"""What the watches of `whyjob serve` have fired, kept where every replica and every restart
finds it: a table in the index file (created if missing, like Slack's thread store), so a new
leader does not fire again what the last one fired, nor a restarted server what it fired before.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

__all__ = ["AlertState", "MemoryAlertState", "SqliteAlertState"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS alert_state (
    kind TEXT NOT NULL,
    key  TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
"""


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


class SqliteAlertState:
    """In a SQLite file shared by every replica; each save is one transaction."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(
            str(path), timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._lock = threading.Lock()
        with self._lock:
            self._db.executescript(_SCHEMA)

    def load(self, kind: str) -> dict[str, dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key, body FROM alert_state WHERE kind = ?", (kind,)
            ).fetchall()
        return {str(key): orjson.loads(body) for key, body in rows}

    def save(self, kind: str, firing: Mapping[str, Mapping[str, Any]]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM alert_state WHERE kind = ?", (kind,))
                self._db.executemany(
                    "INSERT INTO alert_state (kind, key, body) VALUES (?, ?, ?)",
                    [(kind, key, orjson.dumps(dict(body))) for key, body in firing.items()],
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()
