"""The explanation cache: valid while the index is unchanged, bounded staleness while it
changes, off at 0, and one computation for many concurrent misses."""

from __future__ import annotations

import shutil
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import World
from whyjob.api import service as service_module
from whyjob.api.access import Principal
from whyjob.api.service import Service
from whyjob.core.evidence import Evidence, Severity, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.explain.ruleset import load_rules

EVERYONE = Principal("ops", frozenset({"*"}))


@pytest.fixture
def copy(world: World, tmp_path: Path) -> Path:
    path = tmp_path / "index.sqlite"
    shutil.copyfile(world.index, path)
    return path


def _touch(path: Path, n: int) -> None:
    """A collector's commit: one unrelated record."""
    with SqliteIndex(path) as index:
        index.write(
            [
                Evidence(
                    evidence_id("kernel", "node-x", str(n)),
                    1_700_000_000_000 + n,
                    "kernel",
                    "kernel.line",
                    f"IPv4: martian source {n}",
                    Severity.INFO,
                    node="node-x",
                )
            ]
        )


def test_unchanged_index_keeps_explanations_past_the_ttl(world: World, copy: Path) -> None:
    service = Service(copy, load_rules(), cache_s=0.05)
    first = service.explanation(EVERYONE, *world.a)
    time.sleep(0.1)
    assert service.explanation(EVERYONE, *world.a) is first


def _settled(service: Service) -> None:
    """Wait for background refreshes to finish."""
    deadline = time.monotonic() + 10
    while service._refreshing and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not service._refreshing


def test_a_changed_index_is_reexplained_once_the_ttl_has_passed(world: World, copy: Path) -> None:
    service = Service(copy, load_rules(), cache_s=0.3)
    first = service.explanation(EVERYONE, *world.a)
    _touch(copy, 1)
    # Within the TTL a busy collector does not force a recomputation per request...
    assert service.explanation(EVERYONE, *world.a) is first
    time.sleep(0.35)
    # ...after it, the previous answer once more while the new index is read in the background,
    assert service.explanation(EVERYONE, *world.a) is first
    _settled(service)
    # then the new one.
    second = service.explanation(EVERYONE, *world.a)
    assert second is not first
    assert second.verdict.category == first.verdict.category


def test_cache_zero_explains_every_time(world: World, copy: Path) -> None:
    service = Service(copy, load_rules(), cache_s=0)
    first = service.explanation(EVERYONE, *world.a)
    assert service.explanation(EVERYONE, *world.a) is not first


def test_concurrent_misses_compute_once(
    world: World, copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = service_module.explain_experiment

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[2])
        time.sleep(0.05)  # long enough that every thread arrives while it runs
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "explain_experiment", counted)
    service = Service(copy, load_rules())
    barrier = threading.Barrier(8)
    results: list[Any] = []

    def ask() -> None:
        barrier.wait()
        results.append(service.explanation(EVERYONE, *world.b))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [world.b[1]]
    assert len(results) == 8
    assert all(r is results[0] for r in results)


def test_unknown_experiments_leave_no_state(world: World, copy: Path) -> None:
    from whyjob.core.errors import NotFound

    service = Service(copy, load_rules())
    for n in range(20):
        with pytest.raises(NotFound):
            service.explanation(EVERYONE, world.a[0], f"no-such-{n}")
    assert service._computing == {}
    assert service._cache == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("off", 0.0), ("0", 0.0), ("0s", 0.0), ("'0'", 0.0), ("45s", 45.0), ("2m", 120.0)],
)
def test_api_cache_takes_a_duration_or_off(tmp_path: Path, text: str, expected: float) -> None:
    from whyjob.api.config import load_surface_config

    path = tmp_path / "whyjob.yaml"
    path.write_text(f"api:\n  cache: {text}\n", encoding="utf-8")
    assert load_surface_config(path)["api"]["cache"] == expected


def test_api_cache_refuses_nonsense(tmp_path: Path) -> None:
    from whyjob.api.config import load_surface_config
    from whyjob.core.errors import ConfigError

    path = tmp_path / "whyjob.yaml"
    path.write_text("api:\n  cache: soon\n", encoding="utf-8")
    with pytest.raises(
        ConfigError, match=r"whyjob.yaml:2: api.cache: 'soon' is not a duration .* or off"
    ):
        load_surface_config(path)


def test_an_expired_answer_is_served_at_once_and_refreshed_in_the_background(
    world: World, copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = Service(copy, load_rules(), cache_s=0.1)
    first = service.explanation(EVERYONE, *world.a)
    _touch(copy, 2)
    time.sleep(0.15)  # expired, and the index has changed
    calls: list[str] = []
    real = service_module.explain_experiment

    def slow(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[2])
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "explain_experiment", slow)
    started = time.monotonic()
    answers = [service.explanation(EVERYONE, *world.a) for _ in range(5)]
    assert time.monotonic() - started < 0.2, "nobody waits for the refresh"
    assert all(a is first for a in answers)
    _settled(service)
    assert calls == [world.a[1]], "one refresh for all five requests"
    refreshed = service.explanation(EVERYONE, *world.a)
    assert refreshed is not first


def test_a_failed_refresh_keeps_the_previous_answer(
    world: World, copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Expired (after cache_s) but young enough to be served stale (under 4 x cache_s from when
    # the first reading began), with room for a slow first reading on a loaded machine.
    service = Service(copy, load_rules(), cache_s=0.5)
    first = service.explanation(EVERYONE, *world.a)
    _touch(copy, 3)
    time.sleep(0.6)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(service_module, "explain_experiment", broken)
    assert service.explanation(EVERYONE, *world.a) is first
    _settled(service)
    assert service.explanation(EVERYONE, *world.a) is first


def test_the_loop_watch_gets_the_current_answer_not_an_expired_one(
    world: World, copy: Path
) -> None:
    service = Service(copy, load_rules(), cache_s=0.05)
    first = service.explanation(EVERYONE, *world.a)
    _touch(copy, 4)
    time.sleep(0.1)
    assert service.explanation(EVERYONE, *world.a, current=True) is not first


def test_a_deleted_index_is_not_answered_from_memory_for_long(world: World, copy: Path) -> None:
    from whyjob.core.errors import IndexProblem

    service = Service(copy, load_rules(), cache_s=0.05)
    service.explanation(EVERYONE, *world.a)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{copy}{suffix}").unlink(missing_ok=True)
    time.sleep(0.1)
    with suppress(IndexProblem):  # at most once more from memory while the refresh fails
        service.explanation(EVERYONE, *world.a)
    _settled(service)
    with pytest.raises(IndexProblem):
        service.explanation(EVERYONE, *world.a)


def test_a_late_refresh_does_not_replace_a_newer_answer(world: World, copy: Path) -> None:
    from dataclasses import replace

    service = Service(copy, load_rules(), cache_s=30)
    held = service.explanation(EVERYONE, *world.a)
    key = next(iter(service._cache))  # (namespace, name, cluster asked for)
    assert key[:2] == world.a
    read_at = service._cache[key].at
    other = replace(held)  # a distinct answer, from a refresh
    service._store(key, (0,), other, read_at - 1)  # began before the held one was read
    assert service._cache[key].explanation is held
    service._store(key, (0,), other, read_at + 1)  # began after: it knows more
    assert service._cache[key].explanation is other
