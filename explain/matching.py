"""Signals against evidence: which signals each record raises, with their regex captures."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from whyjob.core.evidence import Evidence
from whyjob.explain.ruleset import Condition, RuleSet, Signal

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


class Matcher:
    """Evaluates every signal of a rule set against records, once per record."""

    def __init__(self, rules: RuleSet) -> None:
        self._by_kind = rules.signals_by_kind()

    def match(self, ev: Evidence) -> dict[str, dict[str, str]]:
        """Signal id -> named captures, for each signal this record raises."""
        out: dict[str, dict[str, str]] = {}
        for signal in self._by_kind.get(ev.kind, ()):
            captures = self._signal(signal, ev)
            if captures is not None:
                out[signal.id] = captures
        return out

    @staticmethod
    def _signal(signal: Signal, ev: Evidence) -> dict[str, str] | None:
        for condition in signal.where:
            if not _test(condition, field_value(ev, condition.path)):
                return None
        if signal.capture is None:
            return {}
        found = signal.capture.search(ev.message)
        if found is None:
            return None
        return {k: v for k, v in found.groupdict().items() if v is not None}

    def match_all(self, records: Iterable[Evidence]) -> dict[int, dict[str, dict[str, str]]]:
        out = {}
        for ev in records:
            found = self.match(ev)
            if found:
                out[ev.id] = found
        return out
