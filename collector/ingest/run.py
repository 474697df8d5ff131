"""`whyjob ingest`: files and folders in, evidence in the index, a count of everything.

Each file is detected, parsed and committed on its own, so a crash or a bad file never costs
the files before it. Every record ends up counted as stored, duplicate (already in the index)
or rejected (kept in the quarantine table with its file, line and reason).
"""

from __future__ import annotations

import gc
import os
import re
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from whyjob.collector.admit import REFUSED, Unfit, admit, mend
from whyjob.collector.ingest import detect, podlogs
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.collector.redaction import quarantine_body, redact_record, redact_text
from whyjob.core import telemetry
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence
from whyjob.core.index import Index

__all__ = ["FileResult", "IngestSummary", "Ingestor"]

_BATCH = 20_000
_Stored = TypeVar("_Stored", Evidence, PodRecord, Binding)
_BINARY_PROBE = 8192


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
    cut: int = 0  # lines longer than ingest.max_line, cut and kept with a marker
    unreadable: bool = False  # rejected whole: not read, not recognised, or over a limit
    ignored: dict[str, int] = field(default_factory=dict)  # objects of kinds whyjob does not read


@dataclass(slots=True)
class IngestSummary:
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    def total(self, name: str) -> int:
        return sum(int(getattr(f, name)) for f in self.files)

    @property
    def exit_code(self) -> int:
        """0: every record stored; 1: some records rejected (the rest stored); 3: a file
        could not be read at all, or no file held anything whyjob recognises."""
        if self.total("unreadable") or not any(f.fmt != "-" for f in self.files):
            return 3
        return 1 if self.total("rejected") else 0


RejectHook = Callable[[str, str], None]
# (bytes of the files done, bytes of all files, the file being read, its records so far):
# called as each file starts and ends and after every batch, so a big file shows its records
# moving while the bar by bytes waits for it to end.
ProgressHook = Callable[[int, int, str, int], None]


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
    """Why the file is binary, or None for text. A file is binary when, once runs of NUL bytes
    are set aside (a block a crash left zeroed in a log), more than a tenth of what is left is
    not text: bytes that are not UTF-8, or control bytes. A torn line costs only itself."""
    probe = data[:_BINARY_PROBE]
    if not probe:
        return None
    rest = _NUL_RUNS.sub(b"", probe).decode("utf-8", "replace")
    bad = rest.count("\ufffd") + sum(rest.count(chr(c)) for c in _CONTROL_BYTES)
    if not rest or bad * 10 > len(rest):
        nul = probe.find(b"\x00")
        at = f" (NUL byte at offset {nul})" if nul >= 0 else ""
        return f"binary file{at}; not an export whyjob reads"
    return None


_NUL_RUNS = re.compile(rb"\x00+")
# Bytes that text never holds (not NUL, tab, newline, carriage return, form feed or escape).
_CONTROL_BYTES = (*range(1, 9), 11, *range(14, 27), *range(28, 32))


def _gunzip(data: bytes, limit: int) -> bytes | str:
    """The inflated bytes of a gzip file (every member), or why not: damaged, or inflating
    past `limit` (a zip bomb: a megabyte that inflates to a gigabyte)."""
    out = bytearray()
    rest = data
    while rest:
        inflater = zlib.decompressobj(wbits=31)
        try:
            while True:
                out += inflater.decompress(rest, limit + 1 - len(out))
                if len(out) > limit:
                    return (
                        f"gzip file inflates past {limit:,} bytes (ingest.max_inflated); not read"
                    )
                rest = inflater.unconsumed_tail
                if inflater.eof or not rest:
                    break
        except zlib.error as exc:
            return f"damaged gzip file: {exc}"
        if not inflater.eof:
            return "damaged gzip file: it ends in the middle of the data"
        rest = inflater.unused_data.lstrip(b"\x00")  # members may follow; padding may too
    return bytes(out)


