"""Signals against evidence: which signals each record raises, with their regex captures."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from whyjob.core.evidence import Evidence
from whyjob.explain.pattern import LazyPattern
from whyjob.explain.prefilter import required_literals
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
    if op in ("in", "not_in"):
        try:
            found = value in arg if not isinstance(value, list) else any(v in arg for v in value)
        except TypeError:  # an unhashable value (a mapping where a name was expected)
            found = False
        return found if op == "in" else not found
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


# A test sees the record and the ids of the prefilter literals its message holds.
Test = Callable[[Evidence, AbstractSet[int]], bool]


def _compile(condition: Condition, literal_ids: dict[str, int]) -> Test:
    """One condition as a function of the record: the common shapes (a regex on the message,
    a test on a top-level attribute) skip the generic path walk, as explain runs every signal
    of a kind on every record of that kind; a message regex runs only on a message holding
    one of the literals it cannot match without."""
    path, op, arg = condition.path, condition.op, condition.value
    if path == ("message",) and op in ("regex", "not_regex"):
        search = arg.search
        words = required_literals(arg)
        if op == "regex":
            if words:
                needed = frozenset(literal_ids.setdefault(w, len(literal_ids)) for w in words)
                return lambda ev, seen: (
                    not needed.isdisjoint(seen) and search(ev.message) is not None
                )
            return lambda ev, seen: search(ev.message) is not None
        if words:
            needed = frozenset(literal_ids.setdefault(w, len(literal_ids)) for w in words)
            return lambda ev, seen: needed.isdisjoint(seen) or search(ev.message) is None
        return lambda ev, seen: search(ev.message) is None
    if path[0] != "attrs":
        name = path[0]
        return lambda ev, seen: _test(condition, getattr(ev, name, None))
    if len(path) == 2:
        key = path[1]
        return lambda ev, seen: _test(
            condition, ev.attrs.get(key) if isinstance(ev.attrs, dict) else None
        )
    return lambda ev, seen: _test(condition, field_value(ev, path))


@dataclass(frozen=True, slots=True)
class _Compiled:
    id: str
    tests: tuple[Test, ...]
    capture: LazyPattern | None


class Matcher:
    """Evaluates every signal of a rule set against records, once per record.

    Before any message regex runs, one Aho-Corasick pass over the lower-cased message finds
    which of the rule set's prefilter literals it holds (`prefilter.required_literals`); a
    regex whose literals are all absent is skipped. One pass for all signals, where testing
    each signal's literals with `in` cost a scan per literal (18x slower on the corpus's lines).
    """

    def __init__(self, rules: RuleSet) -> None:
        self._by_kind, self._literals = _tables(tuple(rules.signals.values()))

    def _seen(self, message: str) -> AbstractSet[int]:
        if self._literals is None:
            return frozenset()
        return {found for _, found in self._literals.iter(message.lower())}

    def match(self, ev: Evidence) -> dict[str, dict[str, str]]:
        """Signal id -> named captures, for each signal this record raises."""
        out: dict[str, dict[str, str]] = {}
        signals = self._by_kind.get(ev.kind, ())
        seen = self._seen(ev.message) if signals else frozenset()
        for signal in signals:
            for test in signal.tests:
                if not test(ev, seen):
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


_Tables = tuple[dict[str, list[_Compiled]], Any]


@lru_cache(maxsize=16)  # explain runs once per request: compile a rule set once per process
def _tables(signals: tuple[Signal, ...]) -> _Tables:
    """The compiled signals of each kind, and an Aho-Corasick automaton that reports the id of
    each prefilter literal a message holds (None when no pattern has one)."""
    literal_ids: dict[str, int] = {}
    by_kind: dict[str, list[_Compiled]] = {}
    for signal in signals:
        compiled = _Compiled(
            signal.id, tuple(_compile(c, literal_ids) for c in signal.where), signal.capture
        )
        for kind in signal.kinds:
            by_kind.setdefault(kind, []).append(compiled)
    if not literal_ids:
        return by_kind, None
    import ahocorasick

    automaton = ahocorasick.Automaton()
    for word, number in literal_ids.items():
        automaton.add_word(word, number)
    automaton.make_automaton()
    return by_kind, automaton
