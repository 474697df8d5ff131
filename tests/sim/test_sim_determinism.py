"""Same seed, same bytes; another seed, another bundle; no noise, fewer records."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whyjob.sim import Truth, simulate

Bundle = Callable[..., tuple[Path, Truth]]


def _digest(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def test_same_seed_writes_identical_bytes(tmp_path: Path) -> None:
    for scenario in ("xid79", "maintenance_storm", "unschedulable"):
        first, second = tmp_path / f"{scenario}-a", tmp_path / f"{scenario}-b"
        simulate(scenario, 11, first)
        simulate(scenario, 11, second)
        assert _digest(first) == _digest(second), scenario


def test_another_seed_writes_another_bundle(tmp_path: Path) -> None:
    simulate("xid79", 11, tmp_path / "a")
    simulate("xid79", 12, tmp_path / "b")
    a, b = _digest(tmp_path / "a"), _digest(tmp_path / "b")
    assert a["truth.json"] != b["truth.json"]
    assert set(a) != set(b)


def test_noise_off_writes_fewer_records_and_keeps_the_story(bundle: Bundle, files: Any) -> None:
    noisy_out, noisy = bundle("xid79", 5, True)
    quiet_out, quiet = bundle("xid79", 5, False)
    assert len(files.events(quiet_out)) < len(files.events(noisy_out))
    assert len(files.items(quiet_out / "k8s/nodes.json")) < len(
        files.items(noisy_out / "k8s/nodes.json")
    )
    quiet_files = sum(1 for p in quiet_out.rglob("*") if p.is_file())
    noisy_files = sum(1 for p in noisy_out.rglob("*") if p.is_file())
    assert quiet_files < noisy_files
    # The experiment itself does not depend on the noise.
    assert quiet.experiment == noisy.experiment
    assert [a.key for a in quiet.attempts] == [a.key for a in noisy.attempts]
    assert quiet.verdict == noisy.verdict
