"""Accuracy on real failure text: the corpus of excerpts from public bug reports.

Each case (tests/fixtures/realworld/cases.jsonl) is text someone pasted into a public issue,
with the root cause a careful engineer reads in it (`category`), other ids they would also
accept (`accept`) and the thread it came from (`source`). Cases whose text alone does not show
the cause are marked `ambiguous` and not scored. A fifth of the corpus is a holdout chosen by a
hash of the case id, so the split was fixed before any rule was tuned and never moves: rules
are tuned on the rest, and the holdout figure says whether they generalise.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from whyjob.core.errors import WhyjobError
from whyjob.core.taxonomy import CATEGORIES

__all__ = [
    "DEFAULT_CORPUS",
    "KINDS",
    "Case",
    "Report",
    "Result",
    "is_holdout",
    "load_cases",
    "owner_flip",
    "score",
]

DEFAULT_CORPUS = Path("tests/fixtures/realworld/cases.jsonl")
KINDS = frozenset(
    {
        "describe-pod",
        "describe-node",
        "events",
        "get-table",
        "status-yaml",
        "status-json",
        "dmesg",
        "syslog",
        "controller-log",
        "framework-log",
        "torchrun",
        "traceback",
        "cloud-doc",
        "mixed",
        "source-wording",
    }
)
_REQUIRED = ("id", "category", "source", "kind", "text")
_HOLDOUT_BUCKETS = 5  # one case in five


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    category: str
    source: str
    kind: str
    text: str
    accept: tuple[str, ...] = ()
    ambiguous: bool = False
    note: str = ""

    @property
    def holdout(self) -> bool:
        return is_holdout(self.id)

    def accepts(self, category: str) -> bool:
        return category == self.category or category in self.accept


def is_holdout(case_id: str) -> bool:
    """Whether a case belongs to the holdout: a fixed fifth, by a hash of its id."""
    digest = hashlib.sha256(case_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % _HOLDOUT_BUCKETS == 0


def _case(number: int, raw: Any, where: str) -> Case:
    if not isinstance(raw, dict):
        raise WhyjobError(f"{where}:{number}: expected a JSON object, got {type(raw).__name__}")
    missing = [key for key in _REQUIRED if not isinstance(raw.get(key), str) or not raw[key]]
    if missing:
        raise WhyjobError(f"{where}:{number}: missing or empty {', '.join(missing)}")
    accept = raw.get("accept") or []
    for category in [raw["category"], *accept]:
        if category not in CATEGORIES:
            raise WhyjobError(f"{where}:{number}: {category!r} is not a taxonomy id")
    if raw["kind"] not in KINDS:
        raise WhyjobError(
            f"{where}:{number}: kind {raw['kind']!r} is not one of {', '.join(sorted(KINDS))}"
        )
    return Case(
        id=raw["id"],
        category=raw["category"],
        source=raw["source"],
        kind=raw["kind"],
        text=raw["text"],
        accept=tuple(accept),
        ambiguous=bool(raw.get("ambiguous", False)),
        note=str(raw.get("note") or ""),
    )


def load_cases(path: Path) -> list[Case]:
    """Every case of a corpus file; a malformed line or a repeated id is an error naming it."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise WhyjobError(f"{path}: {exc.strerror}", 2) from None
    cases: list[Case] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise WhyjobError(f"{path}:{number}: not JSON: {exc}") from None
        case = _case(number, raw, str(path))
        if case.id in seen:
            raise WhyjobError(f"{path}:{number}: case id {case.id!r} appears twice")
        seen.add(case.id)
        cases.append(case)
    return cases


def owner_flip(expected: str, predicted: str) -> bool:
    """Infrastructure blamed on the user, or the user's fault blamed on the infrastructure."""
    sides = {"infra": "cluster", "platform": "cluster", "user": "user"}
    a = sides.get(CATEGORIES[expected].owner)
    b = sides.get(CATEGORIES[predicted].owner)
    return a is not None and b is not None and a != b


@dataclass(frozen=True, slots=True)
class Result:
    case: Case
    predicted: str
    grade: str
    summary: str

    @property
    def correct(self) -> bool:
        return self.case.accepts(self.predicted)

    @property
    def flip(self) -> bool:
        return not self.correct and owner_flip(self.case.category, self.predicted)


@dataclass(slots=True)
class Report:
    """Scores over a set of results (ambiguous cases are counted, never scored)."""

    results: list[Result] = field(default_factory=list)

    @property
    def scored(self) -> list[Result]:
        return [r for r in self.results if not r.case.ambiguous]

    def part(self, *, holdout: bool) -> Report:
        return Report([r for r in self.results if r.case.holdout == holdout])

    def accuracy(self) -> float:
        scored = self.scored
        return sum(r.correct for r in scored) / len(scored) if scored else 0.0

    def flips(self) -> list[Result]:
        return [r for r in self.scored if r.flip]

    def wrong(self) -> list[Result]:
        return [r for r in self.scored if not r.correct]

    def per_category(self) -> dict[str, tuple[float, float, int]]:
        """category -> (precision, recall, support) over the scored cases.

        An answer the case accepts counts as its labelled category, so an accepted alternative
        is neither a false positive of the answer nor a miss of the label.
        """
        support: Counter[str] = Counter()
        answered: Counter[str] = Counter()
        right: Counter[str] = Counter()
        for r in self.scored:
            support[r.case.category] += 1
            answered[r.case.category if r.correct else r.predicted] += 1
            right[r.case.category] += r.correct
        return {
            category: (
                right[category] / answered[category] if answered[category] else 0.0,
                right[category] / support[category] if support[category] else 0.0,
                support[category],
            )
            for category in sorted(set(support) | set(answered))
        }

    def confusion(self) -> list[tuple[str, str, list[str]]]:
        """(expected, predicted, case ids) for every wrong pair, most frequent first."""
        pairs: dict[tuple[str, str], list[str]] = {}
        for r in self.wrong():
            pairs.setdefault((r.case.category, r.predicted), []).append(r.case.id)
        return sorted(
            ((a, b, ids) for (a, b), ids in pairs.items()), key=lambda item: (-len(item[2]), item)
        )


def score(cases: Iterable[Case], diagnose: Any) -> Iterator[Result]:
    """Each case's result; `diagnose(text)` returns (category, grade, summary)."""
    for case in cases:
        category, grade, summary = diagnose(case.text)
        yield Result(case, category, grade, summary)
