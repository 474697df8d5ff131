"""The real-world corpus and `whyjob bench realworld`: the corpus is well formed, the scoring
counts what it says, and accuracy on real text never falls below the floors pinned here."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from whyjob.cli.app import app
from whyjob.cli.pasted import diagnose_text
from whyjob.cli.realworld import Case, Report, Result, is_holdout, load_cases, owner_flip, score
from whyjob.collector.ingest.base import IngestOptions
from whyjob.core.errors import WhyjobError
from whyjob.core.taxonomy import CATEGORIES
from whyjob.explain.ruleset import load_rules

CORPUS = Path(__file__).parents[1] / "fixtures" / "realworld" / "cases.jsonl"
WORDINGS = Path(__file__).parents[1] / "fixtures" / "wordings" / "cases.jsonl"

# Floors: raise them as the diagnosis improves, never lower them to let a change through.
# They sit just under the figures of the last run (all 0.973, holdout 0.929, lowest recall
# 0.85 or above for every category) so a change that costs even a few cases fails here. New
# blind batches are harder than the cases tuned on: when F and G (317 cases) joined they were
# lowered once, and the holdout's once more when N (54 cases, its holdout part 5 of 9 right,
# never tuned on) joined; H to K (506 cases), L (136), M (79), O (108), P (66), Q (63), R (55),
# T (112), U (70), V (109), W (100), X (108), Y1 (50), Z (97), AA (98), AB (97), AC (77), AD
# (82), AE (110), AF (92) and AG (78) joined after their blind scores and the families they
# showed; the floors rose with V to AC and again with AD to AG.
# Every category's recall is held at 0.85: job.completed's, which committed run logs
# had pulled to 0.83 (each script closes with its own words: a best epoch, k-NN results, a
# last save), is 0.93 since a paste's last lines are read for those words. A stage's end
# ("Pretraining completed.") does not read as the run's, since more training may follow it.
# No owner flip is allowed: the one Q brought (a Slurm time-limit kill read as maintenance)
# was a reader's fault (a trainer's progress rows taken for terminal wraps swallowed
# slurmstepd's line), mended for every paste, and time limits now have their own rule.
FLOOR_ALL = 0.974
FLOOR_HOLDOUT = 0.93
FLOOR_RECALL = 0.85
MAX_FLIPS = 0
# The wordings read from the tools' sources (0.952 at the last run, 1,525 messages). Lowered
# from 0.95 when the node agents' and OS-update operators' 91 messages joined (the side blind
# batches Q and R read worst): 32 of them known when read, 72 after the families they showed;
# the endings, storage clients, FUSE daemons and CSI drivers, node agents and host components
# read since joined at 0.64 to 0.73 and stand at 0.91 to 1.00. Two flips are the
# storage systems' mounts failing at start (CephFS with no MDS up, gcsfuse's sidecar killed):
# a FailedMount, which the taxonomy puts under startup.config, where the labeller read the
# backend's failure (storage.io).
FLOOR_WORDINGS = 0.945
MAX_WORDING_FLIPS = 2


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    return load_cases(CORPUS)


def _report(cases: list[Case]) -> Report:
    rules = load_rules([])
    options = IngestOptions(at=1_780_000_000_000)

    def run(text: str) -> tuple[str, str, str]:
        found = diagnose_text(text, rules, options)
        return found.category, found.grade, found.summary

    return Report(list(score(cases, run)))


@pytest.fixture(scope="module")
def report(cases: list[Case]) -> Report:
    return _report(cases)


def test_the_corpus_is_large_sourced_and_covers_every_category(cases: list[Case]) -> None:
    assert len(cases) >= 300
    assert all(c.source.startswith("https://") for c in cases)
    per_category = Counter(c.category for c in cases if not c.ambiguous)
    for category in CATEGORIES:
        needed = 4 if category in ("unknown", "pod.deleted") else 8
        assert per_category[category] >= needed, category


def test_the_holdout_is_a_fixed_fifth(cases: list[Case]) -> None:
    share = sum(c.holdout for c in cases) / len(cases)
    assert 0.15 < share < 0.25
    # The split depends on the id alone: the same id always falls on the same side.
    assert is_holdout("gpu-xid79-1") == is_holdout("gpu-xid79-1")
    assert {is_holdout(f"case-{n}") for n in range(20)} == {True, False}


def test_a_malformed_corpus_line_names_its_file_line_and_reason(tmp_path: Path) -> None:
    good = {"id": "a", "category": "gpu.xid", "source": "https://x", "kind": "dmesg", "text": "t"}
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "category": "gpu.bad"}) + "\n")
    with pytest.raises(WhyjobError, match=r"cases.jsonl:2: 'gpu.bad' is not a taxonomy id"):
        load_cases(path)
    path.write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(WhyjobError, match=r"cases.jsonl:2: case id 'a' appears twice"):
        load_cases(path)
    path.write_text(json.dumps({**good, "text": ""}) + "\n")
    with pytest.raises(WhyjobError, match=r"cases.jsonl:1: missing or empty text"):
        load_cases(path)


def test_owner_flips_cross_between_the_user_and_the_cluster() -> None:
    assert owner_flip("gpu.xid", "app.exception")
    assert owner_flip("app.cuda_oom", "node.eviction")
    assert not owner_flip("gpu.xid", "node.not_ready")  # both the cluster's
    assert not owner_flip("app.exception", "unknown")  # unknown blames nobody
    assert not owner_flip("peer.failure", "app.exception")


def _case(category: str, *, accept: tuple[str, ...] = (), ambiguous: bool = False) -> Case:
    return Case(
        f"c-{category}-{accept}-{ambiguous}", category, "https://x", "dmesg", "t", accept, ambiguous
    )


def test_the_report_counts_accepted_answers_and_skips_ambiguous_cases() -> None:
    report = Report(
        [
            Result(_case("gpu.xid"), "gpu.xid", "likely", ""),
            Result(_case("gpu.xid", accept=("node.not_ready",)), "node.not_ready", "likely", ""),
            Result(_case("storage.io"), "app.exception", "likely", ""),
            Result(_case("storage.io", ambiguous=True), "unknown", "possible", ""),
        ]
    )
    assert report.accuracy() == pytest.approx(2 / 3)
    assert [r.case.category for r in report.flips()] == ["storage.io"]
    per = report.per_category()
    assert per["gpu.xid"] == (1.0, 1.0, 2)  # the accepted answer counts as the label
    assert per["storage.io"] == (0.0, 0.0, 1)
    assert per["app.exception"] == (0.0, 0.0, 0)
    assert report.confusion() == [("storage.io", "app.exception", [report.results[2].case.id])]


def test_accuracy_on_real_text_holds_its_floors(report: Report) -> None:
    wrong = [f"{r.case.id}: {r.case.category} -> {r.predicted}" for r in report.wrong()]
    assert report.accuracy() >= FLOOR_ALL, wrong
    assert report.part(holdout=True).accuracy() >= FLOOR_HOLDOUT
    assert len(report.flips()) <= MAX_FLIPS, [r.case.id for r in report.flips()]
    for category, (_, recall, support) in report.per_category().items():
        if support:
            assert recall >= FLOOR_RECALL, (category, recall)


def test_the_tools_own_wordings_hold_their_floor() -> None:
    # Not pasted text: each case is a message rendered from the format string a tool's own
    # source prints (the file is in `source`, the string in `format`; for closed services, the
    # page of their documentation that gives it), so the rules are held to whole families of
    # wording, including the ones no thread has shown yet.
    cases = load_cases(WORDINGS)
    assert len(cases) >= 1100
    assert all(c.kind == "source-wording" for c in cases)
    assert all(c.source.startswith("https://") for c in cases)
    report = _report(cases)
    wrong = [f"{r.case.id}: {r.case.category} -> {r.predicted}" for r in report.wrong()]
    assert report.accuracy() >= FLOOR_WORDINGS, wrong
    assert len(report.flips()) <= MAX_WORDING_FLIPS, [r.case.id for r in report.flips()]


def test_bench_realworld_prints_both_parts_flips_and_categories(tmp_path: Path) -> None:
    lines = CORPUS.read_text().splitlines()[:40]
    corpus = tmp_path / "cases.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, ["bench", "realworld", "--cases", str(corpus)])
    assert result.exit_code == 0, result.output
    assert "40 cases" in result.output
    assert "accuracy: all " in result.output and "holdout " in result.output
    assert "owner flips: " in result.output
    assert "precision  recall  support" in result.output
