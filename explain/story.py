"""The experiment's story beyond single attempts: verdict, loop, GPU time, retry advice,
coverage (what could not be checked) and the related timeline."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import pairwise

from whyjob.core.evidence import Evidence, Severity
from whyjob.core.taxonomy import CATEGORIES
from whyjob.core.timeutil import format_duration, format_ts
from whyjob.explain.gather import Scene
from whyjob.explain.model import Attempt, GpuHours, Loop, RetryAdvice, TimelineEntry, Verdict
from whyjob.explain.progress import Mark, marks, progressed

__all__ = [
    "coverage_notes",
    "gpu_hours",
    "loop_headline",
    "loop_state",
    "retry_advice",
    "timeline",
    "verdict",
]

_HOUR_MS = 3_600_000
_LOOP_MIN_FAILURES = 3
_TIMELINE_LIMIT = 5000
_QUIET_KINDS = frozenset(
    {"pod.snapshot", "node.snapshot", "gpu.status", "log.line", "log.progress", "kernel.line"}
)
_INFRA_TRANSIENT = frozenset(
    {
        "node.maintenance",
        "node.spot_interruption",
        "node.scale_in",
        "node.eviction",
        "pod.preempted",
        "node.not_ready",
    }
)


def _roots(attempts: Sequence[Attempt], roots: Sequence[str]) -> list[Attempt]:
    by_id = {a.id: a for a in attempts}
    return [by_id[r] for r in roots if r in by_id]


def _latest_runs(attempts: Sequence[Attempt]) -> list[Attempt]:
    """The newest run of each rank (or pod name) and container: where the job stands now."""
    latest: dict[tuple[str, str], Attempt] = {}
    for a in attempts:
        key = (a.rank or a.pod, a.container)
        when = a.started_at or a.ended_at or 0
        held = latest.get(key)
        if held is None or when >= (held.started_at or held.ended_at or 0):
            latest[key] = a
    return list(latest.values())


def verdict(attempts: Sequence[Attempt], roots: Sequence[str], loop: Loop | None = None) -> Verdict:
    """The latest failure's first domino, and how the experiment ended up. When it failed
    more than once, the summary tells the latest generation's first domino from the first
    failure of all; a restart loop is said before either."""
    if not attempts:
        return Verdict(
            "unknown", "possible", "No runs of this experiment were found.", None, "unknown", "-"
        )
    current = _latest_runs(attempts)
    if any(a.state == "running" for a in current):
        outcome = "running"
    elif any(a.state in ("pending", "waiting") for a in current):
        outcome = "pending"
    elif all(a.category == "job.completed" for a in current):
        outcome = "completed"
    else:
        outcome = "failed"
    failed_roots = [a for a in _roots(attempts, roots) if a.failed]
    if not failed_roots:
        if outcome == "completed":
            return Verdict(
                "job.completed",
                "proven",
                f"Completed: the last run of each of the {len(current)} ranks exited 0.",
                None,
                outcome,
                "-",
            )
        return Verdict(
            "unknown",
            "possible",
            f"No failure found; the experiment is {outcome}.",
            None,
            outcome,
            "-",
        )
    root = failed_roots[-1]
    assert root.category is not None
    failures = len(failed_roots)
    repeated = _repeated_cause(failed_roots)
    headline = f"{loop_headline(loop)} " if loop is not None and loop.looping else ""
    if repeated is not None:
        shown = _repeated_verdict(root, repeated, failed_roots, outcome)
        shown.summary = headline + shown.summary
        return shown
    tail = {
        "completed": " The job then restarted and completed.",
        "running": " The job restarted and is running again.",
        "pending": " The job is waiting to start again.",
        "failed": "",
    }[outcome]
    if failures == 1:
        summary = f"{_who(root).capitalize()} failed first: {_sentence(root.summary)}{tail}"
    else:
        first = failed_roots[0]
        when = f" at {format_ts(first.ended_at)}" if first.ended_at else ""
        summary = (
            f"{headline}In the latest of {failures} failed generations, {_who(root)} failed "
            f"first: {_sentence(root.summary)}{tail} The first failure of all was {_who(first)}{when} "
            f"({first.category})."
        )
    return Verdict(
        category=root.category,
        grade=root.grade or "possible",
        summary=summary,
        root_attempt=root.id,
        outcome=outcome,
        owner=CATEGORIES[root.category].owner,
    )


def _who(attempt: Attempt) -> str:
    return f"rank {attempt.rank}" if attempt.rank else attempt.pod


def _sentence(text: str | None) -> str:
    """A rule's summary ends where its quote ends; the verdict goes on after a full stop."""
    text = text or "no cause was found"
    return text if text.endswith((".", "!", "?")) else f"{text}."


