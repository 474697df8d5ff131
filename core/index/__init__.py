"""The evidence index: the contract (`Index`), its embedded default (SQLite) and the
Elasticsearch backend; see docs/index.md."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from whyjob.core.index.base import Index
from whyjob.core.index.changes import ChangeWatch
from whyjob.core.index.sqlite import SqliteIndex

if TYPE_CHECKING:
    from whyjob.core.index.elastic import ElasticSettings

__all__ = ["ChangeWatch", "Index", "SqliteIndex", "open_index"]


def open_index(location: Path | ElasticSettings, *, readonly: bool, **sqlite: Any) -> Index:
    """The index at `location`: a SQLite file (`sqlite` are SqliteIndex's tuning arguments), or
    an Elasticsearch cluster (the elasticsearch client is imported only then)."""
    if isinstance(location, Path):
        return SqliteIndex(location, readonly=readonly, **sqlite)
    from whyjob.core.index.elastic import ElasticsearchIndex

    return ElasticsearchIndex(location, readonly=readonly)
