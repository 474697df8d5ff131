"""End to end: every simulator scenario, through real ingest, explained against its truth."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from whyjob.cli.accuracy import score
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.core.index import SqliteIndex
from whyjob.explain.engine import explain_experiment
from whyjob.explain.model import Explanation
from whyjob.explain.ruleset import RuleSet, load_rules
from whyjob.sim import SCENARIOS, Truth, simulate

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "core" / "schema" / "explanation.v1.json").read_text()
)


@pytest.fixture(scope="module")
def rules() -> RuleSet:
    return load_rules()


def _explain(tmp_path: Path, scenario: str, seed: int, rules: RuleSet) -> tuple[Truth, Explanation]:
    truth = simulate(scenario, seed, tmp_path / "bundle")
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        summary = Ingestor(index, IngestOptions()).ingest([str(tmp_path / "bundle")])
        assert summary.total("rejected") == 0, "the simulator writes only valid exports"
        return truth, explain_experiment(
            index, rules, truth.experiment_name, truth.experiment_namespace
        )


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_attempt_gets_the_truths_cause(tmp_path: Path, scenario: str, rules: RuleSet) -> None:
    truth, explanation = _explain(tmp_path, scenario, 1, rules)
    document = explanation.to_json()
    jsonschema.validate(document, SCHEMA)
    card = score(truth, explanation)
    wrong = [
        f"{o.key}: expected {o.expected} <- {o.expected_cause}, got {o.predicted} <- {o.predicted_cause}"
        for o in card.wrong()
    ]
    assert not wrong, "\n".join(wrong)
    assert card.roots_right == card.roots_total
    if truth.verdict["category"] != "job.completed":
        assert document["verdict"]["category"] == truth.verdict["category"]
        assert document["verdict"]["grade"] in ("proven", "likely")


def test_verdict_names_the_root_attempt_and_the_chain_starts_at_the_root(
    tmp_path: Path, rules: RuleSet
) -> None:
    truth, explanation = _explain(tmp_path, "xid79", 7, rules)
    root = explanation.attempt(explanation.verdict.root_attempt or "")
    assert (
        root is not None
        and f"{root.pod_uid}/{root.container}/{root.restart}" == truth.verdict["root"]
    )
    assert explanation.chain[0].role == "root" and "Xid" in explanation.chain[0].summary
    assert explanation.chain[-1].role == "effect"
    # The run's end cites its termination record; what was seen only later corroborates.
    end = next(step for step in explanation.chain if step.summary.startswith(f"rank {root.rank}"))
    assert end.evidence == [root.end_evidence] and root.end_evidence is not None
    for step in explanation.chain:
        if step.role == "corroborates":
            assert step.at is not None and step.at > (root.ended_at or 0)
    cited = {e for a in explanation.attempts for e in a.evidence}
    assert cited <= {t.id for t in explanation.timeline}  # every claim points at a record shown


def test_restart_loop_is_reported_with_no_retry(tmp_path: Path, rules: RuleSet) -> None:
    _, explanation = _explain(tmp_path, "restart_loop", 3, rules)
    assert explanation.loop.looping and explanation.loop.kind == "same_error"
    assert explanation.retry_helps.value is False
    assert explanation.gpu_hours.lost > 0


def test_exit_137_without_oom_evidence_is_not_called_an_oom(tmp_path: Path, rules: RuleSet) -> None:
    """The cardinal sin of other tools: OOMKilled for every SIGKILL."""
    fixture = Path(__file__).parents[1] / "fixtures" / "k8s" / "pod-crashloop.json"
    killed = tmp_path / "pod.json"
    killed.write_text(fixture.read_text().replace('"reason": "OOMKilled"', '"reason": "Error"'))
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        Ingestor(index, IngestOptions()).ingest([str(killed)])
        explanation = explain_experiment(index, rules, "gpt2-run7", None)
    (attempt,) = explanation.attempts
    assert (
        attempt.exit_code == 137 and attempt.category == "unknown" and attempt.grade == "possible"
    )
    assert any("exit 137 only proves SIGKILL" in note for note in attempt.missing)
    with SqliteIndex(tmp_path / "oom.sqlite") as index:
        Ingestor(index, IngestOptions()).ingest([str(fixture)])
        (attempt,) = explain_experiment(index, rules, "gpt2-run7", None).attempts
    assert (attempt.category, attempt.grade) == ("container.oom_killed", "proven")


def test_ranks_timing_out_within_clock_skew_make_the_first_domino_uncertain(
    tmp_path: Path, rules: RuleSet
) -> None:
    # Seed 1009: all eight ranks hit the NCCL watchdog within 5 s, on nodes whose clocks differ
    # by more than that; whyjob must not claim more than the clocks allow.
    _, explanation = _explain(tmp_path, "nccl_timeout", 1009, rules)
    assert explanation.verdict.category == "app.nccl_timeout"
    assert explanation.verdict.grade == "possible"
    root = explanation.attempt(explanation.verdict.root_attempt or "")
    assert root is not None
    assert any("closer than node clocks can be trusted" in note for note in root.missing)
