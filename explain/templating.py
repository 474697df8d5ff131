"""Rule summaries: `str.format` templates over plain values, forgiving of missing fields.

Rule summaries are one sentence each and are rendered for every candidate cause, so they use
Python format syntax (`{node}`, `{xid.code}`) rather than Jinja2: validated at load, rendered
in microseconds, and limited to dictionary lookups so a rule file cannot reach into objects.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["OPTIONAL_PART", "render"]

_MISSING = "?"  # what a field with no value shows
_ABSENT = object()  # a field with no value (a captured "?" is a value)
# `[: {exc.detail}]`: a part kept only when every field in it has a value.
OPTIONAL_PART = re.compile(r"\[([^\[\]]*)\]")


class _Formatter(string.Formatter):
    def get_field(self, field_name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        # `{a.b|c.d}`: the first alternative that has a value.
        for choice in field_name.split("|"):
            head, _, tail = choice.partition(".")
            value = kwargs.get(head)
            if tail:
                value = value.get(tail) if isinstance(value, Mapping) else None
            if value is not None and value != "":
                return value, field_name
        return _ABSENT, field_name

    def format_field(self, value: Any, format_spec: str) -> str:
        if value is _ABSENT:
            return _MISSING
        if not format_spec:
            return str(value)
        try:
            return format(value, format_spec)
        except (TypeError, ValueError):
            return str(value)


_FORMATTER = _Formatter()


def render(template: str, values: Mapping[str, Any]) -> str:
    """Fill a validated template; `{a|b}` takes the first field that has a value, a field with
    none shows as '?', and a part in square brackets is left out when a field in it has none."""
    out: list[str] = []
    done = 0
    for part in OPTIONAL_PART.finditer(template):
        out.append(_FORMATTER.vformat(template[done : part.start()], (), values))
        inner = part.group(1)
        names = [name for _, name, _, _ in _FORMATTER.parse(inner) if name]
        if all(_FORMATTER.get_field(name, (), values)[0] is not _ABSENT for name in names):
            out.append(_FORMATTER.vformat(inner, (), values))
        done = part.end()
    out.append(_FORMATTER.vformat(template[done:], (), values))
    return "".join(out)
