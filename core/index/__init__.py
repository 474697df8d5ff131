"""The evidence index. SQLite is the embedded default; see docs/index.md."""

from whyjob.core.index.changes import ChangeWatch
from whyjob.core.index.sqlite import SqliteIndex

__all__ = ["ChangeWatch", "SqliteIndex"]
