"""The rule packs: strict loading, overrides, and every shipped explanation's fixtures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from whyjob.core.errors import ConfigError
from whyjob.explain.ruleset import load_rules
from whyjob.explain.templating import render
from whyjob.explain.testing import Case, fixture_files, load_cases, run_case

RULES = load_rules()
CASES = [case for path in fixture_files([]) for case in load_cases(path)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.rule}:{c.name}")
def test_shipped_fixture(case: Case) -> None:
    result = run_case(RULES, case)
    assert result.passed, f"{case.origin}: {result.message}"


def test_every_shipped_explanation_has_a_positive_and_a_negative_case() -> None:
    kinds: dict[str, set[bool]] = {}
    for case in CASES:
        kinds.setdefault(case.rule, set()).add(case.holds)
    untested = [r.id for r in RULES.explanations if kinds.get(r.id) != {True, False}]
    assert not untested


def test_every_taxonomy_category_has_a_rule() -> None:
    from whyjob.core.taxonomy import CATEGORIES

    named = {r.category for r in RULES.explanations} | {"peer.failure"}  # peer.failure: the cascade
    assert set(CATEGORIES) == named


def _rules(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "format: whyjob.rules/v2\n",
            "team.yaml:1: format 'whyjob.rules/v2' is not 'whyjob.rules/v1'",
        ),
        (
            "format: whyjob.rules/v1\nsignals:\n  - id: s\n    kind: log.error\n    wehre: {message: x}\n",
            "team.yaml:5: unknown key 'wehre' in a signal (did you mean 'where'?)",
        ),
        (
            "format: whyjob.rules/v1\nsignals:\n  - id: s\n    kind: log.error\n    where:\n      message: {regex: '(unclosed'}\n",
            "team.yaml:6: bad regex '(unclosed'",
        ),
        (
            "format: whyjob.rules/v1\nsignals:\n  - id: s\n    kind: log.error\n    where:\n      mesage: x\n",
            "team.yaml:6: unknown field 'mesage'",
        ),
        (
            "format: whyjob.rules/v1\nsignals:\n  - id: s\n    kind: log.error\n    where:\n      message: {rgex: x}\n",
            "unknown operator 'rgex' (did you mean 'regex'?)",
        ),
        (
            "format: whyjob.rules/v1\nexplanations:\n  - id: e\n    category: gpu.melted\n    grade: likely\n    when: [{signal: log.cuda-oom}]\n    summary: x\n",
            "team.yaml:4: 'gpu.melted' is not a taxonomy id",
        ),
        (
            "format: whyjob.rules/v1\nexplanations:\n  - id: e\n    category: app.cuda_oom\n    grade: likely\n    when: [{signal: log.cuda-om}]\n    summary: x\n",
            "uses unknown signal 'log.cuda-om' (did you mean 'log.cuda-oom'?)",
        ),
        (
            "format: whyjob.rules/v1\nexplanations:\n  - id: cuda-oom\n    category: app.cuda_oom\n    grade: likely\n    when: [{signal: log.cuda-oom}]\n    summary: x\n",
            "explanation 'cuda-oom' is already defined at rules/40-training-logs.yaml",
        ),
        (
            "format: whyjob.rules/v1\nexplanations:\n  - id: e\n    category: app.cuda_oom\n    grade: likely\n    when: [{signal: log.cuda-oom, window: {before: 5 minutes}}]\n    summary: x\n",
            "not a duration: '5 minutes'",
        ),
        (
            "format: whyjob.rules/v1\nexplanations:\n  - id: e\n    category: app.cuda_oom\n    grade: sure\n    when: [{signal: log.cuda-oom}]\n    summary: x\n",
            "grade must be proven, likely or possible",
        ),
        (
            "format: whyjob.rules/v1\nexplanations:\n  - id: e\n    category: app.cuda_oom\n    grade: likely\n    when: [{signal: $nope}]\n    summary: x\n",
            "unknown list $nope",
        ),
        (
            "format: whyjob.rules/v1\nexplanations:\n  - id: e\n    category: app.cuda_oom\n    grade: likely\n    when: [{signal: log.cuda-oom}]\n    summary: '{oom.__class__.x}'\n",
            "summary field",
        ),
        (
            "format: whyjob.rules/v1\nexplanations:\n  - id: e\n    category: app.cuda_oom\n    grade: likely\n    when: [{signal: log.cuda-oom, as: oom}]\n    summary: 'out of memory [on GPU {oom.gpu}'\n",
            "square brackets mark an optional part",
        ),
        ("format: whyjob.rules/v1\nsignals: [\n", "team.yaml:3: not valid YAML"),
        (
            "format: whyjob.rules/v1\nlists:\n  skip: ['(unclosed']\nsignals:\n  - id: s\n    kind: log.error\n    where:\n      message: {regex: x, not_regex: [y, $skip]}\n",
            "team.yaml:8: bad regex '(unclosed'",
        ),
        (
            "format: whyjob.rules/v1\nexplanations:\n  - id: e\n    category: app.cuda_oom\n    grade: likely\n    when: [{signal: log.cuda-oom}]\n    summary: x\n    missing: [a]\n    missing: [b]\n",
            "team.yaml:9: not valid YAML: duplicate key 'missing' (first on line 8)",
        ),
    ],
)
def test_strict_loading_names_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_rules([_rules(tmp_path, text)])
    assert message in str(raised.value)


def test_override_and_disable_without_touching_the_package(tmp_path: Path) -> None:
    folder = tmp_path / "my-rules"
    (folder / "tests").mkdir(parents=True)
    (folder / "team.yaml").write_text(
        "format: whyjob.rules/v1\n"
        "disable: [sigkill-only]\n"
        "explanations:\n"
        "  - id: cuda-oom\n"
        "    override: true\n"
        "    category: app.cuda_oom\n"
        "    grade: likely\n"
        "    priority: 99\n"
        "    when: [{signal: log.cuda-oom, scope: attempt, window: {before: 7d, after: 2m}, as: oom}]\n"
        "    summary: 'out of GPU memory, see go/gpu-sizing: {oom.message}'\n"
    )
    # Fixtures beside user rules are not rule files.
    (folder / "tests" / "team.yaml").write_text("format: whyjob.rule-tests/v1\ncases: []\n")
    rules = load_rules([folder])
    ids = {r.id: r for r in rules.explanations}
    assert "sigkill-only" not in ids and ids["cuda-oom"].priority == 99
    assert ids["cuda-oom"].origin.endswith("team.yaml:4")
    assert rules.version != RULES.version


def test_fixture_files_are_strict_too(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "format: whyjob.rule-tests/v1\ncases:\n  - rule: cuda-oom\n    expect: {wins: true}\n"
    )
    with pytest.raises(
        ConfigError, match=re.escape("bad.yaml:4: expect needs `holds: true|false`")
    ):
        load_cases(bad)


def test_a_fixture_severity_is_a_level_name_or_number(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "format: whyjob.rule-tests/v1\ncases:\n  - rule: host-fault-alone\n    name: x\n"
        "    expect: {holds: false}\n    records:\n      - {kind: kernel.hw, severity: error}\n"
        "      - {kind: kernel.hw, severity: 30}\n"
    )
    (case,) = load_cases(good)
    assert [r.severity for r in case.records] == [40, 30]
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("severity: error", "severity: warn"))
    with pytest.raises(ConfigError, match=re.escape("bad.yaml:7: severity 'warn' is not one of")):
        load_cases(bad)


def test_every_problem_of_a_rule_file_is_reported_at_once(tmp_path: Path) -> None:
    text = """format: whyjob.rules/v1
