"""The literal prefilter never hides a match: a regex that matches a line always finds one of
its required literals in that line, for every shipped rule and real text from the corpus."""

from __future__ import annotations

import json
import re
from pathlib import Path

from whyjob.explain.prefilter import required_literals
from whyjob.explain.ruleset import load_rules

CORPUS = Path(__file__).parents[1] / "fixtures" / "realworld" / "cases.jsonl"


def test_literals_are_what_every_match_needs() -> None:
    assert required_literals(re.compile(r"Spot ITN received")) == {"spot itn received"}
    assert required_literals(re.compile(r"\bfoo\b|bar[0-9]+bazz")) == {"foo", "bazz"}
    # A branch that needs no literal of three characters leaves nothing to require.
    assert required_literals(re.compile(r"foo|\d+")) is None
    assert required_literals(re.compile(r"(?:abc)?def")) == {"def"}
    assert required_literals(re.compile(r"(?i)OOM ?Killed")) == {"killed"}


def test_no_shipped_pattern_matches_a_real_line_without_its_literals() -> None:
    lines = [
        line
        for raw in CORPUS.read_text().splitlines()[:400]
        for line in json.loads(raw)["text"].splitlines()
    ]
    patterns = [
        condition.value
        for signal in load_rules([]).signals.values()
        for condition in signal.where
        if condition.op in ("regex", "not_regex") and condition.path == ("message",)
    ]
    checked = 0
    for pattern in patterns:
        words = required_literals(pattern)
        if not words:
            continue
        for line in lines:
            low = line.lower()
            if not any(word in low for word in words):
                assert pattern.search(line) is None, (pattern.pattern[:80], line[:120])
                checked += 1
    assert checked > 10_000
