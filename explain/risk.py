"""At risk: a running experiment whose node the cloud is about to take, or whose GPUs are failing.

An explanation says why runs ended; for the runs still going it also asks, per node, what
preflight asks before a start: a maintenance, retirement or termination window about to open, a
spot or removal notice, a hardware-class GPU fault or NotReady since the run began. Each such
node is a warning before the fall, with the ranks on it, the window, the last checkpoint and the
GPU-hours that would be lost if the node went when the window opens (every running rank's work
since its last checkpoint: in a collective job the others die with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from whyjob.core.index import Index
from whyjob.core.timeutil import format_duration, format_ts
from whyjob.explain.model import Attempt
from whyjob.explain.preflight import (
    FAULTS,
    LOOKBACK_MS,
    WINDOW_MS,
    WINDOWED,
    Check,
    node_key,
    preflight,
)
from whyjob.explain.ruleset import RuleSet

__all__ = ["AtRisk", "at_risk"]

_HOUR_MS: Final = 3_600_000


@dataclass(slots=True)
class AtRisk:
    node: str
    ranks: list[str]
    attempts: list[str]
    pod_uids: list[str]  # the pods at risk, whose labels may name an owner
    reasons: list[Check]
    starts: int  # when the node may go: the window's start, or now for what is happening now
    ends: int | None
    last_checkpoint: int | None
    now: int
    gpu_hours: float
    advice: str = ""

    @property
    def until(self) -> str:
        """How long until the node may go: a duration, or "now"."""
        return format_duration(self.starts - self.now) if self.starts > self.now else "now"

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "ranks": self.ranks,
            "attempts": self.attempts,
            "starts": format_ts(self.starts),
            "ends": format_ts(self.ends) if self.ends is not None else None,
            "in": self.until,
            "last_checkpoint": format_ts(self.last_checkpoint)
            if self.last_checkpoint is not None
            else None,
            "checkpoint_age": format_duration(self.now - self.last_checkpoint)
            if self.last_checkpoint is not None
            else None,
            "gpu_hours_at_risk": round(self.gpu_hours, 2),
            "reasons": [c.to_json() for c in self.reasons],
            "advice": self.advice,
        }


def at_risk(
    index: Index,
    rules: RuleSet,
    attempts: list[Attempt],
    checkpoints: dict[str, int],
    *,
    now: int,
    window_ms: int = WINDOW_MS,
    cluster: str | None = None,
) -> list[AtRisk]:
    """A warning for each node under a running attempt that has a reason not to be trusted
    (the experiment's `cluster`'s node of that name)."""
    running = [a for a in attempts if a.state == "running" and a.node]
    out: list[AtRisk] = []
    for node in sorted({a.node for a in running if a.node}):
        here = [a for a in running if a.node == node]
        began = min((a.started_at for a in here if a.started_at), default=now)
        found = preflight(
            index,
            rules,
            node_key(node, cluster),
            now=now,
            window_ms=window_ms,
            lookback_ms=LOOKBACK_MS,
        )
        # A fault from before the run began is history the run already survived.
        reasons = [
            c for c in found.checks if c.blocking and (c.code not in FAULTS or c.at >= began)
        ]
        if not reasons:
            continue
        windows = [c for c in reasons if c.code in WINDOWED and c.at > now]
        starts = min((c.at for c in windows), default=now)
        ends = min((c.until for c in windows if c.until is not None), default=None)
        saved = [checkpoints[a.id] for a in running if a.id in checkpoints]
        lost = sum(
            max(0, starts - checkpoints.get(a.id, a.started_at or starts)) * (a.gpus or 0)
            for a in running
        )
        out.append(
            AtRisk(
                node=node,
                ranks=sorted({a.rank or a.pod for a in here}),
                attempts=[a.id for a in here],
                pod_uids=sorted({a.pod_uid for a in here}),
                reasons=reasons,
                starts=starts,
                ends=ends,
                last_checkpoint=max(saved) if saved else None,
                now=now,
                gpu_hours=lost / _HOUR_MS,
                advice=_advice(node, reasons, starts, now),
            )
        )
    return out


def _advice(node: str, reasons: list[Check], starts: int, now: int) -> str:
    if all(c.code in FAULTS for c in reasons):
        return (
            f"save a checkpoint now; cordon {node} and move its ranks: its GPUs failed while "
            "the run was on it"
        )
    when = f"before {format_ts(starts)}" if starts > now else "now"
    return (
        f"save a checkpoint now; cordon and drain {node} {when} so the ranks restart elsewhere "
        "from that checkpoint, not from an older one"
    )
