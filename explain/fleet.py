"""The fleet: the nodes and GPUs that keep killing jobs, across every experiment.

Each experiment's explanation (the one model every surface renders) says which of its runs
failed first and why; the fleet adds those runs up by the node and the GPUs they ran on, with
the GPU-hours of the runs that went down with them (a root's harm includes its collateral).
From the index it reads the faults themselves, whichever job they touched: the same Xid again
on one GPU within a day (a reset or RMA candidate), a node whose hardware fails again after it
came back (a lemon), and preflight init containers that found a bad GPU before the job ran.

Nodes are ordered by harm: hardware-class failures first (they are what an operator can act
on: cordon, reset, RMA), then the GPU-hours lost to causes the infrastructure owns, then runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, fields
from typing import Any, Final

import orjson

from whyjob.core.entities import ExperimentRecord
from whyjob.core.errors import WhyjobError
from whyjob.core.evidence import Evidence
from whyjob.core.index import Index
from whyjob.explain.engine import explain_scene
from whyjob.explain.fleetmodel import (
    HARDWARE,
    ExperimentLoss,
    Fleet,
    GpuHealth,
    InitFailure,
    NodeHealth,
    Run,
)
from whyjob.explain.gather import Scene, gather
from whyjob.explain.matching import Matcher
from whyjob.explain.model import Attempt, Explanation
from whyjob.explain.preflight import FAULTS, node_key, split_node_key
from whyjob.explain.ruleset import RuleSet

__all__ = ["build_fleet", "fleet_window", "pool_and_type"]

_CACHE_KIND: Final = "fleet/v1"
_HOUR_MS: Final = 3_600_000
_DAY_MS: Final = 86_400_000
# Where clouds and provisioners write a node's pool and machine type (their own label keys).
_POOL_LABELS: Final = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "karpenter.sh/provisioner-name",
    "kubernetes.azure.com/agentpool",
    "agentpool",
)
_TYPE_LABELS: Final = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
_HARDWARE_SIGNALS: Final = frozenset(FAULTS) - {"node.not-ready", "gpu.unhealthy"}


def fleet_window(
    index: Index, since: str, until: str | None, *, readable: Callable[[str], bool] | None = None
) -> tuple[int, int]:
    """The window a fleet view covers: `until` (RFC 3339) or the newest sighting of an
    experiment `readable` admits (another tenant's activity is not told, not even its time),
    and `since` as a duration back from it (30d) or a time. ValueError names a bad value."""
    from whyjob.core.timeutil import parse_ts
    from whyjob.explain.ruleset import parse_duration

    if until:
        end = parse_ts(until)
    else:
        newest = index.experiments(limit=1 if readable is None else 1_000_000)
        end = next((r.last_seen for r in newest if readable is None or readable(r.namespace)), 0)
    try:
        return end - parse_duration(since), end
    except ValueError:
        start = parse_ts(since)
    if start >= end:
        raise ValueError(f"--since {since} is not before the end of the window")
    return start, end


def build_fleet(
    index: Index,
    rules: RuleSet,
    *,
    since: int,
    until: int,
    readable: Callable[[str], bool] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> Fleet:
    """The fleet between `since` and `until`, over the experiments whose namespace `readable`
    admits (all when None); the others are counted, never read. `on_progress(done, total)`
    hears of each experiment explained anew (the long part of a first look).

    Each experiment's runs are kept in the index (`derived`, kind fleet/v1) and reused while
    the rules, the experiment's last sighting and every record written since near its time
    span leave them as they were; a writable index stores what was recomputed."""
    fleet = Fleet(since, until)
    cached = index.derived(_CACHE_KIND)
    last = index.last_seq()
    written: dict[int, set[int]] = {}  # seq seen -> the hours written after it
    made: list[tuple[str, str, int, bytes]] = []
    records = index.experiments(limit=1_000_000)
    for done, record in enumerate(records, 1):
        if on_progress is not None:
            on_progress(done, len(records))
        if record.last_seen < since or record.first_seen > until:
            continue
        if readable is not None and not readable(record.namespace):
            fleet.hidden_experiments += 1
            continue
        key = f"{record.namespace}/{record.name}" + (f"@{record.cluster}" if record.cluster else "")
        stamp = f"{rules.version}|{_shape()}|{record.last_seen}"
        document = _still_valid(index, cached.get(key), stamp, last, written)
        if document is None:
            document = _explained(index, rules, record)
            made.append((key, stamp, last, orjson.dumps(document)))
        fleet.experiments.append(ExperimentLoss(**document["experiment"]))
        fleet.runs.extend(
            run for row in document["runs"] if since <= (run := Run(**row)).ended_at <= until
        )
        fleet.init_failures.extend(
            f for row in document["init"] if since <= (f := InitFailure(**row)).at <= until
        )
    if made and not index.readonly:
        with contextlib.suppress(WhyjobError, sqlite3.Error):  # a cache: the answer stands
            index.put_derived(_CACHE_KIND, made)
    gpus = _gpu_faults(index, rules, since, until)
    conditions = [ev for ev in index.fleet_records(since, until) if ev.kind == "node.condition"]
    _tally(fleet, gpus, conditions)
    # By name: a pool label is the same word whichever cluster's node of that name it came from.
    labels = index.node_labels([split_node_key(n.node)[0] for n in fleet.nodes], until)
    for node in fleet.nodes:
        node.pool, node.instance_type = pool_and_type(labels.get(split_node_key(node.node)[0], {}))
    return fleet


@functools.cache
def _shape() -> str:
    """The cached documents' shape and the code that made them: a change of fields or of
    whyjob's version makes every cached one stale."""
    from importlib.metadata import version

    names = [f.name for kind in (ExperimentLoss, Run, InitFailure) for f in fields(kind)]
    return hashlib.sha1(" ".join([version("whyjob"), *names]).encode()).hexdigest()[:8]


def _still_valid(
    index: Index,
    hit: tuple[str, int, bytes] | None,
    stamp: str,
    last: int,
    written: dict[int, set[int]],
) -> dict[str, Any] | None:
    """The cached document, unless the rules, the code or the experiment changed, or records
    written after it fall inside the window its explanation read."""
    if hit is None or hit[0] != stamp:
        return None
    document: dict[str, Any] = orjson.loads(hit[2])
    if hit[1] != last:
        hours = written.get(hit[1])
        if hours is None:
            hours = written[hit[1]] = index.hours_written_after(hit[1])
        t0, t1 = document["window"]
        if any(t0 // _HOUR_MS <= hour <= t1 // _HOUR_MS for hour in hours):
            return None
    return document


def pool_and_type(labels: Mapping[str, str]) -> tuple[str | None, str | None]:
    """A node's pool and machine type, from the labels its cloud or provisioner sets."""
    pool = next((labels[k] for k in _POOL_LABELS if labels.get(k)), None)
    machine = next((labels[k] for k in _TYPE_LABELS if labels.get(k)), None)
    return pool, machine


def _explained(index: Index, rules: RuleSet, record: ExperimentRecord) -> dict[str, Any]:
    scene = gather(index, record.name, record.namespace, record.cluster)
    explanation = explain_scene(scene, rules)
    return {
        "experiment": asdict(_loss(explanation)),
        "runs": [asdict(run) for run in _runs(scene, explanation)],
        "init": [asdict(failure) for failure in _init_failures(scene)],
        # The span the explanation read: a record written later inside it makes this stale.
        "window": [scene.t0, scene.t1],
    }


def _loss(explanation: Explanation) -> ExperimentLoss:
    info, loop = explanation.experiment, explanation.loop
    return ExperimentLoss(
        namespace=info.namespace,
        name=info.name,
        launcher=info.launcher,
        outcome=explanation.verdict.outcome,
        category=explanation.verdict.category,
        first_seen=info.first_seen,
        last_seen=info.last_seen,
        # As `_runs` counts them: a failure with a cause of its own, not a peer's collateral.
        failed_runs=sum(
            a.failed and a.category not in (None, "peer.failure") for a in explanation.attempts
        ),
        gpu_hours_used=explanation.gpu_hours.used,
        gpu_hours_lost=explanation.gpu_hours.lost,
        looping=loop.looping,
        loop_kind=loop.kind,
        restarts=loop.restarts,
        loop_window_s=loop.window_s,
        progress=loop.progress,
        cluster=info.cluster,
    )


def _runs(scene: Scene, explanation: Explanation) -> list[Run]:
    cited: dict[str, Evidence] = {ev.public_id: ev for ev in scene.all_records()}
    followers: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in explanation.attempts:
        if attempt.caused_by:
            followers[attempt.caused_by].append(attempt)
    out = []
    for attempt in explanation.attempts:
        if not attempt.failed or attempt.category in (None, "peer.failure"):
            continue
        if attempt.ended_at is None:
            continue
        records = [cited[e] for e in attempt.evidence if e in cited]
        gpus = sorted({ev.gpu_uuid for ev in records if ev.gpu_uuid})
        xid = next(
            (ev.attrs["xid"] for ev in records if isinstance(ev.attrs.get("xid"), int)), None
        )
        downstream = followers.get(attempt.id, [])
        out.append(
            Run(
                namespace=explanation.experiment.namespace,
                experiment=explanation.experiment.name,
                attempt=attempt.id,
                pod=attempt.pod,
                rank=attempt.rank,
                node=attempt.node,
                gpus=gpus,
                category=attempt.category or "unknown",
                grade=attempt.grade or "possible",
                summary=attempt.summary or "",
                started_at=attempt.started_at,
                ended_at=attempt.ended_at,
                cause_at=next((c.at for c in attempt.causes[:1] if c.at), attempt.ended_at),
                gpu_hours_lost=(attempt.gpu_hours_lost or 0.0)
                + sum(a.gpu_hours_lost or 0.0 for a in downstream),
                collateral=len(downstream),
                xid=xid,
                cluster=scene.cluster,
            )
        )
    return out


def _init_failures(scene: Scene) -> list[InitFailure]:
    out: dict[tuple[str, str], InitFailure] = {}
    for pod in scene.pods:
        for ev in scene.by_pod.get(pod.uid, ()):
            if not ev.attrs.get("init") or not ev.container:
                continue
            exit_code = ev.attrs.get("exit_code")
            reason = str(ev.attrs.get("reason") or "")
            failed = (ev.kind == "container.terminated" and exit_code not in (0, None)) or (
                ev.kind == "container.waiting" and "CrashLoopBackOff" in reason
            )
            if failed and (pod.uid, ev.container) not in out:
                out[(pod.uid, ev.container)] = InitFailure(
                    namespace=pod.namespace,
                    experiment=scene.name,
                    pod=pod.name,
                    container=ev.container,
                    node=_keyed(scene.pod_nodes.get(pod.uid) or pod.node, scene.cluster),
                    gpus=sorted(scene.pod_gpus.get(f"{pod.namespace}/{pod.name}", ())),
                    at=ev.ts,
                    reason=(reason or "Error") + (f", exit code {exit_code}" if exit_code else ""),
                    evidence=ev.public_id,
                )
    return list(out.values())


def _keyed(node: str | None, cluster: str | None) -> str | None:
    """A node as the fleet names it: `node@cluster` where the index holds a cluster's."""
    return node_key(node, cluster) if node else None


def _gpu_key(ev: Evidence) -> str:
    if ev.gpu_uuid:
        return ev.gpu_uuid
    return f"{ev.node or '?'}/{ev.attrs.get('pci') or '?'}"


def _gpu_faults(index: Index, rules: RuleSet, since: int, until: int) -> list[Evidence]:
    """The hardware-class GPU faults of the window, each told once: the kernel log has every
    Xid and DCGM repeats them, so DCGM counts only for nodes the kernel log did not cover."""
    matcher = Matcher(rules)
    faults = [
        ev
        for ev in index.fleet_records(since, until)
        if ev.kind == "gpu.xid" and _HARDWARE_SIGNALS & set(matcher.match(ev))
    ]
    kernel_nodes = {_keyed(ev.node, ev.cluster) for ev in faults if ev.source == "kernel"}
    told: dict[tuple[str, object, int], Evidence] = {}
    for ev in faults:
        if ev.source != "kernel" and _keyed(ev.node, ev.cluster) in kernel_nodes:
            continue
        told.setdefault((_gpu_key(ev), ev.attrs.get("xid"), ev.ts // 60_000), ev)
    return list(told.values())


def _tally(fleet: Fleet, faults: list[Evidence], conditions: list[Evidence]) -> None:
    nodes: dict[str, NodeHealth] = {}
    gpus: dict[str, GpuHealth] = {}

    def node_of(name: str) -> NodeHealth:
        return nodes.setdefault(name, NodeHealth(name))

    for ev in faults:
        host = _keyed(ev.node, ev.cluster)
        gpu = gpus.setdefault(_gpu_key(ev), GpuHealth(_gpu_key(ev), host))
        gpu.node = gpu.node or host
        gpu.faults += 1
        gpu.first_fault = min(gpu.first_fault or ev.ts, ev.ts)
        gpu.last_fault = max(gpu.last_fault or ev.ts, ev.ts)
        if isinstance(code := ev.attrs.get("xid"), int):
            gpu.xids[code] += 1
    for key, gpu in gpus.items():
        times: dict[int, list[int]] = defaultdict(list)
        for ev in faults:
            if _gpu_key(ev) == key and isinstance(ev.attrs.get("xid"), int):
                times[ev.attrs["xid"]].append(ev.ts)
        gpu.repeats = sorted(
            code
            for code, seen in times.items()
            if any(b - a <= _DAY_MS for a, b in itertools.pairwise(sorted(seen)))
        )
        if gpu.node:
            node = node_of(gpu.node)
            node.faults += gpu.faults
            node.xids.update(gpu.xids)
            if gpu.repeats:
                node.repeat_gpus.append(key)
    for run in fleet.runs:
        name = f"{run.namespace}/{run.experiment}" + (f"@{run.cluster}" if run.cluster else "")
        host = _keyed(run.node, run.cluster)
        if host:
            node = node_of(host)
            node.by_cause[run.category] += 1
            node.hardware_runs += run.category in HARDWARE
            node.gpu_hours_lost += run.gpu_hours_lost
            if run.owner in ("infra", "platform"):
                node.infra_gpu_hours_lost += run.gpu_hours_lost
            node.experiments.add(name)
            node.last_failure = max(node.last_failure or run.ended_at, run.ended_at)
        for uuid in run.gpus if run.category in HARDWARE else ():
            gpu = gpus.setdefault(uuid, GpuHealth(uuid, host))
            gpu.runs += 1
            gpu.gpu_hours_lost += run.gpu_hours_lost
            gpu.experiments.add(name)
    for failure in fleet.init_failures:
        if failure.node:
            node_of(failure.node).init_failures += 1
        for uuid in failure.gpus:
            gpus.setdefault(uuid, GpuHealth(uuid, failure.node)).init_failures += 1
    _episodes(nodes, fleet.runs, faults, conditions)
    # Most harm first; ties by name (sorts are stable).
    fleet.nodes = sorted(
        sorted(nodes.values(), key=lambda n: n.node), key=NodeHealth.harm, reverse=True
    )
    fleet.gpus = sorted(
        sorted(gpus.values(), key=lambda g: g.gpu), key=GpuHealth.harm, reverse=True
    )


def _episodes(
    nodes: dict[str, NodeHealth],
    runs: list[Run],
    faults: list[Evidence],
    conditions: list[Evidence],
) -> None:
    """Count each node's NotReady spells and its episodes of hardware trouble (GPU faults and
    runs its hardware ended; a NotReady spell alone may be a maintenance reboot, which the
    explanation of the run it ended tells apart). A new episode starts when the node came back
    Ready after the last trouble, or after a quiet day."""
    trouble: dict[str, list[int]] = defaultdict(list)
    back: dict[str, list[int]] = defaultdict(list)
    for run in runs:
        if run.node and run.category in HARDWARE:
            trouble[node_key(run.node, run.cluster)].append(run.cause_at)
    for ev in faults:
        if ev.node:
            trouble[node_key(ev.node, ev.cluster)].append(ev.ts)
    for ev in conditions:
        if not ev.node or ev.attrs.get("condition") != "Ready":
            continue
        host = node_key(ev.node, ev.cluster)
        if ev.attrs.get("status") == "True":
            back[host].append(ev.ts)
        else:
            nodes.setdefault(host, NodeHealth(host)).not_ready += 1
    for name, times in trouble.items():
        times.sort()
        episodes = 1
        for earlier, later in itertools.pairwise(times):
            returned = any(earlier < t < later for t in back.get(name, ()))
            episodes += returned or later - earlier > _DAY_MS
        nodes.setdefault(name, NodeHealth(name)).episodes = episodes
