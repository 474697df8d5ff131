"""The last check before the index: a record the index cannot store is mended or rejected alone.

Readers build records from whatever a file holds, and a hostile or broken file holds values
SQLite and JSON cannot take: a lone surrogate from `"\\ud800"`, an integer past 64 bits, a
list where a name belongs, a dict keyed by numbers. Writes are tried in batches first (the
common case costs nothing); only when a batch is refused is each record passed through
`admit`, which mends what can be mended without changing its meaning (text with an invalid
character keeps the rest of its text; a number too big for 64 bits is kept as its digits) and
rejects the rest with the field that was wrong.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import fields, replace
from typing import Any, Final, TypeVar

from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence

__all__ = ["REFUSED", "Unfit", "admit", "mend"]

_INT64 = 1 << 63

# What the index raises for a value it cannot store (orjson, sqlite3's parameter binding, a
# NOT NULL column): the signal to mend or reject records one by one.
REFUSED: Final = (
    TypeError,
    ValueError,
    OverflowError,
    sqlite3.InterfaceError,
    sqlite3.ProgrammingError,
    sqlite3.IntegrityError,
)
_R = TypeVar("_R", bound=Evidence | PodRecord | Binding)


class Unfit(ValueError):
    """A record the index cannot store, with the field that is wrong."""


def _text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep the text, mark the bad characters
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return value


def mend(value: Any, depth: int = 0) -> Any:
    """A JSON-able copy of `value`: text made valid, numbers past 64 bits and non-finite
    floats kept as their spelling, keys made text, anything else spelled out."""
    if isinstance(value, str):
        return _text(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if depth > 64:
        return "…"
    if isinstance(value, dict):
        return {_text(str(k)): mend(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mend(v, depth + 1) for v in value]
    return _text(str(value))


def admit(record: _R) -> _R:
    """The record, mended where needed; raises Unfit naming the field that cannot be.

    A number where text belongs becomes its spelling, as SQLite's TEXT columns would store
    it, so a record reads the same from a paste as from the index."""
    changes: dict[str, Any] = {}
    for spec in fields(record):
        value = getattr(record, spec.name)
        kind = str(spec.type)
        if value is None and "None" not in kind:
            raise Unfit(f"{spec.name} is missing")
        if value is None or isinstance(value, bytes | bool):
            continue
        if isinstance(value, str):
            if (fixed := _text(value)) is not value:
                changes[spec.name] = fixed
        elif isinstance(value, dict) and kind.startswith("dict"):
            changes[spec.name] = mend(value)
        elif isinstance(value, int) and kind.startswith("int"):
            if not -_INT64 <= value < _INT64:
                raise Unfit(f"{spec.name} {value} does not fit in 64 bits")
        elif isinstance(value, int | float) and kind.startswith("str"):
            changes[spec.name] = str(value)
        else:
            raise Unfit(f"{spec.name} is {type(value).__name__}, not a value the index stores")
    return replace(record, **changes) if changes else record
