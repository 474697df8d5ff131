"""Lanes of the timeline from runs alone: a rank's successive pods share one, pods of a Job
that run side by side do not."""

from __future__ import annotations

from whyjob.api.timeline import timeline_view
from whyjob.explain.model import (
    Attempt,
    ExperimentInfo,
    Explanation,
    GpuHours,
    Loop,
    RetryAdvice,
    Verdict,
)

MINUTE = 60_000


def _run(pod: str, start: int, end: int, rank: str | None = None) -> Attempt:
    return Attempt(
        id=f"{pod}:{start}",
        pod=pod,
        pod_uid=f"uid-{pod}",
        namespace="ml",
        container="main",
        restart=0,
        rank=rank,
        node="node-1",
        instance_id=None,
        started_at=start * MINUTE,
        ended_at=end * MINUTE,
        exit_code=1,
        signal=None,
        reason="Error",
        state="terminated",
        category="app.exception",
        grade="likely",
        summary="a traceback",
    )


def _lanes(attempts: list[Attempt]) -> dict[str, list[str]]:
    explanation = Explanation(
        experiment=ExperimentInfo("shards", "ml", "Job", "job-name", len(attempts), [], 0, 0),
        verdict=Verdict("app.exception", "likely", "a traceback", None, "failed", "user"),
        attempts=attempts,
        chain=[],
        loop=Loop(False, 1, None, None, None),
        gpu_hours=GpuHours(0, 0, ""),
        retry_helps=RetryAdvice(None, ""),
        timeline=[],
        missing=[],
        generated_at=0,
        rules_version="-",
    )
    view = timeline_view(explanation, now_ms=100 * MINUTE)
    return {
        lane["label"]: [bar["pod"] for bar in lane["bars"]]
        for lane in view["lanes"]
        if lane["kind"] == "rank"
    }


def test_a_ranks_successive_pods_share_a_lane() -> None:
    lanes = _lanes([_run("prep-x7k2p", 0, 10), _run("prep-b9mzq", 12, 20)])
    assert lanes == {"prep": ["prep-x7k2p", "prep-b9mzq"]}


def test_pods_running_side_by_side_get_lanes_of_their_own() -> None:
    """A Job with parallelism 3: its pods differ only in the suffix but overlap in time; a
    fourth pod, started after the first ended, takes the first's lane again."""
    lanes = _lanes(
        [
            _run("shards-x7k2p", 0, 10),
            _run("shards-b9mzq", 1, 12),
            _run("shards-c4tvw", 2, 14),
            _run("shards-d5rfg", 11, 20),
        ]
    )
    assert lanes == {
        "shards": ["shards-x7k2p", "shards-d5rfg"],
        "shards (2)": ["shards-b9mzq"],
        "shards (3)": ["shards-c4tvw"],
    }
    ranked = _lanes([_run("w-0", 0, 10, rank="0"), _run("w-1", 0, 10, rank="1")])
    assert set(ranked) == {"rank 0", "rank 1"}  # ranks named by a launcher are lanes as ever
