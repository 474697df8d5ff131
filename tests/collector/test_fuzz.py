"""Property-based fuzzing of every reader: real fixtures, mutated, through the real import path
into a real index and through `whyjob diagnose`. Nothing may escape and nothing may hang.

Four families of seeds, 5,000 mutants each (20,000 a run), deterministic so CI is repeatable;
`whyjob bench fuzz --inputs 100000 --seed N` runs the long, random version.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from whyjob.cli.fuzzing import Seed, Target, load_seeds, mutate
from whyjob.core.index import SqliteIndex

ROOT = Path(__file__).parents[1]
FAMILIES = {
    "kubernetes": [ROOT / "fixtures/k8s", ROOT / "collector/fixtures/k8s-audit"],
    "clouds-and-metrics": [
        ROOT / "collector/fixtures/aws",
        ROOT / "collector/fixtures/gce",
        ROOT / "collector/fixtures/azure",
        ROOT / "collector/fixtures/dcgm",
    ],
    "node-and-container-logs": [ROOT / "collector/fixtures/kernel", ROOT / "fixtures/logs"],
    "pastes": [ROOT / "fixtures/paste"],
}
EXAMPLES = 5_000
UID = "5d1c9a2b-7e3f-4c1a-9b2d-0f6e8a7c4b31"


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    folder = tmp_path_factory.mktemp("fuzz")
    made = {name: Target(folder / f"{name}.sqlite", diagnose_every=3) for name in FAMILIES}
    yield made
    for target in made.values():
        target.close()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_mutant_escapes_a_reader(family: str, targets: dict[str, Target]) -> None:
    seeds = load_seeds(FAMILIES[family])
    assert len(seeds) >= 4
    target = targets[family]

    @settings(
        max_examples=EXAMPLES,
        # A hang, not a speed goal: a mutant takes ~2 ms, the slowest (a 300 KB line) about a
        # second; the bound leaves room for a loaded CI runner. `whyjob bench fuzz` holds
        # every input to 5 s in a quiet process.
        deadline=timedelta(seconds=20),
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(seed=st.sampled_from(seeds), rnd=st.randoms(use_true_random=False))
    def feed(seed: Seed, rnd: random.Random) -> None:
        target.feed(seed.origin, mutate(seed, rnd))

    feed()
    assert target.fed >= EXAMPLES  # every example was fed


def _cri_folder(root: Path) -> Path:
    folder = root / "var/log/pods" / f"ml-research_gpt2-run7-worker-1_{UID}" / "pytorch"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(
    bad=st.lists(
        st.tuples(st.integers(0, 10_000), st.binary(min_size=1, max_size=60)),
        min_size=1,
        max_size=5,
    )
)
def test_bad_lines_cost_only_themselves(
    bad: list[tuple[int, bytes]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Garbage lines anywhere in a kubelet log, a kernel log or JSON Lines: every good line's
    records are stored exactly as from the clean file, and the file keeps its format."""
    root = tmp_path_factory.mktemp("mixed")
    sources = {
        "cri": (_cri_folder(root) / "0.log", (ROOT / "fixtures/logs/cri-run.log").read_bytes()),
        "kernel": (root / "kern.log", (ROOT / "collector/fixtures/kernel/kern.log").read_bytes()),
        "jsonl": (
            root / "events.jsonl",
            (ROOT / "collector/fixtures/aws/eventbridge-events.jsonl").read_bytes(),
        ),
    }
    for name, (path, clean) in sources.items():
        lines = clean.rstrip(b"\n").split(b"\n")
        dirty = list(lines)
        for at, junk in sorted(bad, reverse=True):
            # Junk that is itself a good line of another kind would be read, not rejected.
            dirty.insert(at % (len(lines) + 1), b"\xff" + junk.replace(b"\n", b" "))
        clean_index = SqliteIndex(root / f"{name}-clean.sqlite")
        dirty_index = SqliteIndex(root / f"{name}-dirty.sqlite")
        try:
            want = _import(clean_index, path, b"\n".join(lines) + b"\n")
            got = _import(dirty_index, path, b"\n".join(dirty) + b"\n")
            assert got[0] == want[0], name  # the same format
            assert got[1] == want[1], name  # every good record stored
            assert got[2] == want[2] + len(bad), name  # each bad line rejected alone
        finally:
            clean_index.close()
            dirty_index.close()


def _import(index: SqliteIndex, path: Path, data: bytes) -> tuple[str, int, int]:
    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.collector.ingest.run import Ingestor

    ingestor = Ingestor(index, IngestOptions(node="node-a", year=2026))
    result = ingestor.ingest_bytes(str(path), data, 1_800_000_000_000)
    return result.fmt, result.stored, result.rejected
