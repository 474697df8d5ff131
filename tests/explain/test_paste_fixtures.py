"""`whyjob diagnose` on pastes shaped like real bug reports: each gets its expected category."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.paste import read_paste
from whyjob.core.entities import PodRecord
from whyjob.core.evidence import Evidence
from whyjob.core.taxonomy import CATEGORIES
from whyjob.explain.diagnosis import diagnose
from whyjob.explain.ruleset import RuleSet, load_rules

PASTES = Path(__file__).parents[1] / "fixtures" / "paste"
EXPECTED: list[dict[str, Any]] = yaml.safe_load((PASTES / "expected.yaml").read_text())
NOW = 1_795_400_000_000


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules([])


def test_every_paste_has_an_expectation_and_every_expectation_a_paste() -> None:
    listed = {entry["file"] for entry in EXPECTED}
    assert listed == {p.name for p in PASTES.glob("*.txt")}
    assert {entry["category"] for entry in EXPECTED} <= set(CATEGORIES)


@pytest.mark.parametrize("entry", EXPECTED, ids=[e["file"] for e in EXPECTED])
def test_the_paste_gets_its_category(entry: dict[str, Any], rules: RuleSet) -> None:
    items = list(
        read_paste(entry["file"], (PASTES / entry["file"]).read_bytes(), IngestOptions(at=NOW))
    )
    records = [item for item in items if isinstance(item, Evidence)]
    pods = [item for item in items if isinstance(item, PodRecord)]
    found = diagnose(records, pods, rules, undated=NOW)
    assert found.category == entry["category"], found.summary
    if "grade" in entry:
        assert found.grade == entry["grade"], found.summary
    if found.category != "unknown":
        assert found.evidence, "a verdict must cite the lines it rests on"
        assert all(ev["origin"].startswith(entry["file"] + ":") for ev in found.evidence)
