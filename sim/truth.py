"""truth.json: what really ended each attempt of the experiment, for tests and benchmarks.

Schema `whyjob.truth/v1`. One entry per container run of every experiment pod (pending pods
that never started get one entry with restart 0). `failed_at` is when the attempt's failure
began (its first error line, signal or eviction), `ended_at` when the container really stopped;
the first domino is the earliest `failed_at`. Times are the *true* timeline, before any
source's clock skew; the skews are listed so a benchmark can tell a misordering caused by skew
from a wrong answer. `caused_by` is set exactly for `peer.failure` attempts and names the
first-domino attempt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from whyjob.core.taxonomy import CATEGORIES
from whyjob.sim.clock import SECOND, rfc3339_micro
from whyjob.sim.incident import Incident, Run
from whyjob.sim.world import World

__all__ = ["SCHEMA", "AttemptTruth", "Truth", "build_truth"]

SCHEMA = "whyjob.truth/v1"


@dataclass(frozen=True, slots=True)
class AttemptTruth:
    key: str
    pod: str
    pod_uid: str
    container: str
    restart: int
    rank: str | None
    node: str | None
    started_at: str
    failed_at: str | None
    ended_at: str | None
    exit_code: int | None
    category: str
    caused_by: str | None
    note: str

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "pod": self.pod,
            "pod_uid": self.pod_uid,
            "container": self.container,
            "restart": self.restart,
            "rank": self.rank,
            "node": self.node,
            "started_at": self.started_at,
            "failed_at": self.failed_at,
            "ended_at": self.ended_at,
            "exit_code": self.exit_code,
            "category": self.category,
            "caused_by": self.caused_by,
            "note": self.note,
        }


@dataclass(frozen=True, slots=True)
class Truth:
    scenario: str
    seed: int
    cloud: str
    noise: bool
    experiment: dict[str, str]
    verdict: dict[str, str | None]
    attempts: tuple[AttemptTruth, ...]
    clock_skew_s: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    captured_at: str = ""  # when the bundle's snapshots were taken
    # Windows announced ahead on a running rank's node: {"node", "starts", "ends"}.
    ahead: tuple[dict[str, str | None], ...] = ()

    @property
    def experiment_name(self) -> str:
        return self.experiment["name"]

    @property
    def experiment_namespace(self) -> str:
        return self.experiment["namespace"]

    @property
    def root(self) -> AttemptTruth | None:
        key = self.verdict.get("root")
        return next((a for a in self.attempts if a.key == key), None)

    def attempt(self, key: str) -> AttemptTruth:
        return next(a for a in self.attempts if a.key == key)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "scenario": self.scenario,
            "seed": self.seed,
            "cloud": self.cloud,
            "noise": self.noise,
            "experiment": dict(self.experiment),
            "verdict": dict(self.verdict),
            "attempts": [a.to_json() for a in self.attempts],
            "clock_skew_s": dict(self.clock_skew_s),
            "notes": list(self.notes),
            "captured_at": self.captured_at,
            "ahead": [dict(a) for a in self.ahead],
        }


def _failed_at(run: Run) -> int:
    """When the attempt's failure began: its first error line or signal, not the container's
    exit (torchrun takes seconds to tear down; a peer's container can exit first)."""
    if run.failed_at is not None:
        return run.failed_at
    if run.true_end is not None:
        return run.true_end
    if run.started_at is not None:
        return run.started_at
    return run.pod.scheduled_at or run.pod.created_at


def _started(run: Run) -> int:
    if run.started_at is not None:
        return run.started_at
    return run.pod.scheduled_at or run.pod.created_at


def build_truth(
    *,
    scenario: str,
    seed: int,
    noise: bool,
    world: World,
    incident: Incident,
    offsets: dict[str, int],
) -> Truth:
    exp = world.experiment
    runs = [run for pod in incident.pods if pod.experiment for run in pod.runs]
    attempts = []
    for run in sorted(runs, key=lambda r: (_started(r), r.pod.rank_index, r.restart)):
        category = run.category
        if category is None or category not in CATEGORIES:
            raise ValueError(f"{scenario}: attempt {run.key} has no valid category: {category!r}")
        if (category == "peer.failure") != (run.caused_by is not None):
            raise ValueError(
                f"{scenario}: attempt {run.key}: caused_by must be set exactly for peer.failure"
            )
        failed = category != "job.completed" and (run.true_end is not None or run.pending)
        attempts.append(
            AttemptTruth(
                key=run.key,
                pod=run.pod.name,
                pod_uid=run.pod.uid,
                container=run.pod.container,
                restart=run.restart,
                rank=run.pod.rank,
                node=run.pod.node,
                started_at=rfc3339_micro(_started(run)),
                failed_at=rfc3339_micro(_failed_at(run)) if failed else None,
                ended_at=rfc3339_micro(run.true_end) if run.true_end is not None else None,
                exit_code=run.exit_code,
                category=category,
                caused_by=run.caused_by.key if run.caused_by is not None else None,
                note=run.note,
            )
        )
    roots = sorted((r for r in incident.roots if r.pod.experiment), key=_failed_at)
    if roots:
        verdict: dict[str, str | None] = {"category": roots[0].category, "root": roots[0].key}
    else:
        verdict = {"category": "job.completed", "root": None}
    return Truth(
        scenario=scenario,
        seed=seed,
        cloud=world.cloud.kind,
        noise=noise,
        experiment={"name": exp.name, "namespace": exp.namespace, "launcher": exp.launcher},
        verdict=verdict,
        attempts=tuple(attempts),
        clock_skew_s={k: v / SECOND for k, v in sorted(offsets.items())},
        notes=tuple(incident.notes),
        captured_at=rfc3339_micro(incident.end),
        ahead=tuple(
            {
                "node": node,
                "starts": rfc3339_micro(start),
                "ends": rfc3339_micro(end) if end else None,
            }
            for node, start, end in incident.ahead
        ),
    )
