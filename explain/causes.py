"""Candidate causes of one attempt's end: every explanation rule whose conditions hold.

For each rule, each `when` condition asks for a signal in a scope (the attempt, its pod, its
node, instance, GPUs, ASG, the experiment or the peer ranks) inside a window around the
attempt's end; `unless` conditions veto. A rule that holds becomes a `Cause` with its grade,
the records behind it and a summary rendered from them. Causes are ranked specific before
generic (a catch-all never beats a cause read from the same evidence), then by grade, then rule
priority, then by how close their root evidence came before the end; a cause printed first in a
run beats the symptoms it set off, and a run that reported finishing ended normally unless a
failure came after the finish.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from whyjob.core.evidence import Evidence
from whyjob.core.taxonomy import Grade
from whyjob.core.timeutil import format_duration, format_ts
from whyjob.explain.gather import Scene
from whyjob.explain.model import Attempt, Cause
from whyjob.explain.ruleset import Explanation, Requirement, RuleSet
from whyjob.explain.templating import render

__all__ = ["CauseFinder", "Clock", "Found"]

_EVIDENCE_PER_CONDITION = 5
_SPECIFIC = 10_000  # a specific cause outranks every generic one, whatever the grades


@dataclass(slots=True)
class Found:
    """A cause with the records it rests on (kept for the chain and the timeline)."""

    cause: Cause
    records: dict[str, list[Evidence]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Clock:
    """The times a summary shows, when they differ from the ones matching used.

    A paste is matched in paste order on a made-up clock; its summaries still show each line's
    own time (`None`: the line had none) and gaps only where both ends carry one.
    """

    shown: dict[int, int | None]
    end: int | None

    def at(self, ev: Evidence) -> str:
        ts = self.shown.get(ev.id)
        return format_ts(ts) if ts is not None else "an unstated time"

    def gap(self, ev: Evidence, anchor: int) -> str:
        ts = self.shown.get(ev.id)
        side = "before" if ev.ts <= anchor else "after"
        if ts is None or self.end is None:
            return side
        return format_duration(abs(self.end - ts)) + (" before" if ts <= self.end else " after")


def _flatten(
    ev: Evidence, captures: dict[str, str], anchor: int, count: int, clock: Clock | None
) -> dict[str, Any]:
    values: dict[str, Any] = {
        k: v
        for k, v in ev.attrs.items()
        if isinstance(v, str | int | float) and not isinstance(v, bool)
    }
    values.update(captures)
    entities = {
        "node": ev.node,
        "gpu": ev.gpu_uuid,
        "instance": ev.instance_id,
        "asg": ev.asg,
        "pod": ev.pod,
        "container": ev.container,
    }
    # An entity the record does not carry leaves an attribute of the same name standing.
    values.update({k: v for k, v in entities.items() if v is not None or k not in values})
    source_text = ev.attrs.get("message")
    values.update(
        message=ev.message,
        # The source's own words where it has them (a condition's or status's message).
        text=source_text if isinstance(source_text, str) and source_text else ev.message,
        kind=ev.kind,
        at=clock.at(ev) if clock else format_ts(ev.ts),
        count=count,
        gap=clock.gap(ev, anchor)
        if clock
        else format_duration(abs(anchor - ev.ts)) + (" before" if ev.ts <= anchor else " after"),
    )
    return values


# Frameworks print their farewell from `finally` blocks and teardown hooks (detectron2's
# "Overall training speed", a progress bar closed at 100%), so a failure this shortly before the
# finish line is what ended the run, not an error it survived.
_FAREWELL_MS = 10_000


class CauseFinder:
    """Evaluates a rule set against one scene."""

    def __init__(
        self,
        rules: RuleSet,
        scene: Scene,
        matches: dict[int, dict[str, dict[str, str]]],
        clock: Clock | None = None,
        skew_ms: int | None = None,
        farewell_ms: int = _FAREWELL_MS,
    ):
        self.clock = clock
        # How far apart two records' clocks may be and still count as "first" (nodes' clocks
        # drift); a paste is one stream in its own order, so there it is 0.
        self.skew_ms = _SKEW_MS if skew_ms is None else skew_ms
        # How long before a run's word that it finished a failure still counts as its end (a
        # crash whose teardown printed the farewell); a paste counts it in lines.
        self.farewell_ms = farewell_ms
        self.rules = rules
        self.scene = scene
        self.matches = matches
        self._peer_cache: dict[str, list[Evidence]] = {}
        # (attempt, scope) -> the scope's records that raise any signal, and their times,
        # sorted: a requirement's window is then two bisections, not a scan of the scope.
        self._matched: dict[tuple[int, str], tuple[Attempt, list[int], list[Evidence]]] = {}

    # -- scopes ------------------------------------------------------------------------------

    def scope(self, attempt: Attempt, scope: str) -> Iterable[Evidence]:
        scene = self.scene
        if scope == "attempt":
            return [
                ev
                for ev in scene.by_pod.get(attempt.pod_uid, ())
                if ev.container in (None, attempt.container)
                and ev.attrs.get("restart") in (None, attempt.restart)
            ]
        if scope == "pod":
            return scene.by_pod.get(attempt.pod_uid, ())
        if scope == "node":
            return scene.by_node.get(attempt.node or "", ())
        if scope == "instance":
            return scene.by_instance.get(attempt.instance_id or "", ())
        if scope == "gpu":
            return [ev for gpu in self._gpus(attempt) for ev in scene.by_gpu.get(gpu, ())]
        if scope == "asg":
            asg = scene.instance_asg.get(attempt.instance_id or "")
            return scene.by_asg.get(asg or "", ())
        if scope == "host":
            return [
                *self.scope(attempt, "node"),
                *self.scope(attempt, "instance"),
                *self.scope(attempt, "gpu"),
            ]
        if scope == "experiment":
            return scene.experiment_records
        if attempt.pod_uid not in self._peer_cache:
            self._peer_cache[attempt.pod_uid] = [
                ev
                for uid, records in scene.by_pod.items()
                if uid != attempt.pod_uid
                for ev in records
            ]
        return self._peer_cache[attempt.pod_uid]

    def _gpus(self, attempt: Attempt) -> set[str]:
        held = self.scene.pod_gpus.get(f"{attempt.namespace}/{attempt.pod}")
        return held or self.scene.node_gpus.get(attempt.node or "", set())

    # -- evaluation --------------------------------------------------------------------------

    @staticmethod
    def anchor(attempt: Attempt) -> int:
        return attempt.ended_at or attempt.started_at or 0

    def _matched_in(self, attempt: Attempt, scope: str) -> tuple[list[int], list[Evidence]]:
        key = (id(attempt), scope)
        cached = self._matched.get(key)
        if cached is None:
            matches = self.matches
            records = sorted(
                (ev for ev in self.scope(attempt, scope) if ev.id in matches),
                key=lambda ev: ev.ts,
            )
            # The attempt is kept with its entry so its id() cannot be reused meanwhile.
            cached = self._matched[key] = (attempt, [ev.ts for ev in records], records)
        return cached[1], cached[2]

    def _hits(self, attempt: Attempt, requirement: Requirement, anchor: int) -> list[Evidence]:
        low, high = anchor - requirement.before, anchor + requirement.after
        if requirement.since_start and attempt.started_at is not None:
            low = max(low, attempt.started_at)
        signals, matches = requirement.signals, self.matches
        hits: dict[int, Evidence] = {}
        for scope in requirement.scopes:
            stamps, records = self._matched_in(attempt, scope)
            for ev in records[bisect_left(stamps, low) : bisect_right(stamps, high)]:
                if not signals.isdisjoint(matches[ev.id]):
                    hits[ev.id] = ev
        return sorted(hits.values(), key=lambda ev: (ev.ts, ev.id))

    def find(self, attempt: Attempt) -> list[Found]:
        anchor = self.anchor(attempt)
        found: list[Found] = []
        for rule in self.rules.explanations:
            if attempt.state not in rule.states:
                continue
            hits: dict[str, list[Evidence]] = {}
            for requirement in rule.when:
                records = self._hits(attempt, requirement, anchor)
                if len(records) < requirement.min_count:
                    break
                hits[requirement.alias] = records
            else:
                if any(self._hits(attempt, veto, anchor) for veto in rule.unless):
                    continue
                found.append(self._cause(rule, attempt, anchor, hits))
        found.sort(key=lambda f: (-f.cause.score, -(f.cause.at or 0)))
        return _completed_unless_failed_after(
            _root_before_symptoms(found, self.skew_ms), self.farewell_ms
        )

    def _cause(
        self, rule: Explanation, attempt: Attempt, anchor: int, hits: dict[str, list[Evidence]]
    ) -> Found:
        values: dict[str, Any] = {
            "pod": attempt.pod,
            "container": attempt.container,
            "restart": attempt.restart,
            "rank": attempt.rank or attempt.pod,
            "node": attempt.node,
            "instance": attempt.instance_id,
            "namespace": attempt.namespace,
            "experiment": self.scene.name,
            "exit_code": attempt.exit_code,
            # A paste often shows a deletion or a signal but not the container's exit status.
            "exit": "no exit code recorded"
            if attempt.exit_code is None
            else f"exit code {attempt.exit_code}",
            "reason": attempt.reason,
        }
        requirements = {r.alias: r for r in rule.when}
        for alias, records in hits.items():
            first = records[0]
            raised = self.matches.get(first.id, {})
            captures: dict[str, str] = {}
            for name in sorted(requirements[alias].signals & raised.keys()):
                captures.update(raised[name])
            values[alias] = _flatten(first, captures, anchor, len(records), self.clock)
        root_at = hits[rule.root][0].ts
        # Closer root evidence ranks higher among equals: a minute counts for 1/1000 of a point.
        proximity = max(0.0, 1.0 - abs(anchor - root_at) / 3_600_000 / 24) / 10
        evidence = list(
            dict.fromkeys(
                ev.public_id
                for records in hits.values()
                for ev in records[:_EVIDENCE_PER_CONDITION]
            )
        )
        cause = Cause(
            category=rule.category,
            grade=rule.grade,
            summary=render(rule.summary, values),
            rule=rule.id,
            score=(0 if rule.generic else _SPECIFIC)
            + Grade(rule.grade).rank * 1000
            + rule.priority
            + proximity,
            at=root_at,
            evidence=evidence,
            missing=[render(note, values) for note in rule.missing],
            detail={key: render(template, values) for key, template in rule.detail.items()},
            collateral=rule.collateral,
        )
        return Found(cause, hits)


_SKEW_MS = 15_000
_RANK_SYMPTOMS = frozenset({"app.nccl_timeout", "app.nccl_error", "peer.failure", "unknown"})


def _root_before_symptoms(found: list[Found], skew_ms: int) -> list[Found]:
    """A symptom (an NCCL timeout, a launcher's SIGTERM) never outranks a cause of its own that
    came first in the same run: in one log, the error printed first is the root, whatever the
    rules' priorities say about the errors that followed."""
    if not found or not found[0].cause.collateral:
        return found
    symptom_at = found[0].cause.at
    symptom_evidence = set(found[0].cause.evidence)
    for position, candidate in enumerate(found):
        cause = candidate.cause
        if cause.collateral or cause.category == "unknown":
            continue
        if cause.score < _SPECIFIC and (
            symptom_evidence & set(cause.evidence) or found[0].cause.category not in _RANK_SYMPTOMS
        ):
            # A catch-all read from the symptom's own words says less than the symptom; and
            # only another rank's failure seen from this one (a timeout, a launcher's stop)
            # yields to whatever generic error the run printed first.
            continue
        if symptom_at is None or cause.at is None or cause.at <= symptom_at + skew_ms:
            return [candidate, *found[:position], *found[position + 1 :]]
    return found


def _completed_unless_failed_after(found: list[Found], farewell_ms: int) -> list[Found]:
    """A run that reported finishing ended normally, whatever errors it survived on the way; a
    failure recorded with, after, or just before the finish (a crash while saving the final
    model; a crash whose teardown printed the farewell) wins."""
    finished = [f for f in found if f.cause.category == "job.completed"]
    if not finished:
        return found
    last = max((f.cause.at or 0) for f in finished)
    after = [
        f
        for f in found
        if f not in finished
        and f.cause.category != "unknown"
        and (f.cause.at or 0) >= last - farewell_ms
    ]
    rest = [f for f in found if f not in finished and f not in after]
    return [*after, *finished, *rest]