_DOWNGRADE = {"proven": "likely", "likely": "possible", "possible": "possible"}


def _repeated_cause(failed_roots: Sequence[Attempt]) -> Attempt | None:
    """When the newest failure left no evidence of its own (only an exit code, or nothing) but
    every earlier failure died of one and the same cause: the newest run that shows it."""
    root = failed_roots[-1]
    earlier = [a for a in failed_roots[:-1] if a.category != "unknown"]
    if root.category != "unknown" or not earlier or len(earlier) < len(failed_roots) - 1:
        return None
    if len({a.category for a in earlier}) != 1:
        return None
    return earlier[-1]


def _repeated_verdict(
    root: Attempt, shown: Attempt, failed_roots: Sequence[Attempt], outcome: str
) -> Verdict:
    assert shown.category is not None
    before = len(failed_roots) - 1
    earlier = (
        f"the {before} failures before it all died" if before > 1 else "the one before it died"
    )
    summary = (
        f"The last failure ({_who(root)}, run {root.restart}) left no evidence of its own; "
        f"{earlier} of {shown.category}: {shown.summary}"
    )
    return Verdict(
        category=shown.category,
        grade=_DOWNGRADE[shown.grade or "possible"],
        summary=summary,
        root_attempt=shown.id,
        outcome=outcome,
        owner=CATEGORIES[shown.category].owner,
    )


def loop_state(attempts: Sequence[Attempt], roots: Sequence[str]) -> Loop:
    """A loop: at least three failed generations in a row without forward progress, judged by
    the checkpoints each generation loaded and saved and the furthest step any rank logged."""
    failed = [a for a in _roots(attempts, roots) if a.failed]
    if not failed:
        return Loop(False, 0, None, None, None)
    generations = marks(attempts)
    progress = any(progressed(a, b) for a, b in pairwise(generations))
    recent = [m for m in generations if m.failed][-_LOOP_MIN_FAILURES:]
    looping = len(failed) >= _LOOP_MIN_FAILURES and not any(
        progressed(a, b) for a, b in pairwise(recent)
    )
    stuck_at = _reached(recent) if looping else None
    window = None
    if len(failed) >= 2 and failed[0].ended_at and failed[-1].ended_at:
        window = (failed[-1].ended_at - failed[0].ended_at) // 1000
    # A run that left no evidence does not make a loop of one cause "mixed".
    named = [a for a in failed if a.category != "unknown"] or failed
    categories = Counter(a.category for a in named)
    summaries = Counter(a.summary for a in named)
    nodes = Counter(a.node for a in failed if a.node)
    if (
        categories.most_common(1)[0][0] == "node.maintenance"
        and categories["node.maintenance"] >= 2
    ):
        kind = "maintenance_storm"
    elif categories.most_common(1)[0][0] == "startup.unschedulable":
        kind = "unschedulable"
    elif (
        nodes
        and nodes.most_common(1)[0][1] >= 2
        and categories.most_common(1)[0][0] in ("gpu.xid", "node.not_ready")
    ):
        kind = "bad_node"
    elif len(categories) == 1 and (summaries.most_common(1)[0][1] >= 2 or len(failed) >= 2):
        kind = "same_error"
    else:
        kind = "mixed"
    return Loop(
        looping,
        len(failed),
        window,
        kind if len(failed) >= 2 else None,
        progress,
        cause=categories.most_common(1)[0][0],
        stuck_at_step=stuck_at,
    )


