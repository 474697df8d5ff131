"""Entities and the bindings between them over time.

Evidence names entities (a pod uid, a node, an EC2 instance, a GPU UUID, an ASG). Bindings say
which belonged to which, and when: pod.node (pod ran on node), node.instance (node is backed by
instance), gpu.node (GPU sits in node), pod.gpu (pod held GPU), instance.asg (instance is in
ASG). The explain engine walks them from an experiment's pods out to every related source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "BINDING_KINDS",
    "Binding",
    "ExperimentRecord",
    "PodRecord",
]

BINDING_KINDS: Final = frozenset(
    {"pod.node", "node.instance", "gpu.node", "pod.gpu", "instance.asg", "node.provider"}
)


@dataclass(frozen=True, slots=True)
class Binding:
    """`subject` was bound to `object` at least from `first_ts` to `last_ts` (epoch ms)."""

    kind: str
    subject: str
    object: str
    first_ts: int
    last_ts: int
    attrs: dict[str, Any] | None = None
    # The cluster whose names these are (a node, a pod's namespace/name): two clusters' nodes
    # of one name are two nodes. None where no cluster was named.
    cluster: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in BINDING_KINDS:
            raise ValueError(f"unknown binding kind {self.kind!r}")


@dataclass(slots=True)
class PodRecord:
    """What the index knows of one pod incarnation (one uid)."""

    uid: str
    namespace: str
    name: str
    seen: int  # when this view of the pod was observed (epoch ms)
    experiment: str | None = None
    launcher: str | None = None
    label: str | None = None
    rank: str | None = None
    job_attempt: int | None = None
    node: str | None = None
    created: int | None = None
    deleted: int | None = None
    phase: str | None = None
    gpus: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    cluster: str | None = None  # the cluster it ran in (None: the index names no cluster)


@dataclass(frozen=True, slots=True)
class ExperimentRecord:
    namespace: str
    name: str
    launcher: str
    label: str
    first_seen: int
    last_seen: int
    cluster: str = ""  # "" when the index names no cluster
