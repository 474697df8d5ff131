"""First-domino analysis across ranks, and the causal chain from root to effect.

In synchronous training one failure takes every rank down, and most ranks then show only a
secondary symptom (an NCCL watchdog timeout, a SIGTERM from the launcher). Within one
generation of the job, the attempt whose own root evidence came first, and is not itself such
a symptom, is the first domino; the ranks that died after it of a symptom, or of nothing
whyjob can name, are `peer.failure` pointing at it. When every rank shows only a symptom, the
earliest one is the root.
"""

from __future__ import annotations

from collections.abc import Iterable

from whyjob.core.evidence import Evidence
from whyjob.core.timeutil import format_duration
from whyjob.explain.causes import Found
from whyjob.explain.model import Attempt, Cause, ChainStep

__all__ = ["build_chain", "first_dominoes"]

# A peer that ended this long before the root's evidence cannot have been caused by it.
_SKEW_MS = 15_000


def _failure_time(attempt: Attempt, found: Found | None) -> int:
    """When the failure hit the run: its root evidence if that fell during the run (the Xid,
    the first error line); else the earliest evidence of the cause during the run (the node
    going NotReady under a maintenance announced days ahead); else the run's recorded end,
    which a kubelet coming back after a reboot may stamp minutes late."""
    start = attempt.started_at or 0
    end = attempt.ended_at or attempt.started_at or 0
    if found is None:
        return end
    at = found.cause.at
    if at is not None and start <= at <= end:
        return at
    during = [ev.ts for hits in found.records.values() for ev in hits if start <= ev.ts <= end]
    return min(during) if during else end


def _rank_name(attempt: Attempt) -> str:
    return f"rank {attempt.rank}" if attempt.rank else attempt.pod


def _independent(attempt: Attempt, cause: Cause | None) -> bool:
    """A failure with a cause of its own, not a symptom another rank's failure can cause."""
    return cause is not None and not cause.collateral and attempt.category != "unknown"


def first_dominoes(attempts: list[Attempt], best: dict[str, Found]) -> list[str]:
    """Point symptom failures at the first domino; returns the root attempt ids, oldest first.

    A failed attempt showing only a symptom (or no cause at all) is collateral of the earliest
    root of another rank that failed while it was running. Roots are the attempts with a cause
    of their own, plus symptoms with no earlier root to point at (every rank timed out: the
    first to fail is the root).
    """
    cause_of = {a.id: best[a.id].cause if a.id in best else None for a in attempts}
    hit = {a.id: _failure_time(a, best.get(a.id)) for a in attempts if a.failed}
    failed = sorted(
        (a for a in attempts if a.failed), key=lambda a: (hit[a.id], a.ended_at or 0, a.id)
    )
    roots = [a for a in failed if _independent(a, cause_of[a.id])]
    for attempt in failed:
        cause = cause_of[attempt.id]
        if _independent(attempt, cause):
            continue
        start = (attempt.started_at or attempt.ended_at or 0) - _SKEW_MS
        end = (attempt.ended_at or hit[attempt.id]) + _SKEW_MS
        candidates = [
            root
            for root in roots
            if (root.pod_uid, root.container) != (attempt.pod_uid, attempt.container)
            and start <= hit[root.id] <= end
            # Deleting a whole job deletes every pod: each one was deleted, none failed.
            and not (root.category == attempt.category == "pod.deleted")
        ]
        if not candidates:
            roots.append(attempt)
            continue
        root = min(candidates, key=lambda r: (hit[r.id], r.id))
        _mark_collateral(attempt, cause, root, hit[root.id])
    roots.sort(key=lambda a: (hit[a.id], a.id))
    for root in roots:
        if not _independent(root, cause_of[root.id]):
            _flag_near_ties(root, [a for a in failed if a.caused_by == root.id], hit)
    return [a.id for a in roots]


