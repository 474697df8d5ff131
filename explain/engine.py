"""From an experiment name to its Explanation: gather, match, diagnose, cascade, tell."""

from __future__ import annotations

import time

from whyjob.core import telemetry
from whyjob.core.evidence import Evidence
from whyjob.core.index import Index
from whyjob.explain import story
from whyjob.explain.attempts import build_attempts
from whyjob.explain.cascade import build_chain, first_dominoes
from whyjob.explain.causes import CauseFinder, Found
from whyjob.explain.gather import Scene, gather
from whyjob.explain.matching import Matcher
from whyjob.explain.model import Attempt, Cause, ExperimentInfo, Explanation
from whyjob.explain.ruleset import RuleSet

__all__ = ["explain_experiment", "explain_scene"]


def explain_experiment(
    index: Index,
    rules: RuleSet,
    name: str,
    namespace: str | None = None,
    *,
    now: int | None = None,
    cluster: str | None = None,
) -> Explanation:
    """The experiment's explanation; `now` (default: the clock) is when running ranks are
    judged at risk; `cluster` picks one of several clusters' experiments of that name."""
    from whyjob.explain.hardware import implicated

    # No names on whyjob's own spans: they go to the operators' backend, which every tenant's
    # experiments share (the story's own trace, asked for by its reader, carries them).
    with telemetry.span("whyjob.explain"):
        with telemetry.span("whyjob.explain.gather"):
            scene = gather(index, name, namespace, cluster)
        with telemetry.span("whyjob.explain.rules", records=len(scene.all_records())):
            explanation = explain_scene(scene, rules, index=index, now=now)
    explanation.implicated = implicated(
        index,
        explanation.experiment.namespace,
        explanation.experiment.name,
        explanation.attempts,
        cluster=scene.cluster,
    )
    return explanation


def _unexplained(attempt: Attempt) -> Cause:
    if attempt.exit_code is not None:
        what = f"exit code {attempt.exit_code}" + (f" ({attempt.reason})" if attempt.reason else "")
    elif attempt.reason:
        what = attempt.reason
    else:
        what = "no termination record"
    return Cause(
        category="unknown",
        grade="possible",
        summary=f"ended with {what}; no rule matched the evidence",
        rule="-",
        score=0.0,
        at=attempt.ended_at,
        missing=["no evidence names a cause for this run"],
    )


def explain_scene(
    scene: Scene, rules: RuleSet, *, index: Index | None = None, now: int | None = None
) -> Explanation:
    """The explanation of a gathered scene; with the index, running ranks are also judged at
    risk (as of `now`, default the clock) from what it holds about their nodes."""
    matches = Matcher(rules).match_all(scene.all_records())
    attempts = build_attempts(scene)
    finder = CauseFinder(rules, scene, matches)
    best: dict[str, Found] = {}
    for attempt in attempts:
        if attempt.state == "running":
            continue
        found = finder.find(attempt)
        attempt.causes = [f.cause for f in found[:5]]
        top = found[0].cause if found else _unexplained(attempt)
        if found:
            best[attempt.id] = found[0]
        # One line however the quoted message was wrapped: summaries are sentences.
        attempt.category, attempt.grade = top.category, top.grade
        attempt.summary = " ".join(top.summary.split())
        attempt.evidence = list(top.evidence)
        attempt.missing = list(top.missing)
    roots = first_dominoes(attempts, best)
    coverage = story.coverage_notes(scene, attempts)
    for attempt in attempts:
        if attempt.failed and attempt.category != "peer.failure":
            relevant = [
                n for n in coverage if not attempt.node or attempt.node in n or "no cloud" in n
            ]
            attempt.missing = list(dict.fromkeys([*attempt.missing, *relevant]))
    loop = story.loop_state(attempts, roots)
    verdict = story.verdict(attempts, roots, loop)
    root = next((a for a in attempts if a.id == verdict.root_attempt), None)
    chain = build_chain(root, best.get(root.id), attempts) if root else []
    cited = {e for a in attempts for e in a.evidence} | {e for step in chain for e in step.evidence}
    matched = set(matches)
    experiment = ExperimentInfo(
        name=scene.name,
        namespace=scene.namespace,
        launcher=scene.launcher,
        recognised_by=scene.recognised_by,
        pods=len(scene.pods),
        ranks=sorted({p.rank for p in scene.pods if p.rank}),
        first_seen=min((a.started_at for a in attempts if a.started_at), default=None),
        last_seen=max((a.ended_at or a.started_at or 0 for a in attempts), default=None),
        cluster=scene.cluster,
    )
    checkpoints = _checkpoints(scene, attempts)
    warnings = []
    if index is not None and any(a.state == "running" for a in attempts):
        from whyjob.explain.risk import at_risk

        moment = now if now is not None else int(time.time() * 1000)
        warnings = at_risk(index, rules, attempts, checkpoints, now=moment, cluster=scene.cluster)
    return Explanation(
        experiment=experiment,
        verdict=verdict,
        attempts=sorted(
            attempts, key=lambda a: (a.started_at or a.ended_at or 0, a.rank or "", a.id)
        ),
        chain=chain,
        loop=loop,
        gpu_hours=story.gpu_hours(attempts, checkpoints),
        retry_helps=story.retry_advice(verdict, attempts, roots, loop),
        timeline=story.timeline(scene, attempts, cited, matched),
        missing=coverage,
        generated_at=int(time.time() * 1000),
        rules_version=rules.version,
        at_risk=warnings,
    )


def _checkpoints(scene: Scene, attempts: list[Attempt]) -> dict[str, int]:
    """Attempt id -> time of its last saved checkpoint."""
    out: dict[str, int] = {}
    for attempt in attempts:
        saves: list[Evidence] = [
            ev
            for ev in scene.by_pod.get(attempt.pod_uid, ())
            if ev.kind == "log.checkpoint"
            and ev.container == attempt.container
            and ev.attrs.get("restart") in (None, attempt.restart)
            and ev.attrs.get("phase") in ("saved", "save")
        ]
        if saves:
            out[attempt.id] = max(ev.ts for ev in saves)
    return out