signals:
  - {id: a, kind: log.error, wehre: {message: x}}
  - {id: b, kind: log.error, where: {message: {regex: '(unclosed'}}}
explanations:
  - {id: c, category: app.exception, grade: likely, when: [{signal: log.cuda-oomm}], summary: x}
"""
    with pytest.raises(ConfigError) as raised:
        load_rules([_rules(tmp_path, text)])
    lines = str(raised.value).splitlines()
    assert lines[0] == "3 problems in the rule files:"
    assert lines[1].endswith("team.yaml:3: unknown key 'wehre' in a signal (did you mean 'where'?)")
    assert "team.yaml:4: bad regex '(unclosed'" in lines[2]
    assert lines[3].endswith("uses unknown signal 'log.cuda-oomm' (did you mean 'log.cuda-oom'?)")


def test_a_summary_leaves_out_an_optional_part_whose_field_has_no_value() -> None:
    template = "the training code raised {exc.exc|exc.message}[: {exc.detail}]"
    parsed = {"exc": {"exc": "ValueError", "detail": "bad shape", "message": "x"}}
    bare = {"exc": {"exc": "AssertionError", "detail": "", "message": "AssertionError"}}
    unparsed = {"exc": {"message": "python: can't open file 'train.py'"}}
    assert render(template, parsed) == "the training code raised ValueError: bad shape"
    assert render(template, bare) == "the training code raised AssertionError"
    assert (
        render(template, unparsed) == "the training code raised python: can't open file 'train.py'"
    )
    assert render("{a} and {b}", {"a": 1}) == "1 and ?"
    assert render("asked[ {a}]", {"a": "?"}) == "asked ?"  # a captured "?" is a value


def test_a_not_regex_list_excludes_each_of_its_patterns_and_lists(tmp_path: Path) -> None:
    from whyjob.core.evidence import Evidence
    from whyjob.explain.matching import Matcher

    rules = load_rules(
        [
            _rules(
                tmp_path,
                "format: whyjob.rules/v1\n"
                "lists:\n  echo: ['exits with return code']\n"
                "signals:\n  - id: word.timeout\n    kind: log.error\n    where:\n"
                "      message: {regex: timeout, not_regex: ['probe', $echo]}\n",
            )
        ]
    )
    signal = rules.signals["word.timeout"]
    assert len([c for c in signal.where if c.op == "not_regex"]) == 2

    def holds(message: str) -> bool:
        ev = Evidence(id="e", ts=0, source="log", kind="log.error", message=message)
        return "word.timeout" in Matcher(rules).match(ev)

    assert holds("collective timeout after 600s")
    assert not holds("Readiness probe timeout")
    assert not holds("['--nccl_timeout', '1800'] exits with return code = 1")