def _flag_near_ties(root: Attempt, followers: list[Attempt], hit: dict[str, int]) -> None:
    """A symptom root (every rank timed out) is only first by its clock: when others failed
    within the skew that clocks of different nodes show, say which came first is uncertain."""
    close = [a for a in followers if a.node != root.node and hit[a.id] - hit[root.id] <= _SKEW_MS]
    if not close:
        return
    root.grade = "possible"
    spread = format_duration(max(hit[a.id] for a in close) - hit[root.id])
    root.missing.append(
        f"{_rank_name(root)} failed first by its own clock, but {_few([_rank_name(a) for a in close])} "
        f"failed within {spread} on other nodes, closer than node clocks can be trusted to agree: "
        "which of them stopped first is uncertain (compare the collective's SeqNum in each rank's "
        "NCCL timeout: the rank that never entered it is the one to look at)"
    )


def _few(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _mark_collateral(attempt: Attempt, cause: Cause | None, root: Attempt, root_time: int) -> None:
    attempt.caused_by = root.id
    attempt.category = "peer.failure"
    attempt.grade = "likely"
    lag = format_duration(max(0, (attempt.ended_at or root_time) - root_time))
    symptom = cause.summary if cause is not None else "ended with no cause of its own"
    attempt.summary = (
        f"collateral: {_rank_name(root)} failed first ({root.category}), {lag} before this run "
        f"ended; this run {symptom[0].lower()}{symptom[1:]}"
    )
    if root.evidence:
        attempt.evidence = list(dict.fromkeys([*attempt.evidence, *root.evidence[:3]]))


def build_chain(root: Attempt, found: Found | None, attempts: Iterable[Attempt]) -> list[ChainStep]:
    """Root evidence -> what it set off -> the root attempt's end -> the collateral ranks."""
    steps: list[ChainStep] = []
    after: list[ChainStep] = []
    ended = [root.end_evidence] if root.end_evidence else root.evidence[:3]
    if found is not None:
        records: dict[int, Evidence] = {}
        for hits in found.records.values():
            for ev in hits[:3]:
                records[ev.id] = ev
        ordered = sorted(records.values(), key=lambda ev: ev.ts)
        for number, ev in enumerate(ordered):
            if ev.kind == "container.terminated" and ev.pod_uid == root.pod_uid:
                ended = [ev.public_id]
                continue
            # A record seen only after the run ended (a DCGM counter scraped later, a
            # reason event) backs the cause up; it did not lead to the end.
            late = number > 0 and root.ended_at is not None and ev.ts > root.ended_at + _SKEW_MS
            (after if late else steps).append(
                ChainStep(
                    at=ev.ts,
                    role="corroborates" if late else ("root" if number == 0 else "intermediate"),
                    summary=ev.message,
                    evidence=[ev.public_id],
                    attempt=root.id,
                )
            )
    end = len(steps)
    steps.append(
        ChainStep(
            at=root.ended_at,
            role="intermediate" if steps else "root",
            summary=f"{_rank_name(root)} ({root.pod}) ended"
            + (f" with exit code {root.exit_code}" if root.exit_code is not None else "")
            + (f" ({root.reason})" if root.reason and root.reason not in ("Error",) else ""),
            evidence=ended,
            attempt=root.id,
        )
    )
    collateral = sorted(
        (a for a in attempts if a.caused_by == root.id), key=lambda a: a.ended_at or 0
    )
    if collateral:
        names = ", ".join(_rank_name(a) for a in collateral)
        steps.append(
            ChainStep(
                at=collateral[0].ended_at,
                role="effect",
                summary=f"{names} then failed as collateral"
                + (f" ({len(collateral)} runs)" if len(collateral) > 1 else ""),
                evidence=[e for a in collateral for e in a.evidence[:1]],
                attempt=None,
            )
        )
    else:
        steps[-1].role = "effect" if len(steps) > 1 else "root"
    return [*steps[: end + 1], *after, *steps[end + 1 :]]
