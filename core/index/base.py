"""The index contract: what explain, the collectors, the API and the CLI ask of an index.

One backend implements it today (`SqliteIndex`, the embedded default); a backend is chosen by
configuration (`index.backend`), and nothing above core/ names a backend's class except where
one is opened. Times are epoch milliseconds (UTC); every read is bounded by time, so a backend
serves it from an index on (key, time). Writes are idempotent: an evidence id is derived from
the record's source identity, so writing a record twice stores it once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, Self

from whyjob.core.entities import Binding, ExperimentRecord, PodRecord
from whyjob.core.evidence import Evidence

__all__ = ["Index", "QuarantineEntry"]

# (id, at, origin, format, reason, body) of one rejected record.
QuarantineEntry = tuple[int, int, str, str | None, str, bytes | None]


class Index(Protocol):
    path: Path  # where it is (a file, or a backend's display address)
    readonly: bool

    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...
    def transaction(self) -> AbstractContextManager[None]:
        """One atomic write; nested calls join the outer one."""
        ...

    # -- writing ----------------------------------------------------------------------------
    def write(self, records: Iterable[Evidence]) -> int:
        """Store records (with their raw bodies); returns how many were new."""
        ...

    def bind(self, bindings: Iterable[Binding]) -> None:
        """Record entity bindings, widening the time span of ones already known."""
        ...

    def upsert_pods(self, pods: Iterable[PodRecord]) -> None:
        """Merge pod sightings (newest state, widest time) and the experiments they name."""
        ...

    def quarantine(
        self, origin: str, reason: str, body: bytes | None, fmt: str | None = None
    ) -> None: ...
    def record_import(
        self, origin: str, fmt: str, read: int, stored: int, duplicate: int, rejected: int
    ) -> None: ...
    def set_checkpoint(self, source: str, token: str) -> None: ...
    def put_derived(self, kind: str, documents: Iterable[tuple[str, str, int, bytes]]) -> None:
        """Keep documents computed from the evidence: (key, stamp, write counter seen, body)."""
        ...

    def sync_search(self) -> int:
        """Bring full-text search up to date; returns how many records were added."""
        ...

    # -- reading ----------------------------------------------------------------------------
    def checkpoint(self, source: str) -> str | None: ...
    def checkpoints(self, prefix: str = "") -> dict[str, str]: ...
    def get(self, ids: Sequence[int]) -> list[Evidence]: ...
    def raw(self, evidence_id: int) -> bytes | None: ...
    def experiments(
        self,
        name: str | None = None,
        namespace: str | None = None,
        limit: int = 1000,
        *,
        cluster: str | None = None,
    ) -> list[ExperimentRecord]:
        """Newest (last seen) first; `cluster` "" is the experiments no cluster was named for."""
        ...

    def experiment_pods(
        self, name: str, namespace: str, cluster: str | None = None
    ) -> list[PodRecord]: ...
    def pods_named_like(
        self, prefix: str, namespace: str | None = None, cluster: str | None = None
    ) -> list[PodRecord]: ...
    def pod(self, uid: str) -> PodRecord | None: ...
    def pods_on_node(self, node: str, t0: int, t1: int, limit: int = 500) -> list[PodRecord]: ...
    def pod_evidence(self, uids: Sequence[str], t0: int, t1: int) -> list[Evidence]:
        """Everything about these pods in [t0, t1] except plain log lines."""
        ...

    def log_tail(self, uid: str, container: str, until: int, limit: int) -> list[Evidence]: ...
    def entity_evidence(
        self, column: str, values: Iterable[str], t0: int, t1: int
    ) -> list[Evidence]:
        """Records about a node, instance, GPU, ASG, uid-less pod or job object in [t0, t1]."""
        ...

    def bindings(
        self,
        kind: str,
        *,
        subjects: Iterable[str] = (),
        objects: Iterable[str] = (),
        cluster: str | None = None,
    ) -> list[Binding]:
        """The bindings of a kind with these subjects or objects; with `cluster`, only that
        cluster's and those of no cluster ("" for those of no cluster alone)."""
        ...

    def fleet_records(self, t0: int, t1: int) -> list[Evidence]:
        """Every GPU fault and node condition in [t0, t1]."""
        ...

    def node_spans(self, t0: int, t1: int) -> dict[str, tuple[int, int]]: ...
    def node_labels(self, nodes: Iterable[str], until: int) -> dict[str, dict[str, str]]: ...
    def last_seq(self) -> int:
        """A counter that never goes down and grows with stored records: SQLite's highest
        record number given; on Elasticsearch the newest write stamp, held back by a margin so
        that writes other writers have not yet made visible still count as after it."""
        ...

    def hours_written_after(self, seq: int) -> set[int]:
        """The hours (ts // 3,600,000) the records stored after counter `seq` are about: never
        fewer, and on Elasticsearch perhaps a few more (those written within its margin)."""
        ...

    def derived(self, kind: str) -> dict[str, tuple[str, int, bytes]]: ...
    def search(self, query: str, limit: int = 50) -> list[Evidence]: ...

    # -- retention ---------------------------------------------------------------------------
    def expiring(self, cutoffs: Mapping[str, int]) -> dict[str, tuple[int, int | None]]:
        """For each kind, how many of its records are older than its cutoff, and the oldest."""
        ...

    def drop(self, kind: str, before: int, limit: int) -> int:
        """Delete up to `limit` of the oldest records of `kind` older than `before` (with their
        raw bodies and search entries) in one write; returns how many."""
        ...

    def used_bytes(self) -> int:
        """What the records take, free space not counted."""
        ...

    def release_free_pages(self) -> int:
        """Give space freed by deletions back to the file system where the backend can;
        returns how many pages (0 where it cannot: the space is then reused by later writes)."""
        ...

    def search_backlog(self) -> int: ...
    def quarantined(self, limit: int = 100) -> Sequence[QuarantineEntry]: ...
    def counts(self) -> dict[str, int]: ...
    def kinds(self) -> dict[str, int]: ...
    def time_range(self) -> tuple[int | None, int | None]: ...
