"""The one writer of a collecting process: batches in, records and checkpoints committed together."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Protocol

from whyjob.collector.ingest.base import Item, Rejected
from whyjob.collector.live.health import Health
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence
from whyjob.core.index import SqliteIndex

__all__ = ["Batch", "Sink", "Writer"]

# The writer commits when this many items wait or this long has passed: big enough for the
# index's batched inserts to pay, short enough that an explanation sees evidence within a second.
_MAX_ITEMS: Final = 5000
_MAX_WAIT_S: Final = 0.5


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


class Writer:
    """Owns the index in a collecting process. Collectors `put` batches from any thread; a
    batch's records and checkpoints are committed in one transaction, in arrival order."""

    def __init__(self, index: SqliteIndex, health: Health, *, max_queue: int = 4) -> None:
        self.index = index
        self.health = health
        self._queue: queue.Queue[Batch | None] = queue.Queue(max_queue)
        self._thread = threading.Thread(target=self._run, name="whyjob-writer", daemon=True)
        self._failed: BaseException | None = None

    def start(self) -> Writer:
        self._thread.start()
        return self

    def put(self, batch: Batch) -> None:
        """Queue a batch; blocks while the writer is behind (back-pressure on the sources)."""
        if self._failed is not None:
            raise RuntimeError("the index writer stopped") from self._failed
        self._queue.put(batch)
        self.health.gauge("writer_queue", self._queue.qsize())

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until everything queued so far is committed."""
        marker = threading.Event()
        self.put(Batch("-", "-", done=marker))
        if not marker.wait(timeout):
            raise TimeoutError("the index writer did not catch up")

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        try:
            while True:
                first = self._queue.get()
                if first is None:
                    return
                pending = [first]
                count = len(first.items)
                deadline = time.monotonic() + _MAX_WAIT_S
                while count < _MAX_ITEMS:
                    try:
                        more = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        break
                    if more is None:
                        self._commit(pending)
                        return
                    pending.append(more)
                    count += len(more.items)
                self._commit(pending)
        except BaseException as exc:  # the process must learn that nothing is being stored
            self._failed = exc
            self.health.error("writer", f"{type(exc).__name__}: {exc}")
            raise

    def _commit(self, batches: list[Batch]) -> None:
        evidence: list[Evidence] = []
        pods: dict[str, PodRecord] = {}
        bindings: list[Binding] = []
        rejected: list[tuple[Batch, Rejected]] = []
        checkpoints: dict[str, str] = {}
        for batch in batches:
            for item in batch.items:
                if isinstance(item, Evidence):
                    evidence.append(item)
                elif isinstance(item, PodRecord):
                    pods[item.uid] = item
                elif isinstance(item, Binding):
                    bindings.append(item)
                else:
                    rejected.append((batch, item))
            checkpoints.update(batch.checkpoints)
        index = self.index
        with index.transaction():
            stored = index.write(evidence) if evidence else 0
            index.upsert_pods(pods.values())
            index.bind(bindings)
            for batch, bad in rejected:
                where = f"{batch.origin}:{bad.line}" if bad.line is not None else batch.origin
                index.quarantine(where, bad.reason, bad.body, batch.collector)
            for source, token in checkpoints.items():
                index.set_checkpoint(source, token)
        for batch in batches:
            if batch.items:
                self.health.count(batch.collector, "records", _evidence_count(batch.items))
            if batch.done is not None:
                batch.done.set()
        self.health.count("writer", "stored", stored)
        self.health.count("writer", "rejected", len(rejected))
        self.health.gauge("writer_queue", self._queue.qsize())


def _evidence_count(items: Iterable[Item]) -> int:
    return sum(1 for item in items if isinstance(item, Evidence))
