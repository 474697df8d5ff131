"""The evidence index: the contract (`Index`) and its embedded default, SQLite; see
docs/index.md."""

from whyjob.core.index.base import Index
from whyjob.core.index.changes import ChangeWatch
from whyjob.core.index.sqlite import SqliteIndex

__all__ = ["ChangeWatch", "Index", "SqliteIndex"]
