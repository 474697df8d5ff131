"""Everything the index knows that bears on one experiment, fetched with indexed queries.

From the experiment's pods the walk goes out along the bindings: pod -> node -> instance ->
ASG, node -> GPUs, pod -> GPUs; each entity's records are read for the experiment's time span
plus a margin, so notices that came before the first pod (a maintenance window announced the
day before) and after the last (a node deleted later) are in view.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from whyjob.core.entities import ExperimentRecord, PodRecord
from whyjob.core.errors import Ambiguous, NotFound
from whyjob.core.evidence import Evidence
from whyjob.core.index import Index

__all__ = ["Scene", "gather"]

_MARGIN_BEFORE = 6 * 3_600_000  # maintenance is often announced hours ahead
_MARGIN_AFTER = 3_600_000
_LOG_TAIL = 40


@dataclass(slots=True)
class Scene:
    """The evidence around one experiment, bucketed by the entity it is about."""

    name: str
    namespace: str
    launcher: str | None
    recognised_by: str
    pods: list[PodRecord]
    t0: int
    t1: int
    cluster: str | None = None  # None: no cluster was named for it
    by_pod: dict[str, list[Evidence]] = field(default_factory=lambda: defaultdict(list))
    by_node: dict[str, list[Evidence]] = field(default_factory=lambda: defaultdict(list))
    by_instance: dict[str, list[Evidence]] = field(default_factory=lambda: defaultdict(list))
    by_gpu: dict[str, list[Evidence]] = field(default_factory=lambda: defaultdict(list))
    by_asg: dict[str, list[Evidence]] = field(default_factory=lambda: defaultdict(list))
    experiment_records: list[Evidence] = field(default_factory=list)
    node_instance: dict[str, str] = field(default_factory=dict)
    instance_asg: dict[str, str] = field(default_factory=dict)
    pod_gpus: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    node_gpus: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    pod_nodes: dict[str, str] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)

    def all_records(self) -> list[Evidence]:
        seen: dict[int, Evidence] = {}
        for bucket in (self.by_pod, self.by_node, self.by_instance, self.by_gpu, self.by_asg):
            for records in bucket.values():
                for ev in records:
                    seen[ev.id] = ev
        for ev in self.experiment_records:
            seen[ev.id] = ev
        return sorted(seen.values(), key=_order)


def _order(ev: Evidence) -> tuple[int, int, int]:
    return (
        ev.ts,
        int(ev.attrs.get("seq", 0)) if isinstance(ev.attrs.get("seq"), int) else 0,
        ev.id,
    )


def _find(
    index: Index, name: str, namespace: str | None, cluster: str | None
) -> tuple[ExperimentRecord | None, list[PodRecord]]:
    found = index.experiments(name, namespace, cluster=cluster)
    if len(found) > 1:
        if len({e.namespace for e in found}) > 1:
            spaces = ", ".join(sorted({e.namespace for e in found}))
            raise Ambiguous(
                f"experiment {name!r} exists in several namespaces ({spaces}): pass --namespace"
            )
        clusters = ", ".join(sorted(e.cluster or "(none)" for e in found))
        raise Ambiguous(
            f"experiment {name!r} exists in several clusters ({clusters}): pass --cluster"
        )
    record = found[0] if found else None
    if record is not None:
        pods = index.experiment_pods(record.name, record.namespace, record.cluster)
        # Pods seen only in events or logs carry no labels; take them by name within the namespace.
        known = {p.uid for p in pods}
        pods += [
            p
            for p in index.pods_named_like(name, record.namespace, record.cluster)
            if p.uid not in known and p.experiment is None
        ]
        return record, pods
    pods = [
        p for p in index.pods_named_like(name, namespace, cluster) if p.experiment in (None, name)
    ]
    namespaces = sorted({p.namespace for p in pods})
    if len(namespaces) > 1:
        raise Ambiguous(
            f"pods named {name}-* exist in several namespaces ({', '.join(namespaces)}): pass --namespace"
        )
    if len(homes := sorted({p.cluster or "(none)" for p in pods})) > 1:
        raise Ambiguous(
            f"pods named {name}-* exist in several clusters ({', '.join(homes)}): pass --cluster"
        )
    return None, pods


def _suggest(index: Index, name: str) -> str:
    import difflib

    names = sorted({e.name for e in index.experiments(limit=5000)})
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    if close:
        return f"; did you mean {', '.join(close)}?"
    if names:
        return (
            f"; known experiments include {', '.join(names[:5])} (`whyjob experiments` lists them)"
        )
    return "; the index holds no experiments yet (`whyjob ingest PATH`)"


def gather(
    index: Index, name: str, namespace: str | None = None, cluster: str | None = None
) -> Scene:
    """The experiment's scene; `cluster` ("" for none named) picks one of several clusters'
    experiments of that name."""
    record, pods = _find(index, name, namespace, cluster)
    if not pods:
        raise NotFound(
            f"no experiment or pods named {name!r} in {index.path}{_suggest(index, name)}"
        )
    ns = record.namespace if record else pods[0].namespace
    home = (record.cluster if record else pods[0].cluster) or None
    times = [t for p in pods for t in (p.created, p.deleted, p.seen) if t is not None]
    if record is not None:
        times += [record.first_seen, record.last_seen]
    scene = Scene(
        name=name,
        namespace=ns,
        cluster=home,
        launcher=record.launcher if record else None,
        recognised_by=record.label if record else "pod name prefix",
        pods=pods,
        t0=min(times) - _MARGIN_BEFORE,
        t1=max(times) + _MARGIN_AFTER,
    )

    def mine(ev: Evidence) -> bool:
        """Its namespace's or nobody's, and its cluster's or nobody's: a shared node's records
        about another tenant's pods, or another cluster's node of the same name, are not ours."""
        return ev.namespace in (None, ns) and ev.cluster in (None, home)

    uids = [p.uid for p in pods]
    for ev in index.pod_evidence(uids, scene.t0, scene.t1):
        scene.by_pod[ev.pod_uid or ""].append(ev)
    by_name = {p.name: p.uid for p in pods}
    for ev in index.entity_evidence("pod", by_name, scene.t0, scene.t1):
        if mine(ev) and ev.pod in by_name:
            scene.by_pod[by_name[ev.pod]].append(ev)
    scene.experiment_records = [
        ev for ev in index.entity_evidence("experiment", [name], scene.t0, scene.t1) if mine(ev)
    ]

    for binding in index.bindings("pod.node", subjects=uids):
        scene.pod_nodes[binding.subject] = binding.object
    for pod in pods:
        if pod.node:
            scene.pod_nodes.setdefault(pod.uid, pod.node)
    nodes = set(scene.pod_nodes.values())
    # Nodes, instances, GPUs and groups are shared by tenants: their records that belong to
    # another namespace's pods are that tenant's, never part of this story (nor its output).
    for ev in index.entity_evidence("node", nodes, scene.t0, scene.t1):
        if mine(ev):
            scene.by_node[ev.node or ""].append(ev)
    for binding in index.bindings("node.instance", subjects=nodes, cluster=home or ""):
        scene.node_instance[binding.subject] = binding.object
    instances = set(scene.node_instance.values())
    for ev in index.entity_evidence("instance_id", instances, scene.t0, scene.t1):
        if mine(ev):
            scene.by_instance[ev.instance_id or ""].append(ev)
    for binding in index.bindings("instance.asg", subjects=instances):
        scene.instance_asg[binding.subject] = binding.object
    for ev in index.entity_evidence("asg", set(scene.instance_asg.values()), scene.t0, scene.t1):
        if mine(ev):
            scene.by_asg[ev.asg or ""].append(ev)
    for binding in index.bindings("gpu.node", objects=nodes, cluster=home or ""):
        scene.node_gpus[binding.object].add(binding.subject)
    pod_names = [f"{ns}/{p.name}" for p in pods]
    for binding in index.bindings("pod.gpu", subjects=pod_names, cluster=home or ""):
        scene.pod_gpus[binding.subject].add(binding.object)
    gpus = {g for group in scene.node_gpus.values() for g in group}
    for ev in index.entity_evidence("gpu_uuid", gpus, scene.t0, scene.t1):
        if mine(ev):
            scene.by_gpu[ev.gpu_uuid or ""].append(ev)

    for bucket in (scene.by_pod, scene.by_node, scene.by_instance, scene.by_gpu, scene.by_asg):
        for records in bucket.values():
            records.sort(key=_order)
            scene.sources.update(ev.source for ev in records)
    scene.experiment_records.sort(key=_order)
    return scene


def log_tail(index: Index, uid: str, container: str, until: int) -> list[Evidence]:
    return index.log_tail(uid, container, until, _LOG_TAIL)
