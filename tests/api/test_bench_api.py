"""`whyjob bench api` drives a real `whyjob serve` process with concurrent clients."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.conftest import World
from whyjob.cli.benchapi import run_round


@pytest.mark.parametrize("cache", ["off", "30s"])
def test_round_against_a_real_server(world: World, tmp_path: Path, cache: str) -> None:
    experiments = [(name, ns) for ns, name in (world.a, world.b, world.c)]
    result = run_round(world.index, tmp_path, experiments, cache=cache, clients=4, requests=40)
    assert result.errors == 0
    assert len(result.latencies_ms) == 40
    assert all(ms > 0 for ms in result.latencies_ms)
    assert result.server_cpu_s > 0
    line = result.summary()
    assert line.startswith("40 requests in ") and "p99" in line and "0 errors" in line


def test_unknown_experiment_is_reported_not_measured(world: World, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="HTTP 404"):
        run_round(
            world.index, tmp_path, [("no-such-run", world.a[0])], cache="off", clients=2, requests=4
        )


def test_round_with_a_collector_writing_meanwhile(world: World, tmp_path: Path) -> None:
    import shutil

    index = tmp_path / "index.sqlite"
    shutil.copyfile(world.index, index)  # the writer adds records: not to the shared index
    experiments = [(name, ns) for ns, name in (world.a, world.b, world.c)]
    result = run_round(
        index, tmp_path, experiments, cache="1s", clients=4, requests=200, writer_per_s=20
    )
    assert result.errors == 0
    assert len(result.latencies_ms) == 200
    assert result.commits > 0
    assert f"{result.commits} index commits meanwhile" in result.summary()
