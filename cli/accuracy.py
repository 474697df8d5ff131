"""Scoring explanations against simulator truth: per attempt, per category, per scenario.

An attempt is matched by (pod uid, container, restart). A collateral attempt is right when it
is `peer.failure` pointing at the attempt the truth names; any other attempt is right when
its category is the truth's. First-domino accuracy asks, for each failed generation, whether
the attempt whyjob names as the root is the one the truth names.
"""

from __future__ import annotations

import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from whyjob.explain.model import Explanation
from whyjob.explain.ruleset import RuleSet
from whyjob.sim import Truth

__all__ = ["Outcome", "Scorecard", "by_scenario", "run_one", "score"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """One attempt: what the truth says, what whyjob said."""

    scenario: str
    seed: int
    key: str
    expected: str
    predicted: str
    expected_cause: str | None
    predicted_cause: str | None

    @property
    def correct(self) -> bool:
        if self.expected == "peer.failure":
            return self.predicted == "peer.failure" and self.predicted_cause == self.expected_cause
        return self.predicted == self.expected


@dataclass(slots=True)
class Scorecard:
    outcomes: list[Outcome] = field(default_factory=list)
    roots_right: int = 0
    roots_total: int = 0
    failures: list[str] = field(default_factory=list)  # scenario/seed that raised

    def add(self, other: Scorecard) -> None:
        self.outcomes += other.outcomes
        self.roots_right += other.roots_right
        self.roots_total += other.roots_total
        self.failures += other.failures

    def per_category(self) -> dict[str, tuple[float, float, int]]:
        """category -> (precision, recall, support)."""
        true_pos: Counter[str] = Counter()
        predicted: Counter[str] = Counter()
        support: Counter[str] = Counter()
        for o in self.outcomes:
            support[o.expected] += 1
            predicted[o.predicted] += 1
            if o.correct:
                true_pos[o.expected] += 1
        out = {}
        for category in sorted(set(support) | set(predicted)):
            precision = true_pos[category] / predicted[category] if predicted[category] else 0.0
            recall = true_pos[category] / support[category] if support[category] else 0.0
            out[category] = (precision, recall, support[category])
        return out

    def wrong(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.correct]


def _key(pod_uid: str, container: str, restart: int) -> str:
    return f"{pod_uid}/{container}/{restart}"


def score(truth: Truth, explanation: Explanation) -> Scorecard:
    card = Scorecard()
    mine = {_key(a.pod_uid, a.container, a.restart): a for a in explanation.attempts}
    keys_of = {a.id: k for k, a in mine.items()}
    for expected in truth.attempts:
        got = mine.get(expected.key)
        # The simulator calls a run still going at capture time job.completed; whyjob rightly
        # leaves it undiagnosed.
        still_running = expected.ended_at is None and expected.category == "job.completed"
        card.outcomes.append(
            Outcome(
                scenario=truth.scenario,
                seed=truth.seed,
                key=expected.key,
                expected="(running)" if still_running else expected.category,
                predicted=(got.category or "(running)") if got else "(missing)",
                expected_cause=expected.caused_by,
                predicted_cause=keys_of.get(got.caused_by or "") if got else None,
            )
        )
    # First domino: per failed generation in the truth, is its root named as a root by us?
    roots = {a.key for a in truth.attempts if a.category not in ("peer.failure", "job.completed")}
    collateral_roots = {a.caused_by for a in truth.attempts if a.caused_by}
    for root in roots & collateral_roots:
        card.roots_total += 1
        got = mine.get(root)
        followers = [a for a in truth.attempts if a.caused_by == root]
        pointed = {keys_of.get(mine[f.key].caused_by or "") for f in followers if f.key in mine}
        if got is not None and got.category != "peer.failure" and pointed == {root}:
            card.roots_right += 1
    return card


def run_one(
    scenario: str, seed: int, rules: RuleSet, noise: bool = True, keep: Path | None = None
) -> Scorecard:
    """Simulate, ingest into a fresh index, explain and score one bundle (kept under `keep`,
    when given, for a combined index)."""
    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.collector.ingest.run import Ingestor
    from whyjob.core.index import SqliteIndex
    from whyjob.explain.engine import explain_experiment
    from whyjob.sim import simulate

    with tempfile.TemporaryDirectory(prefix="whyjob-acc-") as scratch:
        bundle = Path(scratch) / "bundle"
        truth = simulate(scenario, seed, bundle, noise=noise)
        if keep is not None:
            import shutil

            shutil.copytree(bundle, keep / f"{scenario}-{seed}")
        with SqliteIndex(Path(scratch) / "index.sqlite") as index:
            Ingestor(index, IngestOptions()).ingest([str(bundle)])
            explanation = explain_experiment(
                index, rules, truth.experiment_name, truth.experiment_namespace
            )
    return score(truth, explanation)


def by_scenario(card: Scorecard) -> dict[str, tuple[int, int]]:
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for o in card.outcomes:
        out[o.scenario][1] += 1
        out[o.scenario][0] += int(o.correct)
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}
