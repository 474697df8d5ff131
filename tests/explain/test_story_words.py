"""The story in words: loops named in the headline, the latest generation's first domino told
from the first failure of all, collateral runs named, the owner said."""

from __future__ import annotations

from pathlib import Path

import pytest

from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.index import SqliteIndex
from whyjob.explain import story
from whyjob.explain.engine import explain_experiment
from whyjob.explain.model import Attempt, Explanation, Loop
from whyjob.explain.render import render_markdown, render_text
from whyjob.explain.ruleset import RuleSet, load_rules
from whyjob.sim import simulate

HOUR = 3_600_000


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def _explain(tmp_path: Path, scenario: str, seed: int, rules: RuleSet) -> Explanation:
    truth = simulate(scenario, seed, tmp_path / "bundle")
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        Ingestor(index, IngestOptions()).ingest([str(tmp_path / "bundle")])
        return explain_experiment(index, rules, truth.experiment_name, truth.experiment_namespace)


def _run(
    n: int, *, rank: str, category: str, generation: int, loaded: int | None = None
) -> Attempt:
    return Attempt(
        id=f"a{n}",
        pod=f"job-{rank}-{n}",
        pod_uid=f"uid-{n}",
        namespace="ml",
        container="trainer",
        restart=0,
        rank=rank,
        node=f"node-{n}",
        instance_id=None,
        started_at=generation * HOUR,
        ended_at=generation * HOUR + HOUR // 2,
        exit_code=1,
        signal=None,
        reason="Error",
        state="terminated",
        category=category,
        grade="likely",
        summary=f"failure {n} happened",
        generation=generation,
        loaded_checkpoint_step=loaded,
    )


@pytest.mark.parametrize("seed", [1, 2])  # seed 2 runs under a plain `experiment` label
def test_a_maintenance_storm_says_restart_loop_first(
    tmp_path: Path, rules: RuleSet, seed: int
) -> None:
    explanation = _explain(tmp_path, "maintenance_storm", seed, rules)
    assert explanation.loop.looping
    assert explanation.loop.cause == "node.maintenance"
    text = render_text(explanation)
    headline = text.splitlines()[1]
    assert headline.startswith(
        f"Restart loop: {explanation.loop.restarts} generations killed by host maintenance in "
    )
    assert "no forward progress" in headline
    assert f"In the latest of {explanation.loop.restarts} failed generations" in headline
    assert "The first failure of all was" in headline
    assert "owner: infra" in text.splitlines()[0]
    assert "?" not in text.splitlines()[2]


def test_collateral_runs_under_an_experiment_label_are_named(
    tmp_path: Path, rules: RuleSet
) -> None:
    explanation = _explain(tmp_path, "xid79", 15, rules)  # a plain `experiment` label
    assert explanation.experiment.launcher == "experiment label"
    assert all(a.rank for a in explanation.attempts)  # an Indexed Job's completion index
    collateral = [a for a in explanation.attempts if a.category == "peer.failure"]
    assert collateral
    line = next(s for s in render_text(explanation).splitlines() if "collateral:" in s)
    assert "?" not in line
    assert all((a.rank or a.pod) in line for a in collateral)
    assert "collateral:" in render_markdown(explanation)


def test_the_latest_first_domino_is_told_from_the_first_of_all() -> None:
    attempts = [
        _run(1, rank="worker-0", category="gpu.xid", generation=0),
        _run(2, rank="worker-1", category="peer.failure", generation=0),
        _run(3, rank="worker-1", category="app.cuda_oom", generation=1),
    ]
    loop = story.loop_state(attempts, ["a1", "a3"])
    verdict = story.verdict(attempts, ["a1", "a3"], loop)
    assert not loop.looping
    assert verdict.root_attempt == "a3"
    assert verdict.summary.startswith(
        "In the latest of 2 failed generations, rank worker-1 failed first: failure 3 happened."
    )
    assert "The first failure of all was rank worker-0 at 1970-01-01T00:30:00Z (gpu.xid)." in (
        verdict.summary
    )
    assert "Restart loop" not in verdict.summary


def test_a_loop_names_the_step_it_keeps_returning_to() -> None:
    attempts = [
        _run(n, rank="worker-0", category="node.maintenance", generation=n, loaded=12000)
        for n in range(4)
    ]
    roots = [a.id for a in attempts]
    loop = story.loop_state(attempts, roots)
    assert loop.looping and loop.stuck_at_step == 12000
    assert story.loop_headline(loop) == (
        "Restart loop: 4 generations killed by host maintenance in 3h 00m, "
        "no forward progress since step 12000."
    )
    assert story.verdict(attempts, roots, loop).summary.startswith(story.loop_headline(loop))


@pytest.mark.parametrize(
    ("cause", "kind", "words"),
    [
        ("startup.unschedulable", "unschedulable", "generations left unscheduled (no node"),
        ("unknown", "same_error", "killed by failures that left no evidence"),
        ("app.exception", "same_error", "killed by a traceback from the training code"),
    ],
)
def test_a_loops_cause_reads_as_words(cause: str, kind: str, words: str) -> None:
    loop = Loop(True, 3, 600, kind, False, cause=cause)
    assert words in story.loop_headline(loop)
