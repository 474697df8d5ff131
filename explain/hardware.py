"""The bad-node record: is the node (or GPU) that ended this run hurting other jobs too?

For each node under a failure that hardware can cause, whyjob looks back a week across every
experiment: the Xids its GPUs raised, and the other experiments' runs that died on it. A node
with repeated hardware Xids, or that ended other teams' jobs as well, is a suspect to cordon:
the same question NVSentinel and node-problem-detector answer for the node, asked here for the
people whose jobs it ended.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from whyjob.core.index import Index
from whyjob.explain.model import Attempt

__all__ = ["NodeRecord", "implicated"]

_WEEK_MS = 7 * 86_400_000
_HARDWARE_CATEGORIES = frozenset({"gpu.xid", "node.not_ready", "app.nccl_error"})
_APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(slots=True)
class NodeRecord:
    node: str
    since: int
    xids: dict[int, int] = field(default_factory=dict)  # hardware Xid -> times seen
    gpus: list[str] = field(default_factory=list)
    other_failures: int = 0
    other_experiments: list[str] = field(default_factory=list)  # of this namespace only
    other_namespaces: int = 0  # namespaces whose runs it also ended, counted, never named
    suspect: bool = False
    advice: str = ""

    def to_json(self) -> dict[str, Any]:
        from whyjob.core.timeutil import format_ts

        return {
            "node": self.node,
            "since": format_ts(self.since),
            "xids": {str(k): v for k, v in sorted(self.xids.items())},
            "gpus": self.gpus,
            "other_failures": self.other_failures,
            "other_experiments": self.other_experiments,
            "other_namespaces": self.other_namespaces,
            "suspect": self.suspect,
            "advice": self.advice,
        }


def implicated(
    index: Index,
    namespace: str,
    experiment: str,
    attempts: list[Attempt],
    *,
    cluster: str | None = None,
) -> list[NodeRecord]:
    """A record for each node under a hardware-class failure of this experiment (in its
    cluster: another cluster's node of the same name is another node)."""
    by_node: dict[str, int] = {}
    for attempt in attempts:
        if attempt.category in _HARDWARE_CATEGORIES and attempt.node and attempt.ended_at:
            by_node[attempt.node] = max(by_node.get(attempt.node, 0), attempt.ended_at)
    records = []
    for node, last in sorted(by_node.items()):
        since, until = last - _WEEK_MS, last + 86_400_000
        record = NodeRecord(node=node, since=since)
        gpus = {b.subject for b in index.bindings("gpu.node", objects=[node])}
        both = index.entity_evidence("node", [node], since, until) + index.entity_evidence(
            "gpu_uuid", gpus, since, until
        )
        seen = list({ev.id: ev for ev in both if ev.cluster in (None, cluster)}.values())

        # The kernel log has every Xid; DCGM repeats the same ones. Count DCGM only without it.
        kernel = [ev for ev in seen if ev.kind == "gpu.xid" and ev.source == "kernel"]
        xid_records = kernel or [ev for ev in seen if ev.kind == "gpu.xid"]

        counts: Counter[int] = Counter()
        hit_gpus: set[str] = set()
        for ev in xid_records:
            code = ev.attrs.get("xid")
            if isinstance(code, int) and code not in _APPLICATION_XIDS:
                counts[code] += 1
                hit_gpus.add(ev.gpu_uuid or str(ev.attrs.get("pci") or "?"))
        record.xids, record.gpus = dict(counts), sorted(hit_gpus)
        others = [
            p
            for p in index.pods_on_node(node, since, until)
            if (p.namespace, p.experiment) != (namespace, experiment)
            and p.cluster in (None, cluster)
        ]
        failed_experiments: set[tuple[str | None, str]] = set()
        owner = {p.uid: p.namespace for p in others}  # a record may not name its namespace
        if others:
            for ev in index.pod_evidence(list(owner), since, until):
                if ev.kind == "container.terminated" and ev.attrs.get("exit_code") not in (0, None):
                    record.other_failures += 1
                    space = owner.get(ev.pod_uid or "", ev.namespace)
                    failed_experiments.add((space, ev.experiment or ev.pod or "?"))
        # Other tenants' runs are counted, never named: the explanation is served to anyone
        # who may read this experiment's namespace, and theirs may be hidden from them.
        record.other_experiments = sorted(n for ns, n in failed_experiments if ns == namespace)
        record.other_namespaces = len({ns for ns, _ in failed_experiments if ns != namespace})
        record.suspect = sum(counts.values()) >= 2 or bool(counts and record.other_failures)
        if record.suspect:
            record.advice = (
                f"cordon {node} and open a hardware ticket: "
                + (
                    f"hardware Xids {', '.join(f'{k} x{v}' for k, v in sorted(counts.items()))} this week"
                    if counts
                    else ""
                )
                + (
                    f"; it also ended {record.other_failures} run(s) of {len(failed_experiments)} other experiment(s)"
                    if record.other_failures
                    else ""
                )
            )
        elif counts:
            record.advice = "one hardware Xid this week: watch it"
        records.append(record)
    return records