def _reached(generations: Sequence[Mark]) -> int | None:
    """How far generations that made no progress got: the checkpoint step they resume from
    and save, or (no checkpoint logged) the furthest step any rank logged."""
    if any(m.checkpointed for m in generations):
        return max(max(m.loaded or -1, m.saved or -1) for m in generations)
    return max((m.furthest for m in generations if m.furthest is not None), default=None)


# What the generations went through, by the loop's kind, then by its cause; any other cause
# reads as its taxonomy meaning after "killed by".
_LOOP_WORDS = {
    "maintenance_storm": "killed by host maintenance",
    "mixed": "killed by different causes",
    "startup.unschedulable": "left unscheduled (no node could take them)",
    "unknown": "killed by failures that left no evidence",
}


def loop_headline(loop: Loop) -> str:
    """'Restart loop: 4 generations killed by host maintenance in 1h 19m, no forward progress
    since step 12000.' — the first thing a reader of a looping experiment needs to know."""
    what = (
        _LOOP_WORDS.get(loop.kind or "")
        or _LOOP_WORDS.get(loop.cause or "")
        or f"killed by {CATEGORIES[loop.cause].meaning if loop.cause in CATEGORIES else 'failures'}"
    )
    window = f" in {format_duration(loop.window_s * 1000)}" if loop.window_s else ""
    if loop.stuck_at_step is not None and loop.stuck_at_step >= 0:
        progress = f"no forward progress since step {loop.stuck_at_step}"
    else:
        progress = "no forward progress between them"
    return f"Restart loop: {loop.restarts} generations {what}{window}, {progress}."


def gpu_hours(attempts: Iterable[Attempt], checkpoint_at: dict[str, int]) -> GpuHours:
    """GPU-hours used by every run, and lost by failed runs since their last checkpoint; each
    failed run keeps its own loss (`gpu_hours_lost`), which the fleet view adds up by node."""
    used = lost = 0.0
    for a in attempts:
        if a.started_at is None or a.ended_at is None or not a.gpus:
            continue
        span = max(0, a.ended_at - a.started_at)
        used += span * a.gpus / _HOUR_MS
        if a.failed:
            since = checkpoint_at.get(a.id, a.started_at)
            a.gpu_hours_lost = max(0, a.ended_at - since) * a.gpus / _HOUR_MS
            lost += a.gpu_hours_lost
    return GpuHours(
        used,
        lost,
        "failed runs: time since their last saved checkpoint (or since start) x GPUs requested",
    )


def retry_advice(
    verdict_: Verdict, attempts: Sequence[Attempt], roots: Sequence[str], loop: Loop
) -> RetryAdvice:
    failed = [a for a in _roots(attempts, roots) if a.failed]
    if not failed:
        return RetryAdvice(None, "nothing failed")
    category = verdict_.category
    same = [a for a in failed if a.category == category]
    if category == "gpu.xid":
        nodes = {a.node for a in same}
        if len(nodes) >= 2:
            return RetryAdvice(
                False,
                f"the same GPU fault class hit {len(nodes)} different nodes: suspect the hardware pool, not the job",
            )
        return RetryAdvice(
            True, f"a GPU fault on {same[-1].node}: retry on other nodes and cordon this one"
        )
    if category in _INFRA_TRANSIENT:
        if loop.kind == "maintenance_storm":
            return RetryAdvice(
                True,
                f"{len(same)} runs were ended by maintenance: retrying helps only on hosts with no maintenance scheduled in the next window",
            )
        return RetryAdvice(
            True, "an infrastructure event ended the run; a retry on healthy capacity can succeed"
        )
    retryable = CATEGORIES[category].retryable
    if retryable is False:
        if len(same) >= 2:
            return RetryAdvice(
                False,
                f"the same {category} ended {len(same)} runs; retrying will fail the same way until the code, config or resources change",
            )
        return RetryAdvice(
            False, f"{category} is a problem in the job itself; fix it before retrying"
        )
    if retryable is True:
        return RetryAdvice(True, f"{category} is usually transient")
    return RetryAdvice(None, f"it depends: {CATEGORIES[category].meaning}")


