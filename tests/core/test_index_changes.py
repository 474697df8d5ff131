"""ChangeWatch: a token that moves with commits and nothing else."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import ChangeWatch, SqliteIndex


def _write(path: Path, n: int) -> None:
    with SqliteIndex(path) as index:
        index.write([Evidence(evidence_id("t", str(n)), 1000 + n, "t", "t", f"record {n}")])


def test_readers_coming_and_going_do_not_move_the_token(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    _write(path, 0)
    watch = ChangeWatch(path)
    before = watch.token()

    def read() -> None:
        for _ in range(20):
            with SqliteIndex(path, readonly=True) as index:
                index.counts()

    threads = [threading.Thread(target=read) for _ in range(4)]
    for thread in threads:
        thread.start()
    tokens = set()
    while any(t.is_alive() for t in threads):
        tokens.add(watch.token())
    for thread in threads:
        thread.join()
    tokens.add(watch.token())
    assert tokens == {before}
    watch.close()


def test_every_commit_moves_the_token(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    _write(path, 0)
    watch = ChangeWatch(path)
    seen = {watch.token()}
    for n in range(1, 4):
        _write(path, n)
        token = watch.token()
        assert token not in seen
        seen.add(token)
    assert watch.token() in seen  # and nothing moves without one
    watch.close()


def test_a_replaced_or_missing_file_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite"
    _write(path, 0)
    watch = ChangeWatch(path)
    first = watch.token()
    other = tmp_path / "other.sqlite"
    _write(other, 1)
    shutil.move(other, path)
    assert watch.token() != first
    path.unlink()
    missing = {watch.token() for _ in range(3)}
    assert len(missing) == 3, "an unreadable index is never taken as unchanged"
    watch.close()
