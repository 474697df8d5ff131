"""A rule's regex, compiled when first used: a rule set read back from its cache (see
`ruleset.load_rules`) would otherwise compile every pattern on every start, most of which one
explanation never runs (the prefilter's literals rule them out first)."""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["UNKNOWN", "LazyPattern"]

# `literals` not worked out yet (prefilter.required_literals does it on first use), and how
# that travels through pickle, which would otherwise make a new object of it.
UNKNOWN: Final[Any] = object()
_UNSET: Final = "\0unset"


class LazyPattern:
    """What the rules use of `re.Pattern` (`search`, `pattern`, `flags`), compiled at the first
    search; equal and hashed by source and flags, so caches keyed on patterns still hit. A
    pickled one carries its source and its prefilter literals, never the compiled form."""

    __slots__ = ("_compiled", "flags", "literals", "pattern")

    def __init__(
        self, pattern: str, flags: int = 0, *, compiled: re.Pattern[str] | None = None
    ) -> None:
        self.pattern, self.flags = pattern, flags
        self._compiled = compiled
        self.literals: frozenset[str] | None = UNKNOWN  # UNKNOWN, None (no literal) or words

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def search(self, string: str, pos: int = 0) -> re.Match[str] | None:
        return self.compiled().search(string, pos)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, LazyPattern)
            and self.pattern == other.pattern
            and self.flags == other.flags
        )

    def __hash__(self) -> int:
        return hash((self.pattern, self.flags))

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"

    def __getstate__(self) -> tuple[str, int, Any]:
        return (self.pattern, self.flags, _UNSET if self.literals is UNKNOWN else self.literals)

    def __setstate__(self, state: tuple[str, int, Any]) -> None:
        self.pattern, self.flags, literals = state
        self._compiled = None
        self.literals = UNKNOWN if literals == _UNSET else literals
