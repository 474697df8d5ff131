"""What every import format shares: options, the per-file context, and what parsers yield.

A parser is a generator over one file's content that yields evidence, pod records, bindings,
and `Rejected` items for records it could not read. It never raises for bad input: a bad record
is rejected with its line and reason and the parser carries on with the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.experiments import DEFAULT_LAUNCHERS, Launcher
from whyjob.core.settings import IngestLimits

__all__ = [
    "Context",
    "IngestOptions",
    "Item",
    "Parser",
    "PodRef",
    "Rejected",
    "guarded",
    "in_cluster",
    "record_bytes",
    "resilient_lines",
    "text_or_none",
]


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod named on the command line, to attach a plain log file to."""

    namespace: str
    name: str
    container: str | None = None
    uid: str | None = None

    @classmethod
    def parse(cls, text: str) -> PodRef:
        """NAMESPACE/POD[/CONTAINER]; raises ValueError with the expected shape."""
        parts = text.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ValueError(f"expected NAMESPACE/POD[/CONTAINER], got {text!r}")
        return cls(parts[0], parts[1], parts[2] if len(parts) == 3 else None)


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """What the person importing knows that the files may not say.

    cluster: stamped on every record. node / instance: for node-local files that do not name
    their host (dmesg, IMDS documents, a dcgm scrape without a Hostname label). pod / restart:
    attach a plain log file to a pod. at: the observation time for documents that carry none.
    year: for syslog timestamps without a year. boot_time: for dmesg's seconds-since-boot.
    fmt: skip detection and read every file as this format.
    """

    cluster: str | None = None
    node: str | None = None
    instance: str | None = None
    pod: PodRef | None = None
    restart: int | None = None
    at: int | None = None
    year: int | None = None
    boot_time: int | None = None
    fmt: str | None = None
    launchers: tuple[Launcher, ...] = DEFAULT_LAUNCHERS
    # Extra log patterns by kind (checkpoint, progress, error): config `logs`.
    log_markers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    limits: IngestLimits = field(default_factory=IngestLimits)  # config `ingest`


@dataclass(slots=True)
class Rejected:
    """A record that could not be read: where, why, and its bytes (kept in quarantine)."""

    line: int | None
    reason: str
    body: bytes | None = None


Item = Evidence | PodRecord | Binding | Rejected


@dataclass(slots=True)
class Context:
    """One file being imported."""

    origin: str  # the path as the user gave it (or "<stdin>")
    options: IngestOptions
    mtime_ms: int | None = None  # the file's modification time, a last-resort clock
    path_hints: dict[str, Any] = field(default_factory=dict)  # what the path itself says
    skipped: dict[str, int] = field(default_factory=dict)  # records read but not evidence, by kind
    # What a parser learns from earlier documents of the same file (a JSON format is parsed one
    # document at a time), keyed by the parser's name.
    memory: dict[str, Any] = field(default_factory=dict)
    line_offset: int = 0  # where a block cut out of a larger paste starts in it
    cut_lines: int = 0  # lines longer than the limit, cut and kept with a marker

    @property
    def node_hint(self) -> str | None:
        """The node a node-local file is about: --node, else the file's or folder's name when
        it is named like a node (`ip-10-0-1-2.ec2.internal.json`, `nodes/<node>/dmesg.txt`)."""
        return self.options.node or self.path_hints.get("node")

    def where(self, line: int | None) -> str:
        return f"{self.origin}:{line + self.line_offset}" if line is not None else self.origin

    def evidence(
        self,
        *,
        source: str,
        native_id: str,
        version: str = "",
        ts: int,
        kind: str,
        message: str,
        line: int | None = None,
        **fields: Any,
    ) -> Evidence:
        """An evidence record with a deterministic id, the cluster stamp and its origin. The
        cluster is part of the id: two clusters' same record (one kernel line on two nodes of
        one name) is two records."""
        cluster = fields.pop("cluster", None) or self.options.cluster
        return Evidence(
            id=evidence_id(source, in_cluster(cluster, native_id), version),
            ts=ts,
            source=source,
            kind=kind,
            message=message,
            cluster=cluster,
            origin=self.where(line),
            **fields,
        )


def in_cluster(cluster: str | None, native_id: str) -> str:
    """A record's native id within its cluster, for the evidence id: two clusters' same record
    (one kernel line on two nodes of one name) is two records; with no cluster, the id is as
    it always was."""
    return f"{cluster}\x1e{native_id}" if cluster else native_id


Parser = Callable[[Context, Any], Iterator[Item]]


def record_bytes(value: Any) -> bytes:
    """A parsed record's bytes for the quarantine, whatever it holds (cut at 64 KiB)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)[:65536]
    except (TypeError, ValueError):  # a number past 64 bits, a lone surrogate
        return repr(value).encode("utf-8", "backslashreplace")[:65536]


def _unreadable(exc: Exception) -> str:
    return f"could not read this record ({type(exc).__name__}: {str(exc)[:200]})"


def guarded(items: Iterable[Item], line: int | None, record: Any) -> list[Item]:
    """One record's items, or the record (its parsed value) rejected whole when reading it
    raised.

    A reader meets shapes nobody planned for (a list where an object belongs, a number past
    64 bits): whatever it raises must cost that one record, never the rest of the import. The
    items are gathered first so a record is stored whole or not at all.
    """
    try:
        return list(items)
    except Exception as exc:
        return [Rejected(line, _unreadable(exc), record_bytes(record))]


def resilient_lines(
    ctx: Context,
    parse: Callable[[Context, Iterable[tuple[int, Any]]], Iterator[Item]],
    lines: Sequence[tuple[int, Any]],
) -> Iterator[Item]:
    """A line-oriented reader that survives its own faults: when it raises, the line it was
    reading (a text line, or a JSON Lines document) is rejected alone and the reader starts
    again on the lines after it, so the file keeps its format and every other line is read."""
    start = 0
    while start < len(lines):
        last = start

        def feed(begin: int) -> Iterator[tuple[int, str]]:
            nonlocal last
            for at in range(begin, len(lines)):
                last = at
                yield lines[at]

        try:
            yield from parse(ctx, feed(start))
            return
        except Exception as exc:
            number, value = lines[last]
            body = (
                value.encode("utf-8", "surrogateescape")
                if isinstance(value, str)
                else record_bytes(value)
            )
            yield Rejected(number, _unreadable(exc), body)
            start = last + 1


def text_or_none(value: Any) -> str | None:
    """A document's field when it holds text, else None (a mangled `true`, `{}` or "" is none)."""
    return value if isinstance(value, str) and value else None
