"""The experiment's timeline as swimlanes: one per rank (its attempts as bars, coloured by
cause), one per node (notices and maintenance windows shaded, node events), one per GPU. Built
from the Explanation alone, for the timeline JSON route and the web page alike."""

from __future__ import annotations

import re
from typing import Any, Final

from whyjob.core.timeutil import format_ts
from whyjob.explain.model import Explanation

__all__ = ["COLORS", "color_of", "timeline_view"]

COLORS: Final = (
    ("job.completed", "#2e7d32"),
    ("peer.failure", "#9e9e9e"),
    ("gpu.", "#c62828"),
    ("node.", "#ef6c00"),
    ("pod.", "#6d4c41"),
    ("container.", "#ad1457"),
    ("app.", "#6a1b9a"),
    ("storage.", "#8d6e63"),
    ("startup.", "#1565c0"),
)
_RUNNING: Final = "#00897b"
_ENTITY: Final = re.compile(r"^(?P<kind>pod|node|gpu|instance|asg|experiment)/(?P<name>[^\s\[]+)")
# Records that describe a span of time shade it instead of marking a point.
_WINDOW_KINDS: Final = ("maintenance.", "spot.", "instance.")


def color_of(category: str | None) -> str:
    if category is None:
        return _RUNNING
    return next((color for prefix, color in COLORS if category.startswith(prefix)), "#546e7a")


def timeline_view(explanation: Explanation, *, now_ms: int) -> dict[str, Any]:
    attempts = explanation.attempts
    times = [t for a in attempts for t in (a.started_at, a.ended_at) if t is not None]
    times += [e.at for e in explanation.timeline]
    # The span of what was observed: a run still going is drawn to the last record seen, not
    # to today, or an old experiment's story would shrink to a sliver at the left.
    t0 = min(times, default=now_ms - 3_600_000)
    t1 = max(times, default=now_ms)
    if t1 <= t0:
        t1 = t0 + 60_000
    seen = min(t1, now_ms)  # where running bars end: never in the future (an announced window is)
    # A warning ahead of the fall is drawn where the node may go: the view reaches into it.
    for risk in explanation.at_risk:
        t1 = max(t1, risk.starts + (seen - t0) // 5)
    pad = (t1 - t0) // 50
    t0, t1 = t0 - pad, t1 + pad
    numbers = {
        a.id: n for n, a in enumerate(sorted(attempts, key=lambda a: (a.started_at or 0, a.id)))
    }
    lanes: dict[str, dict[str, Any]] = {}

    def lane(key: str, label: str, kind: str) -> dict[str, Any]:
        return lanes.setdefault(
            key, {"id": key, "label": label, "kind": kind, "bars": [], "windows": [], "marks": []}
        )

    pod_lane: dict[str, str] = {}
    instance_node: dict[str, str] = {}
    for attempt in sorted(attempts, key=lambda a: (a.rank or a.pod, a.started_at or 0)):
        key = f"rank:{attempt.rank or attempt.pod}"
        lane(key, f"rank {attempt.rank}" if attempt.rank else attempt.pod, "rank")
        pod_lane[attempt.pod] = key
        if attempt.node:
            lane(f"node:{attempt.node}", f"node {attempt.node}", "node")
            if attempt.instance_id:
                instance_node[attempt.instance_id] = attempt.node
        start = attempt.started_at or attempt.ended_at or t0
        end = (
            attempt.ended_at
            if attempt.ended_at is not None
            else (seen if attempt.state == "running" else start)
        )
        caused_by = numbers.get(attempt.caused_by) if attempt.caused_by else None
        lanes[key]["bars"].append(
            {
                "attempt": attempt.id,
                "number": numbers[attempt.id],
                "start": start,
                "end": max(end, start),
                "running": attempt.state == "running",
                "category": attempt.category,
                "grade": attempt.grade,
                "caused_by": caused_by,
                "color": color_of(attempt.category),
                "node": attempt.node,
                "summary": attempt.summary,
                "label": f"#{numbers[attempt.id]} "
                + (
                    f"peer.failure <- #{caused_by}"
                    if caused_by is not None
                    else (attempt.category or "running")
                ),
                "evidence": attempt.evidence,
            }
        )
    for entry in explanation.timeline:
        match = _ENTITY.match(entry.entity)
        kind, name = (match["kind"], match["name"]) if match else ("other", entry.entity)
        if entry.attempt is not None:
            owner = next((a for a in attempts if a.id == entry.attempt), None)
            key = pod_lane.get(owner.pod, "other") if owner else "other"
        elif kind == "pod":
            key = pod_lane.get(name, f"pod:{name}")
            lane(key, name, "rank")
        elif kind in ("node", "instance"):
            node = name if kind == "node" else instance_node.get(name, name)
            key = f"node:{node}"
            lane(key, f"node {node}", "node")
        elif kind == "gpu":
            key = f"gpu:{name}"
            lane(key, f"GPU {name[:16]}", "gpu")
        else:
            key = "other"
            lane(key, "other", "other")
        item = {
            "id": entry.id,
            "at": entry.at,
            "end": entry.end,
            "kind": entry.kind,
            "severity": entry.severity,
            "message": entry.message,
            "time": format_ts(entry.at),
        }
        if entry.end is not None and entry.end > entry.at and entry.kind.startswith(_WINDOW_KINDS):
            lanes[key]["windows"].append(item)
        else:
            lanes[key]["marks"].append(item)
    for risk in explanation.at_risk:
        reasons = "; ".join(check.message for check in risk.reasons)
        lane(f"node:{risk.node}", f"node {risk.node}", "node")["windows"].append(
            {
                "id": risk.reasons[0].evidence if risk.reasons else "",
                "at": risk.starts,
                "end": risk.ends if risk.ends is not None else t1,  # open-ended: to the edge
                "kind": "at-risk",
                "severity": 4,
                "message": f"AT RISK ({', '.join(risk.ranks)}), in {risk.until}: {reasons}",
                "time": format_ts(risk.starts),
            }
        )
    order = {"rank": 0, "node": 1, "gpu": 2, "other": 3}
    verdict = explanation.verdict
    return {
        "experiment": explanation.experiment.to_json(),
        "verdict": verdict.to_json(),
        "verdict_color": color_of(verdict.category if verdict.outcome != "running" else None),
        "t0": t0,
        "t1": t1,
        "t0_text": format_ts(t0),
        "t1_text": format_ts(t1),
        "lanes": sorted(
            lanes.values(), key=lambda lane_: (order.get(lane_["kind"], 9), lane_["label"])
        ),
        "chain": [step.to_json() for step in explanation.chain],
        "gpu_hours": explanation.gpu_hours.to_json(),
        "retry_helps": explanation.retry_helps.to_json(),
        "loop": explanation.loop.to_json(),
        "missing": explanation.missing,
        "at_risk": [risk.to_json() for risk in explanation.at_risk],
    }
