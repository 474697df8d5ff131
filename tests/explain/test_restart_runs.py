"""Restart loops run by run: every run of a crash-looping container is diagnosed from its own
log, a last run with no evidence of its own takes the cause the runs before it shared, and
forward progress is judged by the checkpoints each generation loaded and saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.index import SqliteIndex
from whyjob.explain.engine import explain_experiment
from whyjob.explain.model import Attempt, Explanation
from whyjob.explain.progress import marks, progressed
from whyjob.explain.ruleset import RuleSet, load_rules

POD = Path(__file__).parents[1] / "fixtures" / "k8s" / "pod-crashloop.json"
STARTS = ["10:12:02", "10:32:00", "10:36:00", "10:40:00"]


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules([])


def _cri(clock: str, text: str) -> str:
    return f"2026-03-04T{clock}.000000000Z stderr F {text}"


def _bundle(folder: Path, runs: dict[int, list[str]]) -> Path:
    """A pod in CrashLoopBackOff after four runs (restartCount 3, the dead run in lastState),
    and the kubelet's log file of each run that has lines."""
    pod = json.loads(POD.read_text())
    status = pod["status"]["containerStatuses"][0]
    status["restartCount"] = 3
    status["lastState"]["terminated"].update(
        exitCode=1,
        reason="Error",
        startedAt="2026-03-04T10:40:00Z",
        finishedAt="2026-03-04T10:41:00Z",
    )
    status["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    folder.mkdir()
    (folder / "pod.json").write_text(json.dumps(pod))
    uid = pod["metadata"]["uid"]
    logs = folder / f"ml-research_gpt2-run7-worker-1_{uid}" / "pytorch"
    logs.mkdir(parents=True)
    for restart, lines in runs.items():
        (logs / f"{restart}.log").write_text("\n".join(lines) + "\n")
    return folder


def _explain(tmp_path: Path, runs: dict[int, list[str]], rules: RuleSet) -> Explanation:
    bundle = _bundle(tmp_path / "bundle", runs)
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        Ingestor(index, IngestOptions()).ingest([str(bundle)])
        return explain_experiment(index, rules, "gpt2-run7", None)


def _key_error(clock: str) -> list[str]:
    h, m, _ = clock.split(":")
    at = f"{h}:{m}:30"
    return [
        _cri(clock, "loading dataset"),
        _cri(at, "Traceback (most recent call last):"),
        _cri(at, '  File "train.py", line 10, in <module>'),
        _cri(at, "KeyError: 'txt'"),
    ]


def test_every_run_of_a_crash_loop_is_diagnosed_from_its_own_log(
    tmp_path: Path, rules: RuleSet
) -> None:
    explanation = _explain(tmp_path, {n: _key_error(s) for n, s in enumerate(STARTS)}, rules)
    runs = sorted(explanation.attempts, key=lambda a: a.restart)
    assert [a.restart for a in runs] == [0, 1, 2, 3]
    # The earlier runs have no termination record (only the newest dead run is in the pod's
    # status), yet each was followed by another run, so each ended.
    assert all(a.state != "running" and a.ended_at is not None for a in runs)
    assert [a.category for a in runs] == ["app.exception"] * 4
    assert all("KeyError" in (a.summary or "") for a in runs)
    assert explanation.loop.looping and explanation.loop.kind == "same_error"


def test_a_last_run_with_no_evidence_takes_the_cause_the_runs_before_it_shared(
    tmp_path: Path, rules: RuleSet
) -> None:
    runs = {n: _key_error(s) for n, s in enumerate(STARTS[:3])}  # no 3.log: run 3 left nothing
    explanation = _explain(tmp_path, runs, rules)
    last = max(explanation.attempts, key=lambda a: a.restart)
    assert (last.restart, last.category, last.exit_code) == (3, "unknown", 1)
    verdict = explanation.verdict
    assert (verdict.category, verdict.grade) == ("app.exception", "possible")  # likely, graded down
    assert "left no evidence of its own" in verdict.summary
    assert "3 failures before it all died of app.exception" in verdict.summary
    assert explanation.loop.kind == "same_error"


def _run(generation: int, *, step: int | None = None, saved: int | None = None,
         loaded: int | None = None, category: str = "app.exception") -> Attempt:  # fmt: skip
    return Attempt(
        id=f"r{generation}", pod="p", pod_uid="u", namespace="ns", container="c",
        restart=generation, rank="worker-0", node="n", instance_id=None,
        started_at=generation * 1000, ended_at=generation * 1000 + 500, exit_code=1,
        signal=None, reason="Error", state="terminated", category=category,
        generation=generation, last_step=step, last_checkpoint_step=saved,
        loaded_checkpoint_step=loaded,
    )  # fmt: skip


def test_reloading_the_same_checkpoint_is_no_progress_however_many_steps_are_replayed() -> None:
    first, second, third = marks(
        [
            _run(0, step=1400, saved=1000),
            _run(1, step=1450, loaded=1000),  # replayed further than before, saved nothing
            _run(2, step=1420, loaded=1000),
        ]
    )
    assert not progressed(first, second) and not progressed(second, third)
    resumed_later = marks(
        [_run(0, step=1400, saved=1000), _run(1, step=2100, loaded=1000, saved=2000)]
    )
    assert progressed(*resumed_later)


def test_without_checkpoints_the_furthest_step_of_any_rank_decides() -> None:
    # Megatron logs iterations from one rank only: the victim rank's own step is not the measure.
    logger = _run(0, step=500, category="peer.failure")
    victim = _run(0, category="gpu.xid")
    later = _run(1, step=300)
    earlier_mark, later_mark = marks([logger, victim, later])
    assert earlier_mark.furthest == 500 and not progressed(earlier_mark, later_mark)
    assert progressed(later_mark, marks([_run(2, step=900)])[0])


def test_a_checkpoint_load_is_not_a_training_step(tmp_path: Path, rules: RuleSet) -> None:
    lines = [
        _cri("10:12:02", "Loading checkpoint from /ckpt/latest (global_step 1000)"),
        *_key_error("10:12:10")[1:],
    ]
    explanation = _explain(tmp_path, {0: lines}, rules)
    run = next(a for a in explanation.attempts if a.restart == 0)
    assert run.loaded_checkpoint_step == 1000
    assert run.last_step is None
