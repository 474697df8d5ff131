"""Forward progress across generations of a job, judged by what the job itself records.

A generation is every run that overlapped in time (one start of the job). What survives a
restart is a checkpoint, so progress is first judged by checkpoints: the one a generation
resumed from and the last one it saved. A generation that reloads the checkpoint the one
before it reloaded, and saves nothing newer, made no progress however many steps it replayed.
Only when the logs show no checkpoint at all is the furthest step any rank logged compared
(Megatron and others log iterations from one rank only, so the victim rank's own last step is
not the measure), and a checkpoint load is never counted as a step.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from whyjob.explain.model import Attempt

__all__ = ["Mark", "marks", "progressed"]


@dataclass(frozen=True, slots=True)
class Mark:
    """How far one generation got."""

    generation: int
    started: int | None
    loaded: int | None  # the checkpoint step it resumed from (None: no load logged)
    saved: int | None  # the newest checkpoint step it saved
    furthest: int | None  # the furthest training step any of its ranks logged
    failed: bool

    @property
    def checkpointed(self) -> bool:
        return self.loaded is not None or self.saved is not None


def _most(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def marks(attempts: Iterable[Attempt]) -> list[Mark]:
    """One mark per generation, oldest first."""
    by_generation: dict[int, list[Attempt]] = {}
    for attempt in attempts:
        by_generation.setdefault(attempt.generation, []).append(attempt)
    out = []
    for generation, runs in sorted(by_generation.items()):
        out.append(
            Mark(
                generation=generation,
                started=min((a.started_at for a in runs if a.started_at is not None), default=None),
                loaded=_most(a.loaded_checkpoint_step for a in runs),
                saved=_most(a.last_checkpoint_step for a in runs),
                furthest=_most(a.last_step for a in runs),
                failed=any(a.failed and a.category != "peer.failure" for a in runs),
            )
        )
    return out


def progressed(before: Mark, after: Mark) -> bool:
    """Did the later generation get the job further than the earlier one?"""
    if before.checkpointed or after.checkpointed:
        reached = max(before.loaded or -1, before.saved or -1)
        return max(after.loaded or -1, after.saved or -1) > reached
    return (after.furthest or -1) > (before.furthest or -1)
