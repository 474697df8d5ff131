"""Signals against evidence: which signals each record raises, with their regex captures."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from whyjob.core.evidence import Evidence
from whyjob.explain.prefilter import required_literals
from whyjob.explain.ruleset import Condition, RuleSet

__all__ = ["Matcher", "field_value"]

_MISSING = object()


def field_value(ev: Evidence, path: tuple[str, ...]) -> Any:
    """The value at a rule field path (`message`, `node`, `attrs.exit_code`, ...) or None."""
    if path[0] != "attrs":
        return getattr(ev, path[0], None)
    value: Any = ev.attrs
    for part in path[1:]:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _test(condition: Condition, value: Any) -> bool:
    op, arg = condition.op, condition.value
    if op == "exists":
        return (value is not None) is arg
    if value is None:
        return op in ("ne", "not_in", "not_regex")
    if op == "eq":
        return bool(value == arg)
    if op == "ne":
        return bool(value != arg)
    if op == "in":
        return value in arg if not isinstance(value, list) else any(v in arg for v in value)
    if op == "not_in":
        return value not in arg
    if op == "regex":
        return arg.search(str(value)) is not None
    if op == "not_regex":
        return arg.search(str(value)) is None
    if op == "contains":
        return str(arg) in str(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    limit = float(arg)
    if op == "gt":
        return number > limit
    if op == "gte":
        return number >= limit
    if op == "lt":
        return number < limit
    return number <= limit  # lte


# A test sees the record and its message lower-cased once (for the literal prefilter).
Test = Callable[[Evidence, str], bool]


def _compile(condition: Condition) -> Test:
    """One condition as a function of the record: the common shapes (a regex on the message,
    a test on a top-level attribute) skip the generic path walk, as explain runs every signal
    of a kind on every record of that kind; a message regex runs only on a message holding
    one of the literals it cannot match without."""
    path, op, arg = condition.path, condition.op, condition.value
    if path == ("message",) and op == "regex":
        search = arg.search
        words = tuple(required_literals(arg) or ())
        if words:
            return lambda ev, low: any(w in low for w in words) and search(ev.message) is not None
        return lambda ev, low: search(ev.message) is not None
    if path == ("message",) and op == "not_regex":
        search = arg.search
        words = tuple(required_literals(arg) or ())
        if words:
            return lambda ev, low: not any(w in low for w in words) or search(ev.message) is None
        return lambda ev, low: search(ev.message) is None
    if path[0] != "attrs":
        name = path[0]
        return lambda ev, low: _test(condition, getattr(ev, name, None))
    if len(path) == 2:
        key = path[1]
        return lambda ev, low: _test(
            condition, ev.attrs.get(key) if isinstance(ev.attrs, dict) else None
        )
    return lambda ev, low: _test(condition, field_value(ev, path))


@dataclass(frozen=True, slots=True)
class _Compiled:
    id: str
    tests: tuple[Test, ...]
    capture: re.Pattern[str] | None


class Matcher:
    """Evaluates every signal of a rule set against records, once per record."""

    def __init__(self, rules: RuleSet) -> None:
        self._by_kind = {
            kind: [_Compiled(s.id, tuple(_compile(c) for c in s.where), s.capture) for s in signals]
            for kind, signals in rules.signals_by_kind().items()
        }

    def match(self, ev: Evidence) -> dict[str, dict[str, str]]:
        """Signal id -> named captures, for each signal this record raises."""
        out: dict[str, dict[str, str]] = {}
        signals = self._by_kind.get(ev.kind, ())
        low = ev.message.lower() if signals else ""
        for signal in signals:
            for test in signal.tests:
                if not test(ev, low):
                    break
            else:
                # A capture only adds detail: when it finds nothing the signal still holds.
                found = signal.capture.search(ev.message) if signal.capture else None
                out[signal.id] = (
                    {k: v for k, v in found.groupdict().items() if v is not None} if found else {}
                )
        return out

    def match_all(self, records: Iterable[Evidence]) -> dict[int, dict[str, dict[str, str]]]:
        out = {}
        for ev in records:
            found = self.match(ev)
            if found:
                out[ev.id] = found
        return out
