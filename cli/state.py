"""What every command shares: settings, the index, and how errors reach the user."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    from whyjob.core.index import Index
    from whyjob.core.settings import Settings

__all__ = ["State", "fail", "state_of", "warn"]


@dataclass(slots=True)
class State:
    """Built once in the app callback from --config, --index and the environment."""

    config: Path | None = None
    index_override: Path | None = None
    _settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            from whyjob.core.errors import WhyjobError
            from whyjob.core.settings import load_settings

            try:
                settings = load_settings(self.config)
            except WhyjobError as exc:
                fail(str(exc), exc.exit_code)
            self._settings = settings.with_overrides(index=self.index_override)
            if self.index_override is not None:  # --index names a SQLite file
                from dataclasses import replace

                self._settings = replace(self._settings, elastic=None)
        return self._settings

    def open_index(self, *, readonly: bool) -> Index:
        """The configured index: the SQLite file, or Elasticsearch (`index.backend`)."""
        from whyjob.core.errors import WhyjobError
        from whyjob.core.index import open_index

        try:
            return open_index(self.settings.location, readonly=readonly)
        except WhyjobError as exc:
            fail(str(exc), exc.exit_code)

    def require_index(self) -> None:
        """Fail as a reader would when the SQLite file is not there, for the commands that
        open it writable but have nothing to add (search would otherwise create one)."""
        location = self.settings.location
        if isinstance(location, Path) and not location.exists():
            fail(
                f"no index at {location}: ingest something first (`whyjob ingest PATH`) "
                "or point --index / WHYJOB_INDEX at an existing one"
            )

    def open_index_to_keep(self) -> Index:
        """Writable, to keep what is derived for the next call, where the index allows it; a
        read-only file or mount still answers, keeping nothing."""
        from whyjob.core.errors import IndexProblem
        from whyjob.core.index import open_index

        try:
            return open_index(self.settings.location, readonly=False)
        except (IndexProblem, OSError):
            return self.open_index(readonly=True)


def state_of(ctx: typer.Context) -> State:
    root = ctx.find_root()
    if not isinstance(root.obj, State):
        root.obj = State()
    return root.obj


def fail(message: str, code: int = 1) -> NoReturn:
    """Print a one-line error (no traceback) and exit with `code`."""
    sys.stderr.write(f"whyjob: error: {message}\n")
    raise typer.Exit(code)


def warn(message: str) -> None:
    sys.stderr.write(f"whyjob: {message}\n")
