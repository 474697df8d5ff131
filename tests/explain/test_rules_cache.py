"""The rule set kept in the user's cache: read back while no rule file and no reading code
changed, its regexes compiled only when first searched, and never trusted when it is not a
rule set."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from whyjob.explain import ruleset
from whyjob.explain.matching import Matcher
from whyjob.explain.pattern import UNKNOWN, LazyPattern
from whyjob.explain.prefilter import required_literals
from whyjob.explain.ruleset import load_rules


def _kept(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "whyjob").glob("rules-*.pickle"))


def test_a_second_load_reads_the_cache_and_compiles_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = load_rules()
    assert len(_kept(tmp_path)) == 1

    def no_reading(sources: object) -> None:
        raise AssertionError("the files were read again")

    monkeypatch.setattr(ruleset, "_read", no_reading)
    again = load_rules()
    assert again.version == first.version
    assert [r.id for r in again.explanations] == [r.id for r in first.explanations]
    patterns = [
        c.value for s in again.signals.values() for c in s.where if isinstance(c.value, LazyPattern)
    ]
    assert patterns and all(p._compiled is None for p in patterns)  # none compiled yet
    assert all(p.literals is not UNKNOWN for p in patterns)  # their literals came along
    Matcher(again)  # building the prefilter parses no pattern
    assert all(p._compiled is None for p in patterns)


def test_a_changed_rule_file_is_read_again(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text("format: whyjob.rules/v1\nsignals: []\n")
    load_rules([mine])
    mine.write_text("format: whyjob.rules/v1\nsignals: []\n# edited\n")
    load_rules([mine])
    assert len(_kept(tmp_path)) == 2  # one key per content


def test_a_broken_or_foreign_cache_file_is_not_trusted(tmp_path: Path) -> None:
    load_rules()
    (kept,) = _kept(tmp_path)
    kept.write_bytes(b"not a pickle")
    assert load_rules().explanations  # read from the files, and written again
    kept.write_bytes(pickle.dumps({"not": "a rule set"}))
    assert load_rules().explanations


def test_a_lazy_pattern_searches_pickles_and_hashes_as_its_source() -> None:
    pattern = LazyPattern(r"Xid \d+")
    assert pattern.search("NVRM: Xid 79") is not None and pattern.search("none") is None
    assert required_literals(pattern) == frozenset({"xid "})
    copy = pickle.loads(pickle.dumps(pattern))
    assert copy == pattern and hash(copy) == hash(pattern) and copy._compiled is None
    assert copy.literals == frozenset({"xid "})