class Ingestor:
    """Imports files into one index. Hooks report rejections and progress as they happen."""

    def __init__(
        self,
        index: Index,
        options: IngestOptions,
        *,
        on_reject: RejectHook | None = None,
        on_progress: ProgressHook | None = None,
    ) -> None:
        self.index = index
        self.options = options
        self.on_reject = on_reject
        self.on_progress = on_progress
        self._at = (0, 0)  # bytes done before the current file, bytes of all files

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
                    result = FileResult(origin, "-", rejected=1, unreadable=True)
                    self._reject(
                        Context(origin, self.options),
                        Rejected(None, f"cannot read: {exc.strerror}"),
                        "-",
                    )
                    summary.files.append(result)
                    continue
            self._at = (done, total)
            if self.on_progress:
                self.on_progress(done, total, origin, 0)
            with telemetry.span("whyjob.ingest.file", file=origin, bytes=len(data)) as current:
                result = self.ingest_bytes(origin, data, mtime, explicit=explicit)
                if current is not None:
                    current.set_attributes(
                        {"format": result.fmt, "stored": result.stored, "rejected": result.rejected}
                    )
            summary.files.append(result)
            done += path.stat().st_size if path is not None else 0
            if self.on_progress:
                self.on_progress(done, total, origin, result.read)
        summary.seconds = time.perf_counter() - started
        return summary

    def ingest_bytes(
        self, origin: str, data: bytes, mtime_ms: int | None, *, explicit: bool = True
    ) -> FileResult:
        """Import one file's content. `explicit`: named by the user, so an unknown format is an
        error; files met while walking a folder are skipped instead."""
        if data[:2] == b"\x1f\x8b":
            inflated = _gunzip(data, self.options.limits.inflated_bytes)
            if isinstance(inflated, str):
                return self._whole_file_rejected(origin, inflated, data)
            data = inflated
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
        result.cut = ctx.cut_lines
        self.index.record_import(
            origin, result.fmt, result.read, result.stored, result.duplicate, result.rejected
        )
        return result

    def _whole_file_rejected(self, origin: str, reason: str, data: bytes) -> FileResult:
        ctx = Context(origin, self.options)
        self._reject(ctx, Rejected(None, reason, data[:4096]), "-")
        return FileResult(origin, "-", read=1, rejected=1, unreadable=True)

    # -- storing -----------------------------------------------------------------------------

    def _consume(self, ctx: Context, items: Iterator[Item], result: FileResult) -> None:
        batch: list[Evidence] = []
        pods: dict[str, PodRecord] = {}
        # (kind, subject, object) -> [first_ts, last_ts, attrs]: merged in place, built once.
        spans: dict[tuple[str, str, str], list[Any]] = {}
        for item in items:
            if isinstance(item, Evidence):
                batch.append(redact_record(item))
                if len(batch) >= _BATCH:
                    self._flush(batch, result)
            elif isinstance(item, Binding | PodRecord):
                try:
                    _gather(
                        redact_record(item) if isinstance(item, PodRecord) else item, pods, spans
                    )
                except TypeError as exc:  # a name that is not text, a time that is not a number
                    self._refuse(item, str(exc), result)
            else:
                result.read += 1
                result.rejected += 1
                self._reject(ctx, item, result.fmt)
        self._flush(batch, result)
        cluster = self.options.cluster  # whose node and pod names these are
        bindings = [
            Binding(k, s, o, f, last, a, cluster) for (k, s, o), (f, last, a) in spans.items()
        ]
        for pod in pods.values():  # the cluster the records are stamped with owns the pods
            pod.cluster = pod.cluster or self.options.cluster
        self._store(self.index.upsert_pods, list(pods.values()), result)
        self._store(self.index.bind, bindings, result)

    def _flush(self, batch: list[Evidence], result: FileResult) -> None:
        if not batch:
            return
        batch[:], stored = self._store(self.index.write, batch, result)
        result.read += len(batch)
        result.stored += stored
        result.duplicate += len(batch) - stored
        batch.clear()
        if self.on_progress:
            self.on_progress(*self._at, result.origin, result.read)

    def _store(
        self,
        store: Callable[[list[_Stored]], int | None],
        records: list[_Stored],
        result: FileResult,
    ) -> tuple[list[_Stored], int]:
        """Store a batch: refused as a whole, its records are mended and stored again; refused
        still (a value mending cannot fix, as a term too long for Elasticsearch), one at a
        time, the refused ones rejected alone. Returns what was kept and how many were new."""
        try:
            return records, store(records) or 0
        except REFUSED:
            records = self._admitted(records, result)
        try:
            return records, store(records) or 0
        except REFUSED:
            kept, stored = [], 0
            for record in records:
                try:
                    stored += store([record]) or 0
                except REFUSED as exc:
                    self._refuse(record, str(exc), result)
                    continue
                kept.append(record)
            return kept, stored

    def _admitted(self, records: Iterable[_Stored], result: FileResult) -> list[_Stored]:
        """The records the index refused as a batch, mended one by one; the unmendable are
        rejected alone, with the field that was wrong."""
        kept = []
        for record in records:
            try:
                kept.append(admit(record))
            except Unfit as exc:
                self._refuse(record, str(exc), result)
        return kept

    def _refuse(self, record: Evidence | PodRecord | Binding, why: str, result: FileResult) -> None:
        result.read += 1
        result.rejected += 1
        body = repr(record)[:4096].encode("utf-8", "backslashreplace")
        origin = getattr(record, "origin", None) or result.origin
        self._reject(
            Context(origin, self.options),
            Rejected(None, f"the index cannot store this record: {why}", body),
            result.fmt,
        )

    def _reject(self, ctx: Context, item: Rejected, fmt: str) -> None:
        where = mend(ctx.where(item.line))
        body = quarantine_body(item.body)
        reason = redact_text(mend(item.reason))  # a reason may quote the record
        self.index.quarantine(where, reason, body, fmt)
        if self.on_reject:
            self.on_reject(where, reason)


def _gather(
    item: Binding | PodRecord,
    pods: dict[str, PodRecord],
    spans: dict[tuple[str, str, str], list[Any]],
) -> None:
    """Merge a pod view or a binding into the file's; raises TypeError on unusable keys."""
    if isinstance(item, PodRecord):
        if not isinstance(item.uid, str):
            raise TypeError(f"pod uid is {type(item.uid).__name__}, not text")
        pods[item.uid] = _merge_pod(pods.get(item.uid), item)
        return
    key = (item.kind, item.subject, item.object)
    span = spans.get(key)
    if span is None:
        spans[key] = [item.first_ts, item.last_ts, item.attrs]
    else:
        span[0] = min(span[0], item.first_ts)
        span[1] = max(span[1], item.last_ts)
        span[2] = item.attrs or span[2]


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
