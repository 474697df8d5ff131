from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from whyjob.cli.app import app
from whyjob.cli.main import route

Run = Callable[..., Result]


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """`whyjob ARGS...` in-process, on the test's own index, routed as the console script is."""
    runner = CliRunner()

    def invoke(*args: str, index: Path | None = None, input: bytes | None = None) -> Result:
        argv = ["--index", str(index or tmp_path / "index.sqlite"), *args]
        return runner.invoke(app, route(argv), input=input, catch_exceptions=False)

    return invoke
