"""How a node agent hands its items to the collector: newline-delimited JSON, one item a line.

`{"evidence": {...}}`, `{"pod": {...}}` or `{"binding": {...}}`, fields as in core; a raw body is
base64. Ids travel with the records, so a batch sent twice (a retry after a lost answer) is
stored once.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields
from typing import Any

import orjson

from whyjob.collector.ingest.base import Item, Rejected
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence

__all__ = ["decode_items", "encode_items"]

_EVIDENCE_FIELDS = {f.name for f in fields(Evidence)}
_POD_FIELDS = {f.name for f in fields(PodRecord)}


def encode_items(items: Iterable[Item]) -> bytes:
    lines = []
    for item in items:
        if isinstance(item, Evidence):
            record = asdict(item)
            record["raw"] = base64.b64encode(item.raw).decode() if item.raw is not None else None
            lines.append(orjson.dumps({"evidence": record}))
        elif isinstance(item, PodRecord):
            lines.append(orjson.dumps({"pod": asdict(item)}))
        elif isinstance(item, Binding):
            lines.append(orjson.dumps({"binding": asdict(item)}))
    return b"\n".join(lines) + b"\n" if lines else b""


def decode_items(body: bytes) -> Iterator[Item]:
    """Items back from the wire; a line that is not one becomes a Rejected naming its line."""
    for number, line in enumerate(body.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            document: Any = orjson.loads(line)
            if "evidence" in document:
                record = {k: v for k, v in document["evidence"].items() if k in _EVIDENCE_FIELDS}
                if record.get("raw") is not None:
                    record["raw"] = base64.b64decode(record["raw"])
                yield Evidence(**record)
            elif "pod" in document:
                yield PodRecord(**{k: v for k, v in document["pod"].items() if k in _POD_FIELDS})
            elif "binding" in document:
                yield Binding(**document["binding"])
            else:
                yield Rejected(number, "neither evidence, pod nor binding", line[:4096])
        except (orjson.JSONDecodeError, TypeError, ValueError, KeyError) as exc:
            yield Rejected(number, f"not an item: {exc}", line[:4096])
