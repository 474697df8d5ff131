"""The one writer of a collecting process: batches in, records and checkpoints committed together."""

from __future__ import annotations

import queue
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

from whyjob.collector.admit import REFUSED, Unfit, admit
from whyjob.collector.ingest.base import Item, Rejected
from whyjob.collector.live.health import Health
from whyjob.collector.redaction import quarantine_body, redact_record, redact_text
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.errors import IndexProblem
from whyjob.core.evidence import Evidence
from whyjob.core.index import Index

__all__ = ["Batch", "Sink", "Writer", "checkpoint_key"]

# At most this many items in one transaction.
_MAX_ITEMS: Final = 5000
# Waits for a database another process holds locked (on top of SQLite's own 30 s busy timeout).
_LOCKED_WAITS: Final = (1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(slots=True)
class Batch:
    """What one collector read: items, the checkpoints they advance, and where they came from."""

    collector: str
    origin: str
    items: list[Item] = field(default_factory=list)
    checkpoints: dict[str, str] = field(default_factory=dict)
    done: threading.Event | None = None  # set once the batch is committed


class Sink(Protocol):
    """Where a source hands its batches: the index writer, or an agent's forwarder."""

    def put(self, batch: Batch) -> None: ...


def checkpoint_key(source: str, cluster: str | None) -> str:
    """Where a source's resume point is kept: under its cluster's name when one is set."""
    return f"{cluster}|{source}" if cluster else source


class Writer:
    """Owns the index in a collecting process. Collectors `put` batches from any thread; a
    batch's records and checkpoints are committed in one transaction, in arrival order.

    Group commit: whatever is queued when the writer comes round goes into one transaction,
    so a lone batch is stored at once and a burst shares the cost of a commit. A locked
    database (another writer, a long `whyjob ingest`) is waited out; a record the index
    refuses is quarantined on its own, never taking its batch with it. If the index cannot be
    written at all the writer stops, `failed` says why, and `put` raises instead of blocking.
    """

    def __init__(
        self, index: Index, health: Health, *, max_queue: int = 4, cluster: str | None = None
    ) -> None:
        self.index = index
        self.health = health
        # Several clusters' collectors may write one index: their pods and resume points are
        # their own (records carry the cluster already, from the reader's options).
        self.cluster = cluster
        self._queue: queue.Queue[Batch | None] = queue.Queue(max_queue)
        self._thread = threading.Thread(target=self._run, name="whyjob-writer", daemon=True)
        self.failed: BaseException | None = None

    def start(self) -> Writer:
        self._thread.start()
        return self

    def put(self, batch: Batch) -> None:
        """Queue a batch; blocks while the writer is behind (back-pressure on the sources)."""
        while True:
            if self.failed is not None:
                raise RuntimeError(f"the index writer stopped: {self.failed}") from self.failed
            try:
                self._queue.put(batch, timeout=1.0)
                break
            except queue.Full:
                continue
        self.health.gauge("writer_queue", self._queue.qsize())

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until everything queued so far is committed."""
        marker = threading.Event()
        self.put(Batch("-", "-", done=marker))
        if not marker.wait(timeout):
            raise TimeoutError("the index writer did not catch up")

    def stop(self) -> None:
        if self.failed is None:
            self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    return
                pending, count, last = [first], len(first.items), False
                while count < _MAX_ITEMS:
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        last = True
                        break
                    pending.append(more)
                    count += len(more.items)
                self._commit_with_retry(pending)
                if last:
                    return
        except BaseException as exc:  # the process must learn that nothing is being stored
            self.failed = exc
            self.health.fatal = f"the index writer stopped: {type(exc).__name__}: {exc}"
            self.health.error("writer", f"{type(exc).__name__}: {exc}")
            while True:  # release every producer blocked on a full queue
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break

    def _commit_with_retry(self, batches: list[Batch]) -> None:
        for wait in _LOCKED_WAITS:
            try:
                self._commit(batches)
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                self.health.error(
                    "writer", f"index busy, retrying in {wait:g} s: {exc}", down=False
                )
                time.sleep(wait)
            except REFUSED:
                self._commit_one_by_one(batches)
                return
            except IndexProblem as exc:  # a cluster away or pushing back longer than its retries
                self.health.error(
                    "writer", f"index unavailable, retrying in {wait:g} s: {exc}", down=False
                )
                time.sleep(wait)
        self._commit(batches)  # the last try raises what keeps failing

    def _commit_one_by_one(self, batches: list[Batch]) -> None:
        """Something in these batches is unstorable: store each item alone, quarantine the
        ones the index refuses, keep the checkpoints."""
        for batch in batches:
            kept: list[Item] = []
            for item in batch.items:
                try:
                    if isinstance(item, Evidence | PodRecord | Binding):
                        item = admit(item)  # mend what can be: bad text, a number for a name
                    with self.index.transaction():
                        self._store([Batch(batch.collector, batch.origin, [item])])
                        raise _Rollback
                except _Rollback:
                    kept.append(item)
                except (Unfit, *REFUSED) as exc:
                    kept.append(
                        Rejected(
                            None,
                            f"the index refused this record: {exc}",
                            repr(item)[:4096].encode(),
                        )
                    )
            self._commit([replace(batch, items=kept)])

    def _commit(self, batches: list[Batch]) -> None:
        with self.index.transaction():
            stored = self._store(batches)
        for batch in batches:
            if batch.items:
                self.health.count(batch.collector, "records", _evidence_count(batch.items))
            if batch.done is not None:
                batch.done.set()
        self.health.count("writer", "stored", stored)
        self.health.gauge("writer_queue", self._queue.qsize())

    def _store(self, batches: list[Batch]) -> int:
        evidence: list[Evidence] = []
        pods: list[PodRecord] = []
        bindings: list[Binding] = []
        rejected: list[tuple[Batch, Rejected]] = []
        checkpoints: dict[str, str] = {}
        for batch in batches:
            for item in batch.items:
                if isinstance(item, Evidence):
                    evidence.append(redact_record(item))
                elif isinstance(item, PodRecord):
                    pod = redact_record(item)
                    pod.cluster = pod.cluster or self.cluster
                    pods.append(pod)  # every view: upsert_pods merges them
                elif isinstance(item, Binding):
                    bindings.append(replace(item, cluster=item.cluster or self.cluster))
                else:
                    rejected.append((batch, item))
            checkpoints.update(batch.checkpoints)
        index = self.index
        stored = index.write(evidence) if evidence else 0
        index.upsert_pods(pods)
        index.bind(bindings)
        for batch, bad in rejected:
            where = f"{batch.origin}:{bad.line}" if bad.line is not None else batch.origin
            index.quarantine(
                where, redact_text(bad.reason), quarantine_body(bad.body), batch.collector
            )
        for source, token in checkpoints.items():
            index.set_checkpoint(checkpoint_key(source, self.cluster), token)
        self.health.count("writer", "rejected", len(rejected))
        return stored


class _Rollback(Exception):
    """Undoes a trial insert: it only asked whether the index would take the item."""


def _evidence_count(items: Iterable[Item]) -> int:
    return sum(1 for item in items if isinstance(item, Evidence))