def coverage_notes(scene: Scene, attempts: Sequence[Attempt]) -> list[str]:
    """What could not be checked because its source was never ingested."""
    notes: list[str] = []
    failed = [a for a in attempts if a.failed]
    nodes = sorted({a.node for a in failed if a.node})
    if not failed:
        return notes
    no_kernel = [
        n for n in nodes if not any(ev.source == "kernel" for ev in scene.by_node.get(n, ()))
    ]
    if no_kernel:
        notes.append(
            f"no kernel log from {_few(no_kernel)}: GPU Xid and OOM-killer lines could not be checked"
        )
    no_dcgm = [
        n
        for n in nodes
        if not scene.node_gpus.get(n) or not any(scene.by_gpu.get(g) for g in scene.node_gpus[n])
    ]
    if no_dcgm:
        notes.append(
            f"no DCGM metrics for {_few(no_dcgm)}: GPU health counters could not be checked"
        )
    cloud = {"aws.asg", "aws.ec2", "aws.eventbridge", "aws.imds", "gce", "azure"}
    if not scene.sources & cloud:
        notes.append(
            "no cloud notices (maintenance, spot, scale-in) were ingested for these instances"
        )
    no_logs = [
        a.id
        for a in failed
        if not any(
            ev.kind.startswith("log.")
            for ev in scene.by_pod.get(a.pod_uid, ())
            if ev.attrs.get("restart") in (None, a.restart)
        )
    ]
    if no_logs:
        notes.append(
            f"no container log for {len(no_logs)} failed run(s): application errors could not be checked"
        )
    return notes


def _few(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _entity(ev: Evidence) -> str:
    if ev.pod:
        return f"pod/{ev.pod}" + (f" [{ev.container}]" if ev.container else "")
    if ev.gpu_uuid:
        return f"gpu/{ev.gpu_uuid}"
    if ev.node:
        return f"node/{ev.node}"
    if ev.instance_id:
        return f"instance/{ev.instance_id}"
    if ev.asg:
        return f"asg/{ev.asg}"
    if ev.experiment:
        return f"experiment/{ev.experiment}"
    return ev.source


def timeline(
    scene: Scene, attempts: Sequence[Attempt], cited: set[str], matched: set[int]
) -> list[TimelineEntry]:
    """Records that bear on the story: cited or matched by a rule, container lifecycle, and
    everything of warning severity or worse; not the bulk (snapshots, plain log lines)."""
    by_pod_run: dict[tuple[str, str, int], str] = {
        (a.pod_uid, a.container, a.restart): a.id for a in attempts
    }
    out: list[TimelineEntry] = []
    for ev in scene.all_records():
        keep = (
            ev.public_id in cited
            or ev.id in matched
            or ev.kind.startswith("container.")
            or (ev.severity >= Severity.WARNING and ev.kind not in _QUIET_KINDS)
            or ev.kind.startswith(("maintenance.", "spot.", "asg.", "instance."))
        )
        if not keep:
            continue
        restart = ev.attrs.get("restart")
        attempt = (
            by_pod_run.get((ev.pod_uid or "", ev.container or "", restart))
            if isinstance(restart, int)
            else None
        )
        out.append(
            TimelineEntry(
                id=ev.public_id,
                at=ev.ts,
                end=ev.ts_end,
                source=ev.source,
                kind=ev.kind,
                severity=int(ev.severity),
                entity=_entity(ev),
                message=ev.message if len(ev.message) <= 500 else ev.message[:497] + "...",
                attempt=attempt,
            )
        )
        if len(out) >= _TIMELINE_LIMIT:
            break
    return out
