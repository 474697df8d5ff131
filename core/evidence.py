"""The evidence model: one normalized record shape for every source.

An `Evidence` record is what every collector and every import format produces and what the
explanation engine reads. Its `id` is deterministic (source, native id, native version), so
ingesting the same export twice stores nothing new, while each UPDATE of a repeated Kubernetes
event (a new `count`) is a new version and is kept.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from whyjob.core.timeutil import format_ts

__all__ = [
    "ENTITY_KEYS",
    "Evidence",
    "Severity",
    "evidence_document",
    "evidence_id",
    "format_id",
    "parse_id",
]

# The entity keys an evidence record can carry, in the order of the index columns.
ENTITY_KEYS = (
    "cluster",
    "namespace",
    "experiment",
    "pod",
    "pod_uid",
    "container",
    "node",
    "instance_id",
    "gpu_uuid",
    "asg",
)

_ID_MASK = (1 << 63) - 1


class Severity(IntEnum):
    """How bad a record is on its own, before any correlation (syslog-like levels)."""

    DEBUG = 10
    INFO = 20
    NOTICE = 25
    WARNING = 30
    ERROR = 40
    CRITICAL = 50

    @classmethod
    def parse(cls, text: str) -> Severity:
        return cls[text.strip().upper()]


def evidence_id(source: str, native_id: str, version: str = "") -> int:
    """The deterministic 63-bit id of a record: a hash of where it came from and which version.

    63 bits keep it a positive SQLite rowid, so the primary key doubles as the dedup check;
    at ten million records the chance of any collision is about one in a million.
    """
    digest = hashlib.blake2b(
        f"{source}\x1f{native_id}\x1f{version}".encode(), digest_size=8
    ).digest()
    return int.from_bytes(digest, "big") & _ID_MASK


def format_id(value: int) -> str:
    """The public spelling of an id: 16 hex digits (JSON numbers lose precision past 2^53)."""
    return f"{value:016x}"


def parse_id(text: str) -> int:
    """Inverse of `format_id`; raises ValueError on anything that is not 1-16 hex digits."""
    text = text.strip().lower()
    try:
        value = int(text, 16) if 0 < len(text) <= 16 else -1
    except ValueError:
        value = -1
    if not 0 <= value <= _ID_MASK:
        raise ValueError(f"not an evidence id: {text!r} (16 hex digits, as explain prints them)")
    return value


@dataclass(slots=True)
class Evidence:
    """One normalized evidence record.

    `ts` and `ts_end` are milliseconds since the Unix epoch, UTC. `ts_end` is set for states
    with a duration (a maintenance window, a node condition). `attrs` holds typed detail from
    the source (exit code, signal, Xid, reason); `raw` the original record as the source gave
    it; `origin` where it was read from (a file and line, or a collector and cursor).
    """

    id: int
    ts: int
    source: str
    kind: str
    message: str
    severity: int = Severity.INFO
    ts_end: int | None = None
    cluster: str | None = None
    namespace: str | None = None
    experiment: str | None = None
    pod: str | None = None
    pod_uid: str | None = None
    container: str | None = None
    node: str | None = None
    instance_id: str | None = None
    gpu_uuid: str | None = None
    asg: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    raw: bytes | None = None
    origin: str | None = None

    @property
    def public_id(self) -> str:
        return format_id(self.id)

    def entities(self) -> dict[str, str]:
        """The entity keys that are set, by name."""
        return {k: v for k in ENTITY_KEYS if (v := getattr(self, k)) is not None}


def evidence_document(record: Evidence, raw: bytes | None = None) -> dict[str, Any]:
    """One record as `whyjob show -o json` and GET /api/v1/evidence/{id} give it (schema
    core/schema/records.v1.json); `raw` is the source's bytes, decoded, when given."""
    return {
        "id": record.public_id,
        "at": format_ts(record.ts, precise=True),
        "end": format_ts(record.ts_end, precise=True) if record.ts_end is not None else None,
        "source": record.source,
        "kind": record.kind,
        "severity": record.severity,
        "message": record.message,
        "entities": record.entities(),
        "attrs": record.attrs,
        "origin": record.origin,
        "raw": raw.decode("utf-8", "replace") if raw is not None else None,
    }
