"""Retention: how long each kind of record is kept, by age and by the index's size.

Off unless the config file has a `retention:` section: whyjob never drops evidence nobody asked
it to. Each record kind is kept for the duration of its longest matching prefix in `kinds`, else
`default` (`off` keeps forever); when the index is over `max_size`, the kinds kept the shortest
lose their oldest records first. Terminations, notices and GPU faults are what a story rests on
weeks later; progress lines and metric samples are not, so a sensible policy keeps the first far
longer (docs/configuration.md has one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from whyjob.core.configfile import ConfigFile
from whyjob.core.index.base import Index

__all__ = ["RETENTION_KEYS", "Policy", "Pruned", "load_policy", "plan", "prune"]

# The kinds of core/configfile.py; `kinds` maps record-kind prefixes to a duration or off.
RETENTION_KEYS: Final[Mapping[str, tuple[str, Any]]] = {
    "default": ("duration|off", 0.0),
    "kinds": ("kinds", {}),
    "max_size": ("size|off", 0),
    "interval": ("duration", 3600.0),
    "batch": ("int", 5000),
}


@dataclass(frozen=True, slots=True)
class Policy:
    default_ms: int | None = None  # None: kept forever
    kinds: tuple[tuple[str, int | None], ...] = ()  # (kind prefix, keep ms or None), longest first
    max_bytes: int | None = None
    interval_s: float = 3600.0
    batch: int = 5000
    configured: bool = field(default=False)

    def keep_ms(self, kind: str) -> int | None:
        """How long records of `kind` are kept (None: forever)."""
        return next((ms for prefix, ms in self.kinds if kind.startswith(prefix)), self.default_ms)

    def cutoffs(self, kinds: Iterable[str], now: int) -> dict[str, int]:
        """For each kind that expires, the time before which its records go."""
        out = {}
        for kind in kinds:
            keep = self.keep_ms(kind)
            if keep is not None:
                out[kind] = now - keep
        return out


def load_policy(path: Path | None) -> Policy:
    """The `retention:` section of the config file (an absent one keeps everything)."""
    if path is None:
        return Policy()
    f = ConfigFile(path)
    node = f.top.get("retention")
    if node is None or node.value is None:
        return Policy()
    values = f.section(node, RETENTION_KEYS, "retention")
    kinds = [
        (prefix, None if keep is None else int(keep * 1000))
        for prefix, keep in values["kinds"].items()
    ]
    default = values["default"]
    return Policy(
        default_ms=int(default * 1000) if default else None,
        kinds=tuple(sorted(kinds, key=lambda k: -len(k[0]))),
        max_bytes=values["max_size"] or None,
        interval_s=values["interval"],
        batch=values["batch"],
        configured=True,
    )


@dataclass(slots=True)
class Pruned:
    """What one round of retention dropped, kind by kind."""

    by_age: dict[str, int] = field(default_factory=dict)
    by_size: dict[str, int] = field(default_factory=dict)
    freed_pages: int = 0

    @property
    def total(self) -> int:
        return sum(self.by_age.values()) + sum(self.by_size.values())


def plan(index: Index, policy: Policy, now: int) -> dict[str, tuple[int, int | None]]:
    """What a round would drop by age now: kind -> (records, the oldest one's time)."""
    if not policy.configured:
        return {}
    return index.expiring(policy.cutoffs(index.kinds(), now))


def _drop_for_size(
    index: Index,
    policy: Policy,
    limit: int,
    now: int,
    done: Pruned,
    stop: Callable[[], bool],
) -> None:
    """Over `limit`, drop about as many records as the excess takes (at the index's average
    size a record), shortest-kept kinds first, oldest first, then stop.

    The count is worked out once, not by watching the size fall: SQLite frees space only as
    whole pages empty, and Elasticsearch only as segments merge, so a loop until the size is
    under the limit would drop far more than the excess (every kind that expires). A round
    that leaves the index still over, because the freed space has not shown yet, is followed
    by another at the next interval.
    """
    used = index.used_bytes()
    if used <= limit:
        return
    counts = index.kinds()
    records = sum(counts.values())
    if not records:
        return
    need = -(-(used - limit) * records // used)  # ceil(excess / (used / records))
    # Shortest-kept kinds first; kinds kept forever are never dropped for size.
    order = sorted(
        (k for k in counts if policy.keep_ms(k) is not None),
        key=lambda k: (policy.keep_ms(k) or 0, k),
    )
    for kind in order:
        while need > 0 and not stop():
            dropped = index.drop(kind, now, min(policy.batch, need))
            if not dropped:
                break
            need -= dropped
            done.by_size[kind] = done.by_size.get(kind, 0) + dropped


def prune(
    index: Index, policy: Policy, now: int, *, stop: Callable[[], bool] = lambda: False
) -> Pruned:
    """One round: drop what has expired, then, over `max_size`, about the excess in the oldest
    records of the kinds kept the shortest; a batch at a time (each its own short write, so collectors and
    readers wait for none), then give free pages back to the file where the index allows."""
    done = Pruned()
    if not policy.configured:
        return done
    for kind, before in sorted(policy.cutoffs(index.kinds(), now).items()):
        while not stop() and (dropped := index.drop(kind, before, policy.batch)):
            done.by_age[kind] = done.by_age.get(kind, 0) + dropped
    if policy.max_bytes is not None and not stop():
        _drop_for_size(index, policy, policy.max_bytes, now, done, stop)
    if done.total:
        done.freed_pages = index.release_free_pages()
    return done
