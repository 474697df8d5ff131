"""The fleet view's model: failed runs by where they ran, and the nodes and GPUs they add up to.

`whyjob nodes --json`, `whyjob gpus --json` and `GET /api/v1/fleet` print it as
`whyjob.fleet/v1` (docs/fleet.md); fields may be added, never renamed or dropped within v1.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

from whyjob.core.taxonomy import CATEGORIES
from whyjob.core.timeutil import format_ts

__all__ = [
    "HARDWARE",
    "SCHEMA",
    "ExperimentLoss",
    "Fleet",
    "GpuHealth",
    "InitFailure",
    "NodeHealth",
    "Run",
]

SCHEMA: Final = "whyjob.fleet/v1"
# Causes that are a node's or a GPU's own hardware failing (what an operator acts on).
HARDWARE: Final = frozenset({"gpu.xid", "node.not_ready"})


def _owner(category: str) -> str:
    known = CATEGORIES.get(category)
    return known.owner if known else "-"


def _json_ts(ms: int | None) -> str | None:
    return format_ts(ms) if ms is not None else None


@dataclass(slots=True)
class Run:
    """A failed run that failed first (collateral is counted with it), where it ran, what it
    cost."""

    namespace: str
    experiment: str
    attempt: str
    pod: str
    rank: str | None
    node: str | None
    gpus: list[str]
    category: str
    grade: str
    summary: str
    started_at: int | None
    ended_at: int
    cause_at: int  # when the cause's first record happened (the run may end later)
    gpu_hours_lost: float  # this run's and those of the runs that went down with it
    collateral: int
    xid: int | None
    cluster: str | None = None

    @property
    def owner(self) -> str:
        return _owner(self.category)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "experiment": self.experiment,
            "attempt": self.attempt,
            "pod": self.pod,
            "rank": self.rank,
            "node": self.node,
            "gpus": self.gpus,
            "category": self.category,
            "owner": self.owner,
            "grade": self.grade,
            "summary": self.summary,
            "started_at": _json_ts(self.started_at),
            "ended_at": format_ts(self.ended_at),
            "cause_at": format_ts(self.cause_at),
            "gpu_hours_lost": round(self.gpu_hours_lost, 2),
            "collateral": self.collateral,
            "xid": self.xid,
            "cluster": self.cluster,
        }


@dataclass(slots=True)
class ExperimentLoss:
    """One experiment's outcome, restart loop and GPU-hours, for the fleet's reports."""

    namespace: str
    name: str
    launcher: str | None
    outcome: str
    category: str
    first_seen: int | None
    last_seen: int | None
    failed_runs: int  # runs that failed first (not collateral)
    gpu_hours_used: float
    gpu_hours_lost: float
    looping: bool
    loop_kind: str | None
    restarts: int
    loop_window_s: int | None
    progress: bool | None
    cluster: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "launcher": self.launcher,
            "outcome": self.outcome,
            "category": self.category,
            "owner": _owner(self.category),
            "first_seen": _json_ts(self.first_seen),
            "last_seen": _json_ts(self.last_seen),
            "failed_runs": self.failed_runs,
            "gpu_hours_used": round(self.gpu_hours_used, 2),
            "gpu_hours_lost": round(self.gpu_hours_lost, 2),
            "looping": self.looping,
            "loop_kind": self.loop_kind,
            "restarts": self.restarts,
            "loop_window_s": self.loop_window_s,
            "progress": self.progress,
            "cluster": self.cluster,
        }


@dataclass(slots=True)
class InitFailure:
    """An init container (a GPU health check, say) that failed before the job could start."""

    namespace: str
    experiment: str
    pod: str
    container: str
    node: str | None
    gpus: list[str]
    at: int
    reason: str
    evidence: str

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "experiment": self.experiment,
            "pod": self.pod,
            "container": self.container,
            "node": self.node,
            "gpus": self.gpus,
            "at": format_ts(self.at),
            "reason": self.reason,
            "evidence": self.evidence,
        }


@dataclass(slots=True)
class GpuHealth:
    gpu: str  # the UUID, or node/PCI address when the kernel named only the bus
    node: str | None
    xids: Counter[int] = field(default_factory=Counter)  # hardware-class faults by Xid
    faults: int = 0  # hardware-class fault records (Xid, ECC, NVLink ...)
    first_fault: int | None = None
    last_fault: int | None = None
    repeats: list[int] = field(default_factory=list)  # Xids seen twice within a day
    runs: int = 0  # runs it ended first
    gpu_hours_lost: float = 0.0
    experiments: set[str] = field(default_factory=set)
    init_failures: int = 0

    def harm(self) -> tuple[int, int, float]:
        return (self.runs, self.faults, self.gpu_hours_lost)

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "node": self.node,
            "xids": {str(k): v for k, v in sorted(self.xids.items())},
            "faults": self.faults,
            "first_fault": _json_ts(self.first_fault),
            "last_fault": _json_ts(self.last_fault),
            "repeats": self.repeats,
            "runs": self.runs,
            "gpu_hours_lost": round(self.gpu_hours_lost, 2),
            "experiments": sorted(self.experiments),
            "init_failures": self.init_failures,
        }


@dataclass(slots=True)
class NodeHealth:
    node: str
    pool: str | None = None
    instance_type: str | None = None
    by_cause: Counter[str] = field(default_factory=Counter)  # runs it ended first, by cause
    hardware_runs: int = 0
    gpu_hours_lost: float = 0.0  # by the runs that failed on it, collateral included
    infra_gpu_hours_lost: float = 0.0  # of those, by causes the infrastructure owns
    experiments: set[str] = field(default_factory=set)
    last_failure: int | None = None
    xids: Counter[int] = field(default_factory=Counter)  # hardware-class Xids of its GPUs
    faults: int = 0
    not_ready: int = 0  # NotReady transitions
    episodes: int = 0  # hardware trouble, separated by the node coming back or a quiet day
    repeat_gpus: list[str] = field(default_factory=list)
    init_failures: int = 0

    @property
    def runs(self) -> int:
        return sum(self.by_cause.values())

    @property
    def lemon(self) -> bool:
        """Hardware trouble again after the node came back from the last."""
        return self.episodes >= 2

    def harm(self) -> tuple[int, int, float, int, int]:
        return (
            self.hardware_runs,
            self.faults,
            self.infra_gpu_hours_lost,
            self.runs,
            self.not_ready,
        )

    def patterns(self) -> list[str]:
        """What an operator acts on, in words."""
        out = []
        if self.lemon:
            out.append(f"lemon: hardware trouble in {self.episodes} separate episodes")
        out += [
            f"the same Xid repeated within 24 h on {g}: reset or RMA it" for g in self.repeat_gpus
        ]
        if self.init_failures:
            out.append(f"{self.init_failures} init container(s) failed their checks here")
        if self.hardware_runs >= 2 and not self.lemon:
            out.append(f"{self.hardware_runs} runs ended by its hardware: cordon it")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "pool": self.pool,
            "instance_type": self.instance_type,
            "runs": self.runs,
            "by_cause": dict(self.by_cause.most_common()),
            "hardware_runs": self.hardware_runs,
            "gpu_hours_lost": round(self.gpu_hours_lost, 2),
            "infra_gpu_hours_lost": round(self.infra_gpu_hours_lost, 2),
            "experiments": sorted(self.experiments),
            "last_failure": _json_ts(self.last_failure),
            "xids": {str(k): v for k, v in sorted(self.xids.items())},
            "faults": self.faults,
            "not_ready": self.not_ready,
            "episodes": self.episodes,
            "lemon": self.lemon,
            "repeat_gpus": self.repeat_gpus,
            "init_failures": self.init_failures,
            "patterns": self.patterns(),
        }


@dataclass(slots=True)
class Fleet:
    since: int
    until: int
    experiments: list[ExperimentLoss] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    nodes: list[NodeHealth] = field(default_factory=list)
    gpus: list[GpuHealth] = field(default_factory=list)
    init_failures: list[InitFailure] = field(default_factory=list)
    hidden_experiments: int = 0  # in namespaces the caller may not read: counted, not read

    def node(self, name: str) -> NodeHealth | None:
        return next((n for n in self.nodes if n.node == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "since": format_ts(self.since),
            "until": format_ts(self.until),
            "experiments": len(self.experiments),
            "hidden_experiments": self.hidden_experiments,
            "runs": len(self.runs),
            "gpu_hours_lost": round(sum(r.gpu_hours_lost for r in self.runs), 2),
            "nodes": [n.to_json() for n in self.nodes],
            "gpus": [g.to_json() for g in self.gpus],
            "init_failures": [f.to_json() for f in self.init_failures],
        }
