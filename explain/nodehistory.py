"""One node's page: its standing in the fleet and what happened to it, oldest first."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Final

from whyjob.core.index import Index
from whyjob.core.timeutil import format_ts
from whyjob.explain.fleetmodel import Fleet, GpuHealth, NodeHealth
from whyjob.explain.matching import Matcher
from whyjob.explain.preflight import FAULTS, IMMINENT, WINDOWED, node_records, split_node_key
from whyjob.explain.ruleset import RuleSet

__all__ = ["HistoryEntry", "NodeHistory", "node_history"]


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    at: int
    until: int | None
    what: str  # notice | fault | run | init
    message: str
    evidence: str = ""
    count: int = 1  # the same message again within a day (a gauge re-scraped, a taint re-read)
    last: int | None = None  # when it was seen last

    def to_json(self) -> dict[str, Any]:
        return {
            "at": format_ts(self.at),
            "until": format_ts(self.until) if self.until is not None else None,
            "what": self.what,
            "message": self.message,
            "evidence": self.evidence or None,
            "count": self.count,
            "last": format_ts(self.last) if self.last is not None else None,
        }


@dataclass(slots=True)
class NodeHistory:
    """One node's page: its standing in the fleet and what happened to it, oldest first."""

    health: NodeHealth
    entries: list[HistoryEntry]
    gpus: list[GpuHealth]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "whyjob.node/v1",
            **self.health.to_json(),
            "gpus": [g.to_json() for g in self.gpus],
            "history": [e.to_json() for e in self.entries],
        }


_NOTICES: Final = {**WINDOWED, **IMMINENT}
_DAY_MS: Final = 86_400_000


def node_history(index: Index, rules: RuleSet, fleet: Fleet, node: str) -> NodeHistory:
    """The node's notices, faults and NotReady spells in the fleet's window (records about the
    node, its instance and GPUs only, never a pod's), with the runs that failed on it."""
    matcher = Matcher(rules)
    entries: list[HistoryEntry] = []
    for ev in node_records(index, node, fleet.since, fleet.until):
        signals = set(matcher.match(ev))
        notice = next((_NOTICES[s] for s in signals if s in _NOTICES), None)
        fault = next((FAULTS[s] for s in signals if s in FAULTS), None)
        if notice:
            entries.append(HistoryEntry(ev.ts, ev.ts_end, "notice", ev.message, ev.public_id))
        elif fault:
            entries.append(HistoryEntry(ev.ts, ev.ts_end, "fault", ev.message, ev.public_id))
    entries += [
        HistoryEntry(
            run.ended_at,
            None,
            "run",
            f"{run.namespace}/{run.experiment} {run.rank or run.pod}: {run.category} "
            f"({run.grade}), {run.gpu_hours_lost:.1f} GPU-h lost"
            + (f" with {run.collateral} more run(s)" if run.collateral else ""),
        )
        for run in fleet.runs
        if run.node and _is(node, run.node, run.cluster)
    ]
    entries += [
        HistoryEntry(
            f.at,
            None,
            "init",
            f"{f.namespace}/{f.experiment} {f.pod}: init container {f.container} failed "
            f"({f.reason})",
            f.evidence,
        )
        for f in fleet.init_failures
        if f.node and _is(node, *split_node_key(f.node))
    ]
    entries = _merged(sorted(entries, key=lambda e: (e.at, e.what)))
    health = fleet.node(node) or NodeHealth(node)
    gpus = [g for g in fleet.gpus if g.node and _is(node, *split_node_key(g.node))]
    return NodeHistory(health, entries, gpus)


def _is(asked: str, node: str, cluster: str | None) -> bool:
    """Whether a node of a cluster is the one asked about: `name@cluster` is that cluster's,
    a bare name any cluster's node of that name."""
    name, wanted = split_node_key(asked)
    return node == name and (wanted is None or cluster == wanted)


def _merged(entries: list[HistoryEntry]) -> list[HistoryEntry]:
    """One line for a message told again and again within a day, with its count."""
    out: list[HistoryEntry] = []
    first: dict[tuple[str, str], int] = {}  # (what, message) -> its line in `out`
    for entry in entries:
        at = first.get((entry.what, entry.message))
        if at is not None and entry.at - (out[at].last or out[at].at) <= _DAY_MS:
            out[at] = replace(out[at], count=out[at].count + 1, last=entry.at)
            continue
        first[(entry.what, entry.message)] = len(out)
        out.append(entry)
    return out
