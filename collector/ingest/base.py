"""What every import format shares: options, the per-file context, and what parsers yield.

A parser is a generator over one file's content that yields evidence, pod records, bindings,
and `Rejected` items for records it could not read. It never raises for bad input: a bad record
is rejected with its line and reason and the parser carries on with the next one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.experiments import DEFAULT_LAUNCHERS, Launcher

__all__ = [
    "Context",
    "IngestOptions",
    "Item",
    "Parser",
    "PodRef",
    "Rejected",
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
        """An evidence record with a deterministic id, the cluster stamp and its origin."""
        return Evidence(
            id=evidence_id(source, native_id, version),
            ts=ts,
            source=source,
            kind=kind,
            message=message,
            cluster=fields.pop("cluster", None) or self.options.cluster,
            origin=self.where(line),
            **fields,
        )


Parser = Callable[[Context, Any], Iterator[Item]]
