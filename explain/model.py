"""The Explanation model: the one document every surface renders.

`whyjob explain --json`, the API, the web timeline, Slack and alerts all show this object; no
surface computes its own diagnosis. Its JSON form is a public contract, versioned as
`whyjob.explanation/v1` and documented in docs/explanation.md with a JSON Schema in
core/schema/explanation.v1.json: fields may be added, never renamed or dropped within v1.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from whyjob.core.timeutil import format_ts

__all__ = [
    "SCHEMA",
    "Attempt",
    "Cause",
    "ChainStep",
    "ExperimentInfo",
    "Explanation",
    "GpuHours",
    "Loop",
    "RetryAdvice",
    "TimelineEntry",
    "Verdict",
]

SCHEMA = "whyjob.explanation/v1"


@dataclass(slots=True)
class Cause:
    """One candidate cause of an attempt's end, as a rule found it."""

    category: str
    grade: str
    summary: str
    rule: str
    score: float
    at: int | None  # when the root evidence happened (epoch ms)
    evidence: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)  # xid, exit code, node, ...
    collateral: bool = False  # a symptom another rank's failure can cause

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["at"] = format_ts(self.at, precise=True) if self.at is not None else None
        return out


@dataclass(slots=True)
class Attempt:
    """One run of one container of one pod incarnation."""

    id: str
    pod: str
    pod_uid: str
    namespace: str
    container: str
    restart: int
    rank: str | None
    node: str | None
    instance_id: str | None
    started_at: int | None
    ended_at: int | None
    exit_code: int | None
    signal: int | None
    reason: str | None  # the kubelet's termination reason or waiting reason
    state: str  # running | terminated | waiting | pending | unknown
    category: str | None = None
    grade: str | None = None
    summary: str | None = None
    caused_by: str | None = None
    evidence: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    causes: list[Cause] = field(default_factory=list)
    generation: int = 0
    last_step: int | None = None
    last_checkpoint_step: int | None = None
    loaded_checkpoint_step: int | None = None  # the checkpoint this run resumed from
    gpus: int | None = None
    end_evidence: str | None = None  # the record that says how the run ended
    gpu_hours_lost: float | None = None  # failed runs: since the last checkpoint x GPUs

    @property
    def failed(self) -> bool:
        return self.category not in (None, "job.completed")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pod": self.pod,
            "pod_uid": self.pod_uid,
            "namespace": self.namespace,
            "container": self.container,
            "restart": self.restart,
            "rank": self.rank,
            "node": self.node,
            "instance_id": self.instance_id,
            "started_at": format_ts(self.started_at) if self.started_at is not None else None,
            "ended_at": format_ts(self.ended_at) if self.ended_at is not None else None,
            "state": self.state,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "reason": self.reason,
            "category": self.category,
            "grade": self.grade,
            "summary": self.summary,
            "caused_by": self.caused_by,
            "evidence": self.evidence,
            "missing": self.missing,
            "causes": [c.to_json() for c in self.causes],
            "generation": self.generation,
            "last_step": self.last_step,
            "last_checkpoint_step": self.last_checkpoint_step,
            "loaded_checkpoint_step": self.loaded_checkpoint_step,
            "gpus": self.gpus,
            "end_evidence": self.end_evidence,
            "gpu_hours_lost": (
                round(self.gpu_hours_lost, 3) if self.gpu_hours_lost is not None else None
            ),
        }


@dataclass(slots=True)
class ChainStep:
    """One link of the causal chain, root first."""

    at: int | None
    role: str  # root | intermediate | effect | corroborates
    summary: str
    evidence: list[str] = field(default_factory=list)
    attempt: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "at": format_ts(self.at, precise=True) if self.at is not None else None,
            "role": self.role,
            "summary": self.summary,
            "evidence": self.evidence,
            "attempt": self.attempt,
        }


@dataclass(slots=True)
class Verdict:
    category: str
    grade: str
    summary: str
    root_attempt: str | None
    outcome: str  # completed | failed | running | pending | unknown
    owner: str  # infra | platform | user | -

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class Loop:
    looping: bool
    restarts: int
    window_s: int | None
    kind: str | None  # same_error | maintenance_storm | bad_node | unschedulable | mixed
    progress: bool | None  # did any attempt make forward progress (new step or checkpoint)?
    cause: str | None = None  # the category that ended most of the failed generations
    stuck_at_step: int | None = None  # a loop: the step it keeps returning to (None: unknown)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class GpuHours:
    used: float
    lost: float
    basis: str  # how "lost" was computed

    def to_json(self) -> dict[str, Any]:
        return {"used": round(self.used, 2), "lost": round(self.lost, 2), "basis": self.basis}


@dataclass(slots=True)
class RetryAdvice:
    value: bool | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class TimelineEntry:
    id: str
    at: int
    end: int | None
    source: str
    kind: str
    severity: int
    entity: str
    message: str
    attempt: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": format_ts(self.at, precise=True),
            "end": format_ts(self.end, precise=True) if self.end is not None else None,
            "source": self.source,
            "kind": self.kind,
            "severity": self.severity,
            "entity": self.entity,
            "message": self.message,
            "attempt": self.attempt,
        }


@dataclass(slots=True)
class ExperimentInfo:
    name: str
    namespace: str
    launcher: str | None
    recognised_by: str  # the label, or "pod name prefix"
    pods: int
    ranks: list[str]
    first_seen: int | None
    last_seen: int | None
    cluster: str | None = None  # None: no cluster was named for it

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "namespace": self.namespace,
            "cluster": self.cluster,
            "launcher": self.launcher,
            "recognised_by": self.recognised_by,
            "pods": self.pods,
            "ranks": self.ranks,
            "first_seen": format_ts(self.first_seen) if self.first_seen is not None else None,
            "last_seen": format_ts(self.last_seen) if self.last_seen is not None else None,
        }


@dataclass(slots=True)
class Explanation:
    experiment: ExperimentInfo
    verdict: Verdict
    attempts: list[Attempt]
    chain: list[ChainStep]
    loop: Loop
    gpu_hours: GpuHours
    retry_helps: RetryAdvice
    timeline: list[TimelineEntry]
    missing: list[str]
    generated_at: int
    rules_version: str
    implicated: list[Any] = field(default_factory=list)  # hardware.NodeRecord: the bad-node record
    at_risk: list[Any] = field(
        default_factory=list
    )  # risk.AtRisk: running ranks on a node to leave

    def attempt(self, attempt_id: str) -> Attempt | None:
        return next((a for a in self.attempts if a.id == attempt_id), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "generated_at": format_ts(self.generated_at),
            "rules_version": self.rules_version,
            "experiment": self.experiment.to_json(),
            "verdict": self.verdict.to_json(),
            "attempts": [a.to_json() for a in self.attempts],
            "chain": [c.to_json() for c in self.chain],
            "loop": self.loop.to_json(),
            "gpu_hours": self.gpu_hours.to_json(),
            "retry_helps": self.retry_helps.to_json(),
            "missing": self.missing,
            "implicated": [record.to_json() for record in self.implicated],
            "at_risk": [warning.to_json() for warning in self.at_risk],
            "timeline": [t.to_json() for t in self.timeline],
        }
