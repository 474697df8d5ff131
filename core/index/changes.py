"""Has the index changed? For caches above it (the API's explanations).

`PRAGMA data_version` on one long-lived connection changes whenever another connection, in
any process, has committed (or checkpointed) since the last look. File stat times are not enough: readers
create and delete the WAL, and two commits within a coarse timestamp tick look alike. The
file's inode is part of the answer too, so an index deleted and made again is noticed.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

__all__ = ["ChangeWatch"]


class ChangeWatch:
    """A cheap, thread-safe token that differs whenever the index's contents may differ."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._inode = -1
        self._opened = 0  # bumped on every reopen, so a new file never repeats an old token
        self._unknown = 0  # when the file cannot be read: a new token every time (no caching)

    def token(self) -> tuple[int, int, int]:
        with self._lock:
            try:
                inode = self.path.stat().st_ino
            except OSError:
                self._close()
                return self._unreadable()
            if self._db is None or inode != self._inode:
                self._close()
                try:
                    self._db = sqlite3.connect(
                        f"{self.path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
                    )
                except sqlite3.Error:
                    return self._unreadable()
                self._inode = inode
                self._opened += 1
            try:
                version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                self._close()
                return self._unreadable()
            return (inode, self._opened, version)

    def _unreadable(self) -> tuple[int, int, int]:
        self._unknown += 1
        return (-1, -1, self._unknown)

    def _close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def close(self) -> None:
        with self._lock:
            self._close()
