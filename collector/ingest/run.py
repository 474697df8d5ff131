"""`whyjob ingest`: files and folders in, evidence in the index, a count of everything.

Each file is detected, parsed and committed on its own, so a crash or a bad file never costs
the files before it. Every record ends up counted as stored, duplicate (already in the index)
or rejected (kept in the quarantine table with its file, line and reason).
"""

from __future__ import annotations

import gc
import gzip
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whyjob.collector.ingest import detect, podlogs
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence
from whyjob.core.index import SqliteIndex

__all__ = ["FileResult", "IngestSummary", "Ingestor"]

_BATCH = 20_000
_BINARY_PROBE = 8192
_QUARANTINE_LIMIT = 65536


@dataclass(slots=True)
class FileResult:
    """What became of one file."""

    origin: str
    fmt: str
    read: int = 0
    stored: int = 0
    duplicate: int = 0
    rejected: int = 0
    skipped: str | None = None  # why the whole file was passed over (not an error)
    ignored: dict[str, int] = field(default_factory=dict)  # objects of kinds whyjob does not read


@dataclass(slots=True)
class IngestSummary:
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, name: str) -> int:
        return sum(int(getattr(f, name)) for f in self.files)


RejectHook = Callable[[str, str], None]
ProgressHook = Callable[[int, int], None]


def _expand(paths: Sequence[str]) -> Iterator[tuple[str, Path | None, bool]]:
    """(origin, path, named explicitly) for every file under the given paths; "-" is stdin."""
    for raw in paths:
        if raw == "-":
            yield "<stdin>", None, True
            continue
        path = Path(raw)
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    full = Path(root) / name
                    yield str(full), full, False
        else:
            yield raw, path, True


def _binary_reason(data: bytes) -> str | None:
    probe = data[:_BINARY_PROBE]
    nul = probe.find(b"\x00")
    if nul >= 0:
        return f"binary file (NUL byte at offset {nul}); not an export whyjob reads"
    return None


class Ingestor:
    """Imports files into one index. Hooks report rejections and progress as they happen."""

    def __init__(
        self,
        index: SqliteIndex,
        options: IngestOptions,
        *,
        on_reject: RejectHook | None = None,
        on_progress: ProgressHook | None = None,
    ) -> None:
        self.index = index
        self.options = options
        self.on_reject = on_reject
        self.on_progress = on_progress

    # -- files -------------------------------------------------------------------------------

    def ingest(self, paths: Sequence[str]) -> IngestSummary:
        # A parsed export is millions of small objects and parsing makes no cycles: the cyclic
        # collector would walk them all again and again for nothing (20% of an import's time).
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._ingest(paths)
        finally:
            if enabled:
                gc.enable()

    def _ingest(self, paths: Sequence[str]) -> IngestSummary:
        started = time.perf_counter()
        summary = IngestSummary()
        targets = list(_expand(paths))
        total = sum(p.stat().st_size for _, p, _ in targets if p is not None and p.exists())
        done = 0
        for origin, path, explicit in targets:
            if path is None:
                data, mtime = sys.stdin.buffer.read(), int(time.time() * 1000)
            else:
                try:
                    data = path.read_bytes()
                    mtime = int(path.stat().st_mtime * 1000)
                except OSError as exc:
                    result = FileResult(origin, "-", rejected=1)
                    self._reject(
                        Context(origin, self.options),
                        Rejected(None, f"cannot read: {exc.strerror}"),
                        "-",
                    )
                    summary.files.append(result)
                    continue
            summary.files.append(self.ingest_bytes(origin, data, mtime, explicit=explicit))
            done += path.stat().st_size if path is not None else 0
            if self.on_progress:
                self.on_progress(done, total)
        summary.seconds = time.perf_counter() - started
        return summary

    def ingest_bytes(
        self, origin: str, data: bytes, mtime_ms: int | None, *, explicit: bool = True
    ) -> FileResult:
        """Import one file's content. `explicit`: named by the user, so an unknown format is an
        error; files met while walking a folder are skipped instead."""
        if data[:2] == b"\x1f\x8b":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as exc:
                return self._whole_file_rejected(origin, f"damaged gzip file: {exc}", data)
        hints = podlogs.pod_from_path(origin)
        if not hints and (node := podlogs.node_from_path(origin)):
            hints = {"node": node}
        ctx = Context(origin, self.options, mtime_ms, hints)
        if reason := _binary_reason(data):
            if not explicit:
                return FileResult(origin, "-", skipped=reason)
            return self._whole_file_rejected(origin, reason, data)
        fmt, items = detect.read(ctx, data)
        result = FileResult(origin, fmt)
        if items is None:
            if explicit:
                return self._whole_file_rejected(origin, fmt, data)
            result.fmt, result.skipped = "-", fmt
            return result
        self._consume(ctx, items, result)
        result.ignored = dict(ctx.skipped)
        self.index.record_import(
            origin, result.fmt, result.read, result.stored, result.duplicate, result.rejected
        )
        return result

    def _whole_file_rejected(self, origin: str, reason: str, data: bytes) -> FileResult:
        ctx = Context(origin, self.options)
        self._reject(ctx, Rejected(None, reason, data[:4096]), "-")
        return FileResult(origin, "-", read=1, rejected=1)

    # -- storing -----------------------------------------------------------------------------

    def _consume(self, ctx: Context, items: Iterator[Item], result: FileResult) -> None:
        batch: list[Evidence] = []
        pods: dict[str, PodRecord] = {}
        # (kind, subject, object) -> [first_ts, last_ts, attrs]: merged in place, built once.
        spans: dict[tuple[str, str, str], list[Any]] = {}
        for item in items:
            if isinstance(item, Evidence):
                batch.append(item)
                if len(batch) >= _BATCH:
                    self._flush(batch, result)
            elif isinstance(item, Binding):
                key = (item.kind, item.subject, item.object)
                span = spans.get(key)
                if span is None:
                    spans[key] = [item.first_ts, item.last_ts, item.attrs]
                else:
                    span[0] = min(span[0], item.first_ts)
                    span[1] = max(span[1], item.last_ts)
                    span[2] = item.attrs or span[2]
            elif isinstance(item, PodRecord):
                pods[item.uid] = _merge_pod(pods.get(item.uid), item)
            else:
                result.read += 1
                result.rejected += 1
                self._reject(ctx, item, result.fmt)
        self._flush(batch, result)
        self.index.upsert_pods(pods.values())
        self.index.bind(Binding(k, s, o, f, last, a) for (k, s, o), (f, last, a) in spans.items())

    def _flush(self, batch: list[Evidence], result: FileResult) -> None:
        if not batch:
            return
        stored = self.index.write(batch)
        result.read += len(batch)
        result.stored += stored
        result.duplicate += len(batch) - stored
        batch.clear()

    def _reject(self, ctx: Context, item: Rejected, fmt: str) -> None:
        where = ctx.where(item.line)
        body = item.body[:_QUARANTINE_LIMIT] if item.body is not None else None
        self.index.quarantine(where, item.reason, body, fmt)
        if self.on_reject:
            self.on_reject(where, item.reason)


def _merge_pod(old: PodRecord | None, new: PodRecord) -> PodRecord:
    if old is None:
        return new
    newer, older = (new, old) if new.seen >= old.seen else (old, new)
    for name in PodRecord.__slots__:
        if getattr(newer, name) in (None, {}) and getattr(older, name) not in (None, {}):
            setattr(newer, name, getattr(older, name))
    if old.created is not None and new.created is not None:
        newer.created = min(old.created, new.created)
    return newer
