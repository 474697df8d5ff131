"""`whyjob ingest`: files and folders in, evidence in the index, a count of everything.

Each file is detected, parsed and committed on its own, so a crash or a bad file never costs
the files before it. Every record ends up counted as stored, duplicate (already in the index)
or rejected (kept in the quarantine table with its file, line and reason).
"""

from __future__ import annotations

import gc
import gzip
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from whyjob.collector.ingest import formats, podlogs
from whyjob.collector.ingest.base import Context, IngestOptions, Item, Rejected
from whyjob.collector.ingest.jsondocs import Damage, iter_json_docs
from whyjob.collector.ingest.yamlload import yaml_documents
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence
from whyjob.core.index import SqliteIndex

__all__ = ["FileResult", "IngestSummary", "Ingestor"]

_BATCH = 20_000
_SNIFF_LINES = 20
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


def _decode_lines(data: bytes) -> tuple[list[tuple[int, str]], list[Rejected]]:
    """Lines with their numbers; lines that are not UTF-8 are rejected, the rest kept."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        return [
            (number, line[:-1] if line.endswith("\r") else line)
            for number, line in enumerate(text.lstrip("\ufeff").split("\n"), start=1)
        ], []
    lines: list[tuple[int, str]] = []
    bad: list[Rejected] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            bad.append(
                Rejected(
                    number,
                    f"invalid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})",
                    raw,
                )
            )
            continue
        lines.append((number, line[:-1] if line.endswith("\r") else line))
    return lines, bad


# dmesg lines start with "[" too: "[12345.678901] ..." and "[Sun Nov 22 15:03:43 2026] ...".
_DMESG_START = re.compile(rb"^\[\s*\d+\.\d+\]|^\[[A-Z][a-z]{2} [A-Z][a-z]{2} ")


def _looks_like_json(data: bytes) -> bool:
    head = data[:64].lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1] in (b"{", b"[") and not _DMESG_START.match(head)


def _looks_like_yaml(lines: list[tuple[int, str]]) -> bool:
    for _, line in lines[:_SNIFF_LINES]:
        if not line.strip() or line.startswith("#"):
            continue
        return line.startswith(("apiVersion:", "kind:", "---", "items:"))
    return False


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
        fmt, items = self._route(ctx, data, explicit)
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

    # -- detection ---------------------------------------------------------------------------

    def _route(
        self, ctx: Context, data: bytes, explicit: bool
    ) -> tuple[str, Iterator[Item] | None]:
        """The format name and the parsed items, or (reason, None) when nothing reads it."""
        forced = self.options.fmt
        if (forced is None or forced in _JSON_NAMES | {formats.DOCKER_LOG}) and _looks_like_json(
            data
        ):
            return self._route_json(ctx, data, forced)
        lines, bad = _decode_lines(data)
        if forced in _JSON_NAMES:
            return f"not {forced}: the file is not JSON", None
        if (forced is None and _looks_like_yaml(lines)) or forced == "k8s":
            return "k8s", self._yaml_items(ctx, data, bad)
        sniff = [line for _, line in lines if line.strip()][:_SNIFF_LINES]
        if forced is None and not sniff and not bad:
            return "empty file", None
        for text_format in formats.TEXT_FORMATS:
            if forced == text_format.name or (forced is None and text_format.matches(sniff)):
                return text_format.name, _chain(bad, text_format.parse(ctx, lines))
        if forced == formats.PLAIN_LOG.name or (
            forced is None and (self.options.pod is not None or "pod" in ctx.path_hints)
        ):
            return formats.PLAIN_LOG.name, _chain(bad, formats.PLAIN_LOG.parse(ctx, lines))
        if forced is not None:
            return f"unknown format {forced!r} (see `whyjob ingest --help` for the list)", None
        return (
            "not a format whyjob recognises (attach a plain log to a pod with --pod, "
            "or force a format with --format)",
            None,
        )

    def _route_json(
        self, ctx: Context, data: bytes, forced: str | None
    ) -> tuple[str, Iterator[Item] | None]:
        docs = iter_json_docs(data)
        first: Any = None
        pending: list[Any] = []
        for doc in docs:
            pending.append(doc)
            if not isinstance(doc, Damage):
                first = doc.value
                break
        if first is None:
            if not pending:
                return "empty file", None
            # Nothing parsed at all: report the damage as the file's only records.
            return "json", _damage_items(pending)
        stream = _chain_docs(pending, docs)
        if forced == formats.DOCKER_LOG or (
            forced is None and podlogs.looks_like_docker_json(first)
        ):
            return formats.DOCKER_LOG, self._docker_items(ctx, stream)
        for json_format in formats.JSON_FORMATS:
            if forced == json_format.name or (forced is None and json_format.matches(first)):
                return json_format.name, self._json_items(ctx, json_format, stream)
        return "JSON, but not an export whyjob recognises", None

    def _json_items(
        self, ctx: Context, json_format: formats.JsonFormat, stream: Iterable[Any]
    ) -> Iterator[Item]:
        for doc in stream:
            if isinstance(doc, Damage):
                yield Rejected(doc.line, doc.reason, doc.body)
            elif json_format.matches(doc.value):
                yield from json_format.parse(ctx, doc.value, doc.line)
            else:
                yield Rejected(doc.line, f"document is not {json_format.description}")

    def _docker_items(self, ctx: Context, stream: Iterable[Any]) -> Iterator[Item]:
        damaged: list[Rejected] = []

        def docs() -> Iterator[tuple[int, Any]]:
            for doc in stream:
                if isinstance(doc, Damage):
                    damaged.append(Rejected(doc.line, doc.reason, doc.body))
                else:
                    yield doc.line, doc.value

        yield from podlogs.parse_docker_json(ctx, docs())
        yield from damaged

    def _yaml_items(self, ctx: Context, data: bytes, bad: list[Rejected]) -> Iterator[Item]:
        yield from bad
        if bad:
            # Undecodable bytes were rejected line by line; parse what is left.
            data = b"\n".join(
                b"" if number in {r.line for r in bad} else raw
                for number, raw in enumerate(data.split(b"\n"), start=1)
            )
        for line, doc in yaml_documents(data.decode("utf-8", "replace")):
            if isinstance(doc, Rejected):
                yield doc
            elif formats.JSON_FORMATS[0].matches(doc):
                yield from formats.parse_k8s(ctx, doc, line)
            elif doc is not None:
                yield Rejected(line, "YAML document is not a Kubernetes object or List")

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


_JSON_NAMES = frozenset(f.name for f in formats.JSON_FORMATS)


def _chain(first: Iterable[Item], second: Iterable[Item]) -> Iterator[Item]:
    yield from first
    yield from second


def _chain_docs(pending: list[Any], rest: Iterable[Any]) -> Iterator[Any]:
    yield from pending
    yield from rest


def _damage_items(damages: list[Any]) -> Iterator[Item]:
    for damage in damages:
        yield Rejected(damage.line, damage.reason, damage.body)


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
