"""Shared fixtures: every test gets its own index file and settings, never the user's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from whyjob.core.index import SqliteIndex

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads or writes the real ~/.local/share/whyjob, ~/.config/whyjob or the
    caches in ~/.cache/whyjob."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("WHYJOB_INDEX", "WHYJOB_CONFIG", "WHYJOB_CLUSTER"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def index_path(tmp_path: Path) -> Path:
    return tmp_path / "index.sqlite"


@pytest.fixture
def index(index_path: Path) -> Iterator[SqliteIndex]:
    with SqliteIndex(index_path) as opened:
        yield opened
