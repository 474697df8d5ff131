"""How a node agent hands its items to the collector: newline-delimited JSON, one item a line.

`{"evidence": {...}}`, `{"pod": {...}}` or `{"binding": {...}}`, fields as in core; a raw body is
base64. Ids travel with the records, so a batch sent twice (a retry after a lost answer) is
stored once.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields
from typing import Any, Final

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


_INTEGERS: Final = ("id", "ts", "severity")


def _evidence(record: Any) -> Evidence:
    if not isinstance(record, dict):
        raise ValueError("evidence is not an object")
    fields_ = {k: v for k, v in record.items() if k in _EVIDENCE_FIELDS}
    for name in _INTEGERS:
        value = fields_.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"evidence {name} must be an integer")
    if not 0 <= fields_["id"] < 2**63:
        raise ValueError("evidence id out of range")
    for name in ("source", "kind", "message"):
        if not isinstance(fields_.get(name), str):
            raise ValueError(f"evidence {name} must be a string")
    if not isinstance(fields_.get("attrs", {}), dict):
        raise ValueError("evidence attrs must be an object")
    if fields_.get("raw") is not None:
        fields_["raw"] = base64.b64decode(fields_["raw"], validate=True)
    return Evidence(**fields_)


def decode_items(body: bytes) -> Iterator[Item]:
    """Items back from the wire; a line that is not one becomes a Rejected naming its line
    (whatever is wrong with it: a sender's bug must not reach, let alone stop, the writer)."""
    for number, line in enumerate(body.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            document: Any = orjson.loads(line)
            if not isinstance(document, dict):
                raise ValueError("a line is one JSON object")
            if "evidence" in document:
                yield _evidence(document["evidence"])
            elif "pod" in document and isinstance(document["pod"], dict):
                pod = PodRecord(**{k: v for k, v in document["pod"].items() if k in _POD_FIELDS})
                if not all(isinstance(v, str) for v in (pod.uid, pod.namespace, pod.name)):
                    raise ValueError("a pod needs uid, namespace and name strings")
                yield pod
            elif "binding" in document and isinstance(document["binding"], dict):
                yield Binding(**document["binding"])
            else:
                yield Rejected(number, "neither evidence, pod nor binding", line[:4096])
        except Exception as exc:
            yield Rejected(number, f"not an item: {type(exc).__name__}: {exc}", line[:4096])
