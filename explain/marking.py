"""Which nodes to mark so schedulers avoid them: those a notice says the cloud is about to take.

The opt-in `mark_nodes:` mode of `whyjob collect` labels (and may taint) each such node, the way
GKE labels its GPU nodes with `cloud.google.com/scheduled-maintenance-time`, but for every source
whyjob reads (EC2 scheduled events and AWS Health, GCE, Azure Scheduled Events, spot and
rebalance notices, the autoscalers' removal taints). What counts is preflight's notices; a
node's hardware faults are not marked here (the device plugin and node-problem-detector own
that), so a mark means "leaving soon", nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from whyjob.core.index import Index
from whyjob.explain.preflight import IMMINENT, WINDOWED, node_key, preflight
from whyjob.explain.ruleset import RuleSet

__all__ = ["Mark", "marks"]


@dataclass(frozen=True, slots=True)
class Mark:
    node: str
    starts: int  # when the node may go: the window's start, or the notice's time
    reason: str  # the notice, in a line

    @property
    def value(self) -> str:
        """The label's value: the start in Unix seconds, as GKE writes its own label."""
        return str(self.starts // 1000)


def marks(
    index: Index,
    rules: RuleSet,
    nodes: Iterable[str],
    *,
    now: int,
    window_ms: int,
    cluster: str | None = None,
) -> dict[str, Mark]:
    """A mark for each node with a notice inside [now, now + window] (or a spot, rebalance or
    removal notice now), the earliest when there are several; from `cluster`'s records only,
    when the index is shared (another cluster's node of the same name is not this one)."""
    out: dict[str, Mark] = {}
    for node in sorted(set(nodes)):
        result = preflight(index, rules, node_key(node, cluster), now=now, window_ms=window_ms)
        notices = [
            c for c in result.checks if c.blocking and (c.code in WINDOWED or c.code in IMMINENT)
        ]
        if notices:
            first = min(notices, key=lambda c: c.at)
            out[node] = Mark(node, max(first.at, 0), first.message[:250])
    return out
