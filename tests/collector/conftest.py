from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor, IngestSummary
from whyjob.core.index import SqliteIndex

Ingest = Callable[..., IngestSummary]


@pytest.fixture
def ingest(index: SqliteIndex) -> Ingest:
    """Import paths into the test's index; returns the summary, collects rejections."""

    def run(
        *paths: Path | str, rejected: list[tuple[str, str]] | None = None, **options: object
    ) -> IngestSummary:
        sink = rejected if rejected is not None else []
        ingestor = Ingestor(
            index, IngestOptions(**options), on_reject=lambda where, why: sink.append((where, why))
        )  # type: ignore[arg-type]
        return ingestor.ingest([str(p) for p in paths])

    return run
