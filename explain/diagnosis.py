"""Stateless diagnosis of one pod from pasted evidence (`whyjob diagnose`).

No index, no experiment: the records of one paste are placed around a single attempt's end,
in the order they were pasted (a paste has no trustworthy clock: some lines carry times, most
do not), and the same rules that explain experiments name the cause. When the best cause is a
symptom another rank's failure produces (an NCCL timeout, a launcher's SIGTERM), the
diagnosis says so and what to paste next.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Evidence
from whyjob.core.experiments import EXPERIMENT_KINDS
from whyjob.core.standins import PASTED_CONTAINER, PASTED_NAMESPACE, PASTED_NODE, PASTED_POD
from whyjob.core.taxonomy import CATEGORIES
from whyjob.explain.causes import CauseFinder, Clock, Found
from whyjob.explain.gather import Scene
from whyjob.explain.matching import Matcher
from whyjob.explain.model import Attempt
from whyjob.explain.ruleset import RuleSet

__all__ = ["SCHEMA", "Diagnosis", "diagnose"]

SCHEMA = "whyjob.diagnosis/v1"
_END = 1_772_625_600_000  # a fixed, arbitrary end: a paste's own clocks are not trusted
_SPACING = 10  # ms between consecutive pasted records
# A failure up to this many records before a run's word that it finished still ends it (a
# crash's traceback, then its teardown's farewell); one further back is an error it survived.
_FAREWELL_RECORDS = 20
_FAILED_STATES = ("OOMKilled", "Error", "ContainerStatusUnknown", "StartError")
# Verdicts that are usually another rank's failure seen from this one.
_SYMPTOMS = frozenset({"app.nccl_timeout", "app.nccl_error", "unknown"})


@dataclass(slots=True)
class Diagnosis:
    category: str
    grade: str
    summary: str
    evidence: list[dict[str, str]]
    missing: list[str]
    pod: str | None
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    owner: str = "-"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "category": self.category,
            "grade": self.grade,
            "owner": self.owner,
            "summary": self.summary,
            "pod": self.pod,
            "evidence": self.evidence,
            "missing": self.missing,
            "alternatives": self.alternatives,
        }


def _focus(pods: Sequence[PodRecord], records: Sequence[Evidence]) -> PodRecord | None:
    """The pod to diagnose: a workload's over the cluster's own (`kube-system`, `*-system`: a
    `get pods -A` lists them beside the job), then the one with a failed or stuck container,
    else the one with most records; pasted logs with no pod of their own belong to it."""
    if not pods:
        return None
    trouble = {
        ev.pod_uid
        for ev in records
        if ev.kind
        in (
            "container.waiting",
            "pod.status",
            "pod.unschedulable",
            "pod.disruption",
            "pod.deleting",
        )
        or (ev.kind == "container.terminated" and ev.attrs.get("exit_code") != 0)
    }
    counts: dict[str, int] = {}
    for ev in records:
        if ev.pod_uid:
            counts[ev.pod_uid] = counts.get(ev.pod_uid, 0) + 1
    return max(
        pods,
        key=lambda p: (not _system(p.namespace), p.uid in trouble, counts.get(p.uid, 0)),
    )


def _system(namespace: str) -> bool:
    return namespace.startswith("kube-") or namespace.endswith("-system")


def _ended(records: Sequence[Evidence]) -> Evidence | None:
    """The container end the paste is about: the first that failed, else the last. A sidecar
    that exited 0 after the main container failed (Argo's `wait`) is not it, nor one stopped
    with SIGTERM (143) because another failed; init containers count only when alone."""
    terminated = [ev for ev in records if ev.kind == "container.terminated"]
    main = [ev for ev in terminated if not ev.attrs.get("init")] or terminated
    failed = [ev for ev in main if _failed(ev)]
    if failed:
        # min keeps paste order among equals.
        return min(
            failed,
            key=lambda ev: (
                ev.attrs.get("exit_code") == 143,
                ev.attrs.get("finished_at") is None,
                ev.attrs.get("finished_at") or 0,
            ),
        )
    return main[-1] if main else None


def _failed(ev: Evidence) -> bool:
    code = ev.attrs.get("exit_code")
    return code not in (0, None) or (
        code is None and ev.attrs.get("reason") not in (None, "Completed")
    )


def _state(records: Sequence[Evidence], end: Evidence | None) -> tuple[str, int | None, str | None]:
    if end is not None:
        return "terminated", end.attrs.get("exit_code"), end.attrs.get("reason")
    waiting = [ev for ev in records if ev.kind == "container.waiting"]
    if waiting:
        return "waiting", None, waiting[-1].attrs.get("reason")
    if any(ev.kind == "pod.unschedulable" for ev in records):
        return "pending", None, "Unschedulable"
    return "unknown", None, None


def _named_pods(pods: Sequence[PodRecord], records: Sequence[Evidence]) -> list[PodRecord]:
    """The pods the paste shows: its pod documents, else the pods its events and lines name."""
    known = {p.uid: p for p in pods if p.namespace != PASTED_NAMESPACE}
    for ev in records:
        if (
            ev.pod_uid
            and ev.pod
            and ev.namespace not in (None, PASTED_NAMESPACE)
            and ev.pod_uid not in known
        ):
            known[ev.pod_uid] = PodRecord(ev.pod_uid, ev.namespace or "default", ev.pod, ev.ts)
    return list(known.values())


# What a pod depends on or belongs to: its volume claims, its experiment's object (a training
# job, a JobSet, a Job), its gang (Volcano's PodGroup, Kueue's Workload). Lower case: `kubectl
# get events` prints `persistentvolumeclaim/x`.
_POD_OBJECTS: Final = frozenset(
    {kind.lower() for kind in EXPERIMENT_KINDS} | {"persistentvolumeclaim", "podgroup", "workload"}
)


def _about_the_pod(ev: Evidence, pod: str | None) -> bool:
    """An event about one of the pod's own objects, which names no pod and no node: what it
    says (a claim that could not be provisioned) is the pod's. With a pod in the paste, the
    object's name ties it: a StatefulSet's claim is `<template>-<pod>`, a Job's name begins its
    pods'; with none, the paste is about the job and every such object is its own."""
    if ev.kind != "k8s.event" or ev.node is not None:
        return False
    if str(ev.attrs.get("object_kind") or "").lower() not in _POD_OBJECTS:
        return False
    if pod is None:
        return True
    name = str(ev.attrs.get("object_name") or "")
    return bool(name) and (pod.startswith(name) or name.endswith(pod))


def _node_named(records: Sequence[Evidence], pod_uid: str) -> str | None:
    """The node the paste ties to the pod, else the one its node-level lines name most."""
    for ev in records:
        if ev.pod_uid == pod_uid and ev.node and ev.node != PASTED_NODE:
            return ev.node
    counts = Counter(ev.node for ev in records if ev.node and ev.node != PASTED_NODE)
    return counts.most_common(1)[0][0] if len(counts) == 1 else None


def _same_node(a: str, b: str) -> bool:
    """A journal's host name is the node's first label (`ip-10-0-1-2` of `ip-10-0-1-2.ec2.internal`)."""
    return a == b or a.split(".", 1)[0] == b.split(".", 1)[0]


def diagnose(
    records: Sequence[Evidence],
    pods: Sequence[PodRecord],
    rules: RuleSet,
    undated: int | None = None,
) -> Diagnosis:
    """Diagnose the pasted records; `undated` is the time readers gave lines that had none."""
    named = _named_pods(pods, records)
    known = {p.uid for p in named}
    focus = _focus(named, records) or (pods[0] if pods else None)
    uid = focus.uid if focus else PASTED_NAMESPACE
    namespace = focus.namespace if focus else PASTED_NAMESPACE
    name = focus.name if focus else PASTED_POD
    node = (focus.node if focus else None) or _node_named(records, uid) or PASTED_NODE
    count = len(records)
    placed: list[Evidence] = []
    for number, ev in enumerate(records):
        # Everything pasted is about the one pod and its node, in paste order.
        moved = replace(ev, ts=_END - (count - number) * _SPACING, ts_end=None)
        if (
            ev.pod_uid is not None
            or ev.pod is not None
            or ev.kind.startswith("log.")
            or _about_the_pod(ev, name if focus else None)
        ):
            # A pod the paste does not otherwise show (a uid in a kernel line's cgroup path) is
            # the one pasted about.
            if (
                ev.pod_uid in (uid, None)
                or ev.namespace == PASTED_NAMESPACE
                or ev.pod_uid not in known
            ):
                # One paste, one run: the restart index a record names does not split it.
                attrs = {k: v for k, v in ev.attrs.items() if k != "restart"}
                moved = replace(moved, pod_uid=uid, namespace=namespace, pod=name, attrs=attrs)
                # The stand-in's container is the pod's own; a container a status names is
                # that container (a sidecar's exit is not the run's).
                if ev.namespace == PASTED_NAMESPACE and ev.container == PASTED_CONTAINER:
                    moved = replace(moved, container=None)

        elif ev.node in (None, PASTED_NODE) or node == PASTED_NODE or _same_node(ev.node, node):
            # The pod's node, or a line that does not say which node (dmesg, an instance id);
            # a record that names another node is about that node and stays there.
            moved = replace(moved, node=node, instance_id=None)
        placed.append(moved)
    pod_records = [ev for ev in placed if ev.pod_uid == uid]
    end = _ended(pod_records)
    state, exit_code, reason = _state(pod_records, end)
    if end is not None:
        container = end.container or PASTED_CONTAINER
    else:
        container = next((ev.container for ev in pod_records if ev.container), PASTED_CONTAINER)
    scene = Scene(
        name=name,
        namespace=namespace,
        launcher=None,
        recognised_by="paste",
        pods=[focus] if focus else [],
        t0=_END - 86_400_000,
        t1=_END + 86_400_000,
    )
    for ev in placed:
        if ev.pod_uid == uid:
            scene.by_pod[uid].append(ev if ev.container else replace(ev, container=container))
        elif ev.pod_uid is not None:
            continue  # another pod's: not this pod's story
        elif ev.gpu_uuid:
            scene.by_gpu[ev.gpu_uuid].append(ev)
            scene.node_gpus[ev.node or node].add(ev.gpu_uuid)
        elif ev.node:
            scene.by_node[ev.node].append(ev)
        elif ev.experiment:
            scene.experiment_records.append(ev)
    attempt = Attempt(
        id="pasted", pod=name, pod_uid=uid, namespace=namespace, container=container, restart=0,
        rank=focus.rank if focus else None, node=node, instance_id=None,
        started_at=_END - (count + 1) * _SPACING, ended_at=_END, exit_code=exit_code, signal=None,
        reason=reason, state=state,
    )  # fmt: skip
    shown = {ev.id: (ev.ts if ev.ts != undated else None) for ev in records}
    clock = Clock(shown, shown.get(end.id) if end else None)
    matches = Matcher(rules).match_all(scene.all_records())
    found = CauseFinder(
        rules, scene, matches, clock, skew_ms=0, farewell_ms=_FAREWELL_RECORDS * _SPACING
    ).find(attempt)
    return _verdict(found, placed, records, focus, state, reason)


def _readable(text: str) -> str:
    """Summaries speak of the pod's node, not of the stand-in name the paste reader gave it."""
    for named in (
        f"its node {PASTED_NODE}",
        f"the node {PASTED_NODE}",
        f"node {PASTED_NODE}",
        PASTED_NODE,
    ):
        text = text.replace(named, "the pod's node")
    return text


# What to paste next, by what a paste lacked.
_NEXT: tuple[tuple[tuple[str, ...], str], ...] = (
    (("log.",), "the container's own log (kubectl logs POD --previous, or its traceback)"),
    (
        ("container.", "pod.", "k8s.event"),
        "kubectl describe pod POD (its State, Last State and Events)",
    ),
    (
        ("kernel.", "gpu."),
        "the node's kernel log (dmesg -T or journalctl -k, for Xid, NVRM and OOM lines)",
    ),
)


def _nothing_found(records: Sequence[Evidence], reason: str | None, pod: str | None) -> Diagnosis:
    """No rule named a cause: say what was read and what to paste next."""
    if not records:
        summary = "The paste holds no line whyjob could read as evidence."
    else:
        kinds = Counter(ev.kind.split(".")[0] for ev in records)
        read = ", ".join(
            f"{count} {_KIND_WORDS.get(kind, (kind, kind))[count != 1]}"
            for kind, count in kinds.most_common()
        )
        state = f"; the pod's state is {reason}" if reason else ""
        summary = f"Read {read}{state}, and none of it names a cause."
    lacking = [
        advice
        for prefixes, advice in _NEXT
        if not any(ev.kind.startswith(prefixes) for ev in records)
    ] or [advice for _, advice in _NEXT]
    return Diagnosis(
        "unknown",
        "possible",
        summary,
        [],
        ["no error, termination reason or node notice was found: paste " + "; ".join(lacking)],
        pod,
    )


_KIND_WORDS = {
    "log": ("log line", "log lines"),
    "container": ("container state", "container states"),
    "pod": ("pod record", "pod records"),
    "k8s": ("event", "events"),
    "kernel": ("kernel line", "kernel lines"),
    "node": ("node record", "node records"),
    "gpu": ("GPU record", "GPU records"),
    "launcher": ("launcher report", "launcher reports"),
}


def _verdict(
    found: list[Found],
    placed: list[Evidence],
    original: Sequence[Evidence],
    focus: PodRecord | None,
    state: str,
    reason: str | None,
) -> Diagnosis:
    origin_of = {moved.id: ev for moved, ev in zip(placed, original, strict=True)}
    pod = (
        f"{focus.namespace}/{focus.name}" if focus and focus.namespace != PASTED_NAMESPACE else None
    )
    if not found:
        return _nothing_found(original, reason, pod)
    best = found[0]
    cause = best.cause
    evidence = []
    for hits in best.records.values():
        for ev in hits[:3]:
            source = origin_of.get(ev.id, ev)
            evidence.append(
                {"origin": source.origin or "-", "kind": source.kind, "text": source.message[:500]}
            )
    missing = list(cause.missing)
    if cause.collateral and cause.category in _SYMPTOMS:
        missing.append(
            "this is usually a symptom: another rank or node failed first. Paste the other ranks' logs "
            "(or run `whyjob explain EXPERIMENT` on an index that holds them) to find the first domino"
        )
    summary = _readable(cause.summary)
    return Diagnosis(
        category=cause.category,
        grade=cause.grade,
        summary=summary[0].upper() + summary[1:],
        evidence=evidence,
        missing=[_readable(note) for note in missing],
        pod=pod,
        alternatives=[
            {
                "category": f.cause.category,
                "grade": f.cause.grade,
                "rule": f.cause.rule,
                "summary": _readable(f.cause.summary),
            }
            for f in found[1:5]
            if f.cause.category != cause.category
        ],
        owner=CATEGORIES[cause.category].owner,
    )
