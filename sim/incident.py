"""What happened, on the true timeline: the records a scenario produces before any export.

These are plain data. The story (`story.py`) fills them in; the writers (`kubectl.py`, `crilog.py`, `journal.py`, `dcgm.py`, `cloudapi.py`) turn them
into the files each real tool would have written. Keeping the two apart means a format can be
fixed without touching a scenario, and a scenario can never print a timestamp with the wrong
clock.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "AsgActivity",
    "AzureEvent",
    "BridgeEvent",
    "EventVersion",
    "GceOperation",
    "GceUpcoming",
    "Incident",
    "InstanceEvent",
    "KubeEvent",
    "LogLine",
    "ObjRef",
    "Pod",
    "PodCondition",
    "Run",
    "Slot",
    "Versions",
]


# ---------------------------------------------------------------------------------------------
# resourceVersions


@dataclass(slots=True)
class Slot:
    """A resourceVersion to be assigned once every write is known, in true-time order."""

    at: int
    seq: int
    value: int = 0

    def __str__(self) -> str:
        return str(self.value)


@dataclass(slots=True)
class Versions:
    """etcd's revision counter: one increasing number per write across the whole cluster."""

    slots: list[Slot] = field(default_factory=list)

    def slot(self, at: int) -> Slot:
        new = Slot(at, len(self.slots))
        self.slots.append(new)
        return new

    def assign(self, rng: random.Random) -> None:
        """Number every write in time order, with the gaps other objects' writes leave."""
        value = rng.randint(40_000_000, 90_000_000)
        for slot in sorted(self.slots, key=lambda s: (s.at, s.seq)):
            value += rng.randint(1, 40)
            slot.value = value


# ---------------------------------------------------------------------------------------------
# Kubernetes events


@dataclass(slots=True)
class ObjRef:
    kind: str
    name: str
    namespace: str
    uid: str
    api_version: str
    field_path: str | None = None
    resource_version: Slot | None = None


@dataclass(slots=True)
class EventVersion:
    at: int
    count: int
    slot: Slot


@dataclass(slots=True)
class KubeEvent:
    """One Event object and every UPDATE of it a watch would have seen."""

    namespace: str
    ref: ObjRef
    reason: str
    message: str
    type: str
    component: str
    host: str | None
    reporting_instance: str
    uid: str
    first: int
    new_style: bool = False  # created through events.k8s.io (eventTime, series), e.g. scheduler
    action: str | None = None
    related: ObjRef | None = None
    annotations: dict[str, str] = field(default_factory=dict)
    versions: list[EventVersion] = field(default_factory=list)
    noise: bool = False

    @property
    def last(self) -> EventVersion:
        return self.versions[-1]


# ---------------------------------------------------------------------------------------------
# pods and container runs


@dataclass(slots=True)
class LogLine:
    at: int
    stream: str  # stdout | stderr
    text: str


@dataclass(slots=True)
class Run:
    """One run of one container: the unit whyjob calls an attempt."""

    pod: Pod
    restart: int
    container_id: str
    started_at: int | None
    finished_at: int | None = None  # as the kubelet reports it
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    timestamps: bool = True  # False: ContainerStatusUnknown carries no startedAt/finishedAt
    log: list[LogLine] = field(default_factory=list)
    # truth
    category: str | None = None
    caused_by: Run | None = None
    note: str = ""
    true_end: int | None = None  # the container really stopped (the kubelet may report later)
    failed_at: int | None = None  # the first sign of this attempt's failure (error line, signal)
    pending: bool = False  # never started (image pull, config, unschedulable)

    @property
    def key(self) -> str:
        return f"{self.pod.uid}/{self.pod.container}/{self.restart}"

    @property
    def running(self) -> bool:
        return not self.pending and self.finished_at is None and self.true_end is None


@dataclass(slots=True)
class PodCondition:
    type: str
    status: str
    last_transition: int
    reason: str | None = None
    message: str | None = None


