"""The restart ledger: one attempt per run of a container, from whatever evidence shows it.

A run is (pod uid, container, restart index). Its termination record gives exit code, reason
and times; a `running` state or its log file shows it started; a waiting reason shows a run
that never started (image pull, config error); a pod with no container status at all is a run
that was never scheduled. Log lines are assigned to the run whose file they came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from whyjob.core.evidence import Evidence
from whyjob.explain.gather import Scene
from whyjob.explain.model import Attempt

__all__ = ["Run", "attempt_id", "build_attempts"]

# Waiting reasons that mean the container never started this run.
_NEVER_STARTED = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "StartError",
    }
)


def attempt_id(pod: str, uid: str, container: str, restart: int) -> str:
    return f"{pod}:{uid[:8]}:{container}:{restart}"


@dataclass(slots=True)
class Run:
    """Facts about one run, collected before it becomes an Attempt."""

    restart: int
    started: int | None = None
    ended: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    state: str = "unknown"
    first_log: int | None = None
    last_log: int | None = None
    last_step: int | None = None
    checkpoint_step: int | None = None
    loaded_step: int | None = None
    end_record: str | None = None
    evidence: list[Evidence] = field(default_factory=list)


def _latest_snapshot(records: list[Evidence]) -> Evidence | None:
    snapshots = [ev for ev in records if ev.kind == "pod.snapshot"]
    return max(snapshots, key=lambda ev: ev.ts) if snapshots else None


def _restart_of(ev: Evidence) -> int | None:
    value = ev.attrs.get("restart")
    return value if isinstance(value, int) else None


def _runs_for(container: str, records: list[Evidence]) -> dict[int, Run]:
    runs: dict[int, Run] = {}
    unplaced: list[Evidence] = []
    for ev in records:
        if ev.container not in (None, container):
            continue
        restart = _restart_of(ev)
        if ev.kind == "container.terminated" and restart is not None:
            run = runs.setdefault(restart, Run(restart))
            run.ended = ev.attrs.get("finished_at") or ev.ts
            run.started = ev.attrs.get("started_at") or run.started
            run.exit_code = ev.attrs.get("exit_code")
            run.signal = ev.attrs.get("signal")
            run.reason = ev.attrs.get("reason")
            run.state = "terminated"
            run.end_record = ev.public_id
        elif ev.kind == "container.running" and restart is not None:
            run = runs.setdefault(restart, Run(restart))
            run.started = run.started or ev.ts
            if run.state != "terminated":
                run.state = "running"
        elif ev.kind == "container.waiting" and ev.attrs.get("reason") in _NEVER_STARTED:
            index = restart if restart is not None else 0
            run = runs.setdefault(index, Run(index))
            if run.state == "unknown":
                run.state = "waiting"
                run.reason = ev.attrs.get("reason")
        elif ev.kind.startswith("log.") and ev.container == container:
            if restart is None:
                unplaced.append(ev)
                continue
            _add_log(runs.setdefault(restart, Run(restart)), ev)
    for ev in unplaced:
        # Plain logs carry no restart index: give each line to the run it falls in.
        target = next(
            (
                r
                for r in sorted(runs.values(), key=lambda r: r.restart)
                if r.ended is None or ev.ts <= r.ended
            ),
            None,
        )
        _add_log(target or runs.setdefault(0, Run(0)), ev)
    return runs


def _add_log(run: Run, ev: Evidence) -> None:
    run.first_log = ev.ts if run.first_log is None else min(run.first_log, ev.ts)
    run.last_log = ev.ts if run.last_log is None else max(run.last_log, ev.ts)
    step = ev.attrs.get("step")
    if isinstance(step, int):
        phase = ev.attrs.get("phase")
        # Loading a checkpoint is not a training step: a run that resumes from step 1000 and
        # dies before its first step has trained nothing.
        if ev.kind == "log.progress" or (ev.kind == "log.checkpoint" and phase != "load"):
            run.last_step = max(run.last_step or 0, step)
        if ev.kind == "log.checkpoint" and phase in ("saved", "save"):
            run.checkpoint_step = max(run.checkpoint_step or 0, step)
        if ev.kind == "log.checkpoint" and phase == "load":
            run.loaded_step = max(run.loaded_step or 0, step)
    if run.state == "unknown":
        run.state = "running"


def build_attempts(scene: Scene) -> list[Attempt]:
    attempts: list[Attempt] = []
    last_logs: dict[str, int] = {}
    for pod in scene.pods:
        records = scene.by_pod.get(pod.uid, [])
        snapshot = _latest_snapshot(records)
        declared = list(snapshot.attrs.get("containers") or []) if snapshot else []
        seen = [
            ev.container
            for ev in records
            if ev.container
            and ev.kind in ("container.terminated", "container.running", "container.waiting")
            and not ev.attrs.get("init")
        ]
        logged = [ev.container for ev in records if ev.container and ev.kind.startswith("log.")]
        containers = list(dict.fromkeys([*declared, *seen, *logged]))
        node = scene.pod_nodes.get(pod.uid) or pod.node
        made = False
        for container in containers:
            runs = _runs_for(container, records)
            for run in sorted(runs.values(), key=lambda r: r.restart):
                attempt = _attempt(scene, pod.uid, container, run, node)
                attempts.append(attempt)
                if run.last_log is not None:
                    last_logs[attempt.id] = run.last_log
                made = True
        if not made:
            # Never ran: unschedulable, or gone before its containers started.
            container = containers[0] if containers else "-"
            state = (
                "pending" if any(ev.kind == "pod.unschedulable" for ev in records) else "unknown"
            )
            attempts.append(_attempt(scene, pod.uid, container, Run(0, state=state), node))
    _fill_times(scene, attempts, last_logs)
    _close_lost_runs(scene, attempts, last_logs)
    _assign_generations(attempts)
    return attempts


def _attempt(scene: Scene, uid: str, container: str, run: Run, node: str | None) -> Attempt:
    pod = next(p for p in scene.pods if p.uid == uid)
    return Attempt(
        id=attempt_id(pod.name, uid, container, run.restart),
        pod=pod.name,
        pod_uid=uid,
        namespace=pod.namespace,
        container=container,
        restart=run.restart,
        rank=pod.rank,
        node=node,
        instance_id=scene.node_instance.get(node) if node else None,
        started_at=run.started or run.first_log,
        ended_at=run.ended,
        exit_code=run.exit_code,
        signal=run.signal,
        reason=run.reason,
        state=run.state,
        last_step=run.last_step,
        last_checkpoint_step=run.checkpoint_step,
        loaded_checkpoint_step=run.loaded_step,
        gpus=pod.gpus,
        end_evidence=run.end_record,
    )


def _fill_times(scene: Scene, attempts: list[Attempt], last_logs: dict[str, int]) -> None:
    """Where a run's end is not recorded, bound it by what is known: the next run's start,
    the last log line, the pod's deletion or its last sighting. A run the kubelet followed
    with another has ended, termination record or not (in a crash loop only the newest dead
    run is in the pod's status): it is diagnosed from its own evidence like any other."""
    pods = {p.uid: p for p in scene.pods}
    by_container: dict[tuple[str, str], list[Attempt]] = {}
    for attempt in attempts:
        by_container.setdefault((attempt.pod_uid, attempt.container), []).append(attempt)
    for group in by_container.values():
        group.sort(key=lambda a: a.restart)
        for current, following in zip(group, [*group[1:], None], strict=True):
            if current.ended_at is not None or (current.state == "running" and following is None):
                continue
            pod = pods[current.pod_uid]
            if following is not None and following.started_at is not None:
                if current.state == "running":
                    current.state = "unknown"
                    # Alive at its last log line; gone before the next run started.
                    current.ended_at = min(
                        last_logs.get(current.id, following.started_at), following.started_at
                    )
                else:
                    current.ended_at = following.started_at
            elif pod.deleted is not None:
                current.ended_at = pod.deleted
            elif current.state in ("waiting", "pending", "unknown"):
                current.ended_at = pod.seen
    for attempt in attempts:
        if attempt.started_at is None and attempt.state in ("waiting", "pending"):
            attempt.started_at = pods[attempt.pod_uid].created


# Records that show a run can no longer be running, though no termination was recorded: the
# pod was deleted or disrupted, or its node or instance went away.
_POD_END_KINDS = frozenset({"pod.deleting", "pod.disruption", "pod.status"})
_POD_END_REASONS = frozenset(
    {"Killing", "NodeNotReady", "TaintManagerEviction", "Evicted", "Preempted", "SpotInterrupted"}
)
_HOST_END_REASONS = frozenset({"NodeNotReady", "DeletingNode", "RemovingNode", "NodeStatusUnknown"})
_HOST_END_KINDS = frozenset(
    {"spot.interruption", "maintenance.host_event", "instance.terminate_notice"}
)


def _ends_run(ev: Evidence, host: bool) -> bool:
    if ev.kind == "k8s.event":
        return ev.attrs.get("reason") in (_HOST_END_REASONS if host else _POD_END_REASONS)
    if host:
        if ev.kind == "node.condition":
            return ev.attrs.get("condition") == "Ready" and ev.attrs.get("status") != "True"
        if ev.kind == "asg.activity":
            return ev.attrs.get("action") == "terminate"
        if ev.kind == "instance.state":
            return ev.attrs.get("state") in ("stopping", "stopped", "shutting-down", "terminated")
        return ev.kind in _HOST_END_KINDS
    return ev.kind in _POD_END_KINDS


def _close_lost_runs(scene: Scene, attempts: list[Attempt], last_logs: dict[str, int]) -> None:
    """A run still shown as running whose pod was since deleted or disrupted, or whose node or
    instance went away, ended without a record: it ended at its last log line, else at the
    first sign of its end. Its state becomes `unknown` so it is diagnosed like any ended run."""
    later_runs = {(a.pod_uid, a.container, a.restart) for a in attempts}
    for attempt in attempts:
        if attempt.state != "running" or attempt.ended_at is not None:
            continue
        start = attempt.started_at or 0
        signals = [
            ev.ts
            for ev in scene.by_pod.get(attempt.pod_uid, ())
            if ev.ts >= start and _ends_run(ev, False)
        ]
        if attempt.node:
            instance = attempt.instance_id or ""
            host = (*scene.by_node.get(attempt.node, ()), *scene.by_instance.get(instance, ()))
            signals.extend(ev.ts for ev in host if ev.ts >= start and _ends_run(ev, True))

        snapshot = _latest_snapshot(scene.by_pod.get(attempt.pod_uid, []))
        if snapshot is not None and snapshot.attrs.get("phase") in ("Failed", "Succeeded"):
            signals.append(snapshot.ts)
        if (attempt.pod_uid, attempt.container, attempt.restart + 1) in later_runs:
            signals.append(start)
        if not signals:
            continue
        # Alive at its last log line; gone by the first sign of its end after that.
        alive = last_logs.get(attempt.id, start)
        after = [ts for ts in signals if ts >= alive]
        attempt.state = "unknown"
        attempt.ended_at = min(after) if after else alive


def _assign_generations(attempts: list[Attempt]) -> None:
    """Runs that overlap in time belong to one generation of the job: a new generation begins
    when a run starts after every earlier run has ended."""
    ordered = sorted(attempts, key=lambda a: (a.started_at or a.ended_at or 0, a.id))
    generation, horizon = -1, None
    for attempt in ordered:
        start = attempt.started_at or attempt.ended_at or 0
        end = attempt.ended_at if attempt.ended_at is not None else float("inf")
        if horizon is None or start > horizon:
            generation += 1
            horizon = end
        else:
            horizon = max(horizon, end)
        attempt.generation = generation
