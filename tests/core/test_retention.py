"""Retention: kinds kept as long as the policy says, the index held under its size, space given
back, and nothing dropped without a policy."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from whyjob.core.errors import ConfigError
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.core.retention import Policy, load_policy, plan, prune

NOW = 1_772_625_600_000
DAY = 86_400_000


def _records(kind: str, days_ago: range, per_day: int = 50) -> list[Evidence]:
    return [
        Evidence(evidence_id("t", kind, f"{d}/{n}"), NOW - d * DAY + n, "t", kind,
                 f"{kind} record {d}/{n} " + "x" * 200, node="gpu-node-1", raw=b"{}" * 100)
        for d in days_ago
        for n in range(per_day)
    ]  # fmt: skip


@pytest.fixture
def aged(index: SqliteIndex) -> SqliteIndex:
    """Forty days of progress lines and terminations, searchable."""
    index.write(
        _records("log.progress", range(40)) + _records("container.terminated", range(40), 5)
    )
    index.sync_search()
    return index


def _policy(tmp_path: Path, text: str) -> Policy:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    return load_policy(config)


def test_the_policy_reads_prefixes_and_off(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        "retention:\n  default: 90d\n  kinds:\n    log.: 14d\n    log.error: 180d\n"
        "    gpu.xid: off\n  max_size: 2GiB\n",
    )
    assert policy.keep_ms("log.progress") == 14 * DAY
    assert policy.keep_ms("log.error") == 180 * DAY  # the longest prefix wins
    assert policy.keep_ms("gpu.xid") is None and policy.keep_ms("k8s.event") == 90 * DAY
    assert policy.max_bytes == 2 << 30
    assert not load_policy(None).configured and load_policy(None).keep_ms("log.line") is None
    with pytest.raises(ConfigError, match=r"config.yaml:4: retention.kinds.log.: .* or off"):
        _policy(tmp_path, "retention:\n  default: 90d\n  kinds:\n    log.: soon\n")
    # A half-edited line is a mistake, not `off`: it must not keep the noisiest kind forever.
    for empty in ("", " 0"):
        with pytest.raises(ConfigError, match=r"config.yaml:3: retention.kinds.log.line: "):
            _policy(tmp_path, f"retention:\n  kinds:\n    log.line:{empty}\n")


def test_expired_records_go_with_their_raw_bodies_and_search_entries(
    aged: SqliteIndex, tmp_path: Path
) -> None:
    policy = _policy(tmp_path, "retention:\n  kinds:\n    log.progress: 7d\n  batch: 64\n")
    due = plan(aged, policy, NOW)
    assert due["log.progress"][0] == 32 * 50 and "container.terminated" not in due
    done = prune(aged, policy, NOW)
    assert done.by_age == {"log.progress": 32 * 50}
    assert aged.kinds() == {"log.progress": 8 * 50, "container.terminated": 40 * 5}
    old = evidence_id("t", "log.progress", "20/3")
    assert aged.get([old]) == [] and aged.raw(old) is None
    assert aged.search('"progress record 20/3"') == []  # its full-text entry went too
    assert aged.search('"progress record 2/3"')  # a kept one is still found
    assert plan(aged, policy, NOW) == {}


def test_over_the_size_the_shortest_kept_kinds_go_first(aged: SqliteIndex, tmp_path: Path) -> None:
    before, records = aged.used_bytes(), sum(aged.kinds().values())
    policy = _policy(
        tmp_path,
        f"retention:\n  kinds:\n    log.progress: 60d\n    container.terminated: 365d\n"
        f"  max_size: {before // 2}\n  batch: 100\n",
    )
    done = prune(aged, policy, NOW)
    # One round drops what the excess takes at the average record size, not more.
    assert done.by_size == {"log.progress": -(-(before - before // 2) * records // before)}
    assert not done.by_age
    left = aged.get([evidence_id("t", "log.progress", f"{d}/0") for d in range(40)])
    assert left and min(ev.ts for ev in left) > NOW - 40 * DAY  # the oldest went first
    rounds = 1
    while aged.used_bytes() > before // 2 and rounds < 10:  # freed pages show round by round
        prune(aged, policy, NOW)
        rounds += 1
    assert aged.used_bytes() <= before // 2
    assert aged.kinds()["container.terminated"] == 40 * 5


def test_a_little_over_the_size_drops_a_little(tmp_path: Path) -> None:
    # Kinds written interleaved share pages, so dropping one frees no page at once: a loop
    # until the size fell would drop every record of every kind that expires.
    with SqliteIndex(tmp_path / "mixed.sqlite") as index:
        index.write(
            Evidence(evidence_id("t", str(n)), NOW - DAY + n, "t",
                     "metric.sample" if n % 2 else "container.terminated", "x" * 300, raw=b"y" * 300)
            for n in range(20_000)
        )  # fmt: skip
        used = index.used_bytes()
        limit = used * 9 // 10  # a tenth over
        policy = Policy(
            kinds=(("metric.", 3 * DAY), ("container.", 90 * DAY)),
            max_bytes=limit,
            batch=1000,
            configured=True,
        )
        done = prune(index, policy, NOW)
        dropped = -(-(used - limit) * 20_000 // used)
        assert done.by_size == {"metric.sample": dropped} and dropped <= 2001
        assert index.kinds() == {"container.terminated": 10_000, "metric.sample": 10_000 - dropped}


def _pages(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("PRAGMA page_count").fetchone()[0])


def test_freed_space_is_given_back_and_readers_go_on(aged: SqliteIndex, tmp_path: Path) -> None:
    pages = _pages(aged.path)
    policy = _policy(tmp_path, "retention:\n  default: 3d\n  batch: 100\n")
    seen: list[int] = []
    stop = threading.Event()

    def read() -> None:
        with SqliteIndex(aged.path, readonly=True) as reader:
            while not stop.is_set():
                seen.append(len(reader.entity_evidence("node", ["gpu-node-1"], 0, NOW)))

    reader = threading.Thread(target=read)
    reader.start()
    done = prune(aged, policy, NOW)
    stop.set()
    reader.join()
    assert done.freed_pages > 0 and seen  # the reader answered throughout
    assert _pages(aged.path) <= pages - done.freed_pages


def test_stats_says_what_goes_next_and_prune_drops_it(aged: SqliteIndex, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from whyjob.cli.app import app

    config = tmp_path / "config.yaml"
    config.write_text("retention:\n  kinds:\n    log.progress: 7d\n")
    aged.close()
    runner = CliRunner()
    base = ["--index", str(aged.path), "--config", str(config)]
    shown = runner.invoke(app, [*base, "stats"])
    assert shown.exit_code == 0, shown.output
    assert "log.progress" in shown.output and "due to go" in shown.output
    # The records are dated 2026-03 and the clock says later: all of them are due by now.
    dropped = runner.invoke(app, [*base, "prune"])
    assert dropped.exit_code == 0 and "records dropped" in dropped.output
    unset = runner.invoke(app, ["--index", str(aged.path), "prune"])
    assert unset.exit_code == 2 and "no `retention:` section" in unset.output