@dataclass(slots=True)
class Pod:
    name: str
    namespace: str
    uid: str
    created_at: int
    created_slot: Slot
    labels: dict[str, str]
    annotations: dict[str, str]
    owner_refs: list[dict[str, Any]]
    spec: dict[str, Any]  # everything but nodeName, rendered as `kubectl get pod -o json` shows it
    container: str
    image: str
    image_id: str
    qos: str
    experiment: bool = False
    rank: str | None = None  # the rank label truth reports (master-0, worker-2, workers-0-3)
    rank_index: int = 0
    node: str | None = None
    ip: str | None = None
    host_ip: str | None = None
    scheduled_at: int | None = None
    phase: str = "Pending"
    reason: str | None = None
    message: str | None = None
    conditions: dict[str, PodCondition] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    waiting: tuple[str, str | None] | None = None  # (reason, message) while no container runs
    deletion_at: int | None = None
    deletion_grace: int | None = None
    deleted_at: int | None = None
    snapshots: int = 0
    noise: bool = False
    started_at: int | None = None  # status.startTime

    def condition(
        self,
        at: int,
        type_: str,
        status: str,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        current = self.conditions.get(type_)
        if current is not None and (current.status, current.reason) == (status, reason):
            return
        self.conditions[type_] = PodCondition(type_, status, at, reason, message)

    @property
    def last_run(self) -> Run | None:
        return self.runs[-1] if self.runs else None


# ---------------------------------------------------------------------------------------------
# cloud records


@dataclass(slots=True)
class AsgActivity:
    activity_id: str
    asg: str
    description: str
    cause: str
    start: int
    end: int | None
    status: str
    details: dict[str, str]
    progress: int = 100


@dataclass(slots=True)
class InstanceEvent:
    instance_id: str
    code: str
    description: str
    event_id: str
    not_before: int
    not_after: int | None
    not_before_deadline: int | None = None


@dataclass(slots=True)
class BridgeEvent:
    id: str
    detail_type: str
    source: str
    at: int
    resources: list[str]
    detail: dict[str, Any]


@dataclass(slots=True)
class GceOperation:
    id: str
    name: str
    op_type: str
    instance: str
    zone: str
    target_id: str
    at: int
    end: int
    status_message: str
    user: str = "system"


@dataclass(slots=True)
class GceUpcoming:
    node: str
    window_start: int
    window_end: int
    latest_window_start: int
    reasons: list[str]
    status: str
    type: str = "SCHEDULED"
    can_reschedule: bool = True


@dataclass(slots=True)
class AzureEvent:
    node: str
    event_id: str
    event_type: str
    status: str
    resources: list[str]
    not_before: int | None
    description: str
    source: str
    duration: int
    incarnation: int


# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Incident:
    """Every record of one bundle, on the true timeline."""

    versions: Versions = field(default_factory=Versions)
    events: list[KubeEvent] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)
    pod_snapshots: list[tuple[Pod, int, Slot, dict[str, Any]]] = field(default_factory=list)
    node_snapshots: list[tuple[str, int, Slot, dict[str, Any]]] = field(default_factory=list)
    kernel: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    xids: dict[tuple[str, int], list[tuple[int, int]]] = field(default_factory=dict)
    dead_gpus: dict[tuple[str, int], int] = field(default_factory=dict)  # fell off the bus at
    node_down: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)
    dcgm_times: list[int] = field(default_factory=list)
    asg_activities: list[AsgActivity] = field(default_factory=list)
    instance_events: list[InstanceEvent] = field(default_factory=list)
    bridge_events: list[BridgeEvent] = field(default_factory=list)
    gce_operations: list[GceOperation] = field(default_factory=list)
    gce_upcoming: list[GceUpcoming] = field(default_factory=list)
    azure_events: list[AzureEvent] = field(default_factory=list)
    roots: list[Run] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    end: int = 0  # capture time
    # Notices of a window ahead on a running rank's node: (node, window start, end or None).
    ahead: list[tuple[str, int, int | None]] = field(default_factory=list)

    def kern(self, node: str, at: int, text: str) -> None:
        self.kernel.setdefault(node, []).append((at, text))
