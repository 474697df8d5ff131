"""The experiment's timeline as swimlanes: one per rank (its successive pods and restarts as
bars along it, coloured by cause), one per node (notices and maintenance windows shaded, node
events), one per GPU. Built from the Explanation alone, for the timeline JSON route and the web
page alike."""

from __future__ import annotations

import re
from typing import Any, Final

from whyjob.core.taxonomy import CATEGORIES
from whyjob.core.timeutil import format_ts
from whyjob.explain.model import Attempt, Explanation

__all__ = ["COLORS", "NEUTRAL", "SHAPES", "color_of", "elide", "shape_of", "timeline_view"]

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
NEUTRAL: Final = "#6e7781"  # a record no cause claims: an event, a log line
_RUNNING: Final = "#00897b"
_ENTITY: Final = re.compile(r"^(?P<kind>pod|node|gpu|instance|asg|experiment)/(?P<name>[^\s\[]+)")
# Records that describe a span of time shade it instead of marking a point.
_WINDOW_KINDS: Final = ("maintenance.", "spot.", "instance.")
# A record's kind, coloured as the cause family it speaks of when no cause claims the record.
_KIND_FAMILY: Final = (
    ("gpu.", "gpu."),
    ("maintenance.", "node."),
    ("spot.", "node."),
    ("instance.", "node."),
    ("asg.", "node."),
    ("node.", "node."),
    ("pod.", "pod."),
)
# Mark shapes by what a record is; the page draws and explains each.
SHAPES: Final = (
    ("termination", "a run ended: terminated, deleted, evicted, the launcher's report"),
    ("notice", "a warning ahead: maintenance or spot notice, taint, disruption"),
    ("xid", "a GPU fault: Xid, ECC, unhealthy"),
    ("event", "any other event or log line"),
)
_TERMINATION: Final = (
    "container.terminated",
    "pod.deleting",
    "pod.evicted",
    "launcher.failure",
    "instance.state",
)
_NOTICE: Final = ("maintenance.", "spot.", "instance.", "asg.", "node.taint", "pod.disruption")
# Kubernetes' generated-name suffix (its alphabet has no vowels and no 0, 1, 3): the pods a Job
# or ReplicaSet recreates for one rank differ only in it.
_GENERATED: Final = re.compile(r"-[bcdfghjklmnpqrstvwxz2456789]{5}$")
_MARGIN_MS: Final = 120_000
_NOTICE_FOLD_MS: Final = 600_000


def color_of(category: str | None) -> str:
    if category is None:
        return _RUNNING
    return next((color for prefix, color in COLORS if category.startswith(prefix)), "#546e7a")


def shape_of(kind: str) -> str:
    if kind.startswith("gpu."):
        return "xid"
    if kind.startswith(_TERMINATION):
        return "termination"
    if kind.startswith(_NOTICE):
        return "notice"
    return "event"


def elide(text: str, siblings: list[str], limit: int = 26) -> str:
    """`text` in at most `limit` characters, keeping what tells it from its siblings: cut at
    the end when what is left still differs from every sibling (a shared domain), else in the
    middle (`t5-3b-lr3…worker-0`)."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    if not any(o != text and o.startswith(head) for o in siblings):
        return head + "…"
    tail = limit // 2
    return text[: limit - 1 - tail] + "…" + text[-tail:]


def _rank_of(attempt: Attempt) -> str:
    """The rank a run is of: its launcher's rank, else its pod's name without the suffix a
    recreated pod gets, so the successive pods of one rank share a lane."""
    return attempt.rank or _GENERATED.sub("", attempt.pod)


def _owner(category: str | None) -> str:
    known = CATEGORIES.get(category or "")
    return known.owner if known else "-"


def _focus(explanation: Explanation, t0: int, t1: int) -> tuple[int, int]:
    """The opening view: from the first failure to the last, with a margin; everything when
    nothing failed. The story's own steps count as failure times (a notice ahead of the end)."""
    times = [a.ended_at for a in explanation.attempts if a.failed and a.ended_at is not None]
    times += [step.at for step in explanation.chain if step.at is not None and times]
    if not times:
        return t0, t1
    first, last = min(times), max(times)
    margin = max((last - first) // 6, (t1 - t0) // 40, _MARGIN_MS)
    return max(t0, first - margin), min(t1, last + margin)


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
    # Every window is reachable: the view reaches to the end of each announced one, and a
    # warning ahead of the fall is drawn where the node may go.
    for entry in explanation.timeline:
        if entry.end is not None and entry.kind.startswith(_WINDOW_KINDS):
            t1 = max(t1, entry.end)
    for risk in explanation.at_risk:
        t1 = max(t1, risk.starts + (seen - t0) // 5, risk.ends or 0)
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
    by_id = {a.id: a for a in attempts}
    tries: dict[str, int] = {}
    names: dict[str, str] = {}  # attempt id -> "lane #try", how a peer's cause is named
    # Which cause claims a record: the attempt whose evidence it is colours its mark.
    claimed: dict[str, str] = {}
    for attempt in sorted(attempts, key=lambda a: a.category == "peer.failure"):
        for record in attempt.evidence:
            if attempt.category:
                claimed.setdefault(record, attempt.category)
    # A pod name without its suffix stands for a rank only while its pods take turns: pods
    # of a Job that run side by side (parallelism) each get a lane, reused once it is free.
    free_at: dict[str, list[float]] = {}
    pod_end: dict[str, float] = {}
    for attempt in attempts:
        end = attempt.ended_at if attempt.ended_at is not None else float("inf")
        pod_end[attempt.pod] = max(pod_end.get(attempt.pod, 0), end)
    for attempt in sorted(attempts, key=lambda a: (_rank_of(a), a.started_at or 0, a.restart)):
        rank = _rank_of(attempt)
        key = pod_lane.get(attempt.pod) or f"rank:{rank}"
        label = f"rank {attempt.rank}" if attempt.rank else rank
        if attempt.rank is None and attempt.pod not in pod_lane:
            ends = free_at.setdefault(rank, [])
            start = attempt.started_at or attempt.ended_at or 0
            slot = next((i for i, end in enumerate(ends) if end <= start), len(ends))
            if slot == len(ends):
                ends.append(0)
            ends[slot] = pod_end[attempt.pod]
            if slot:
                key, label = f"{key}#{slot + 1}", f"{rank} ({slot + 1})"
        lane(key, label, "rank")
        pod_lane[attempt.pod] = key
        tries[key] = tries.get(key, 0) + 1
        names[attempt.id] = f"{lanes[key]['label']} #{tries[key]}"
        if attempt.node:
            lane(f"node:{attempt.node}", f"node {attempt.node}", "node")
            if attempt.instance_id:
                instance_node[attempt.instance_id] = attempt.node
    for attempt in sorted(attempts, key=lambda a: (_rank_of(a), a.started_at or 0, a.restart)):
        key = pod_lane[attempt.pod]
        start = attempt.started_at or attempt.ended_at or t0
        end = (
            attempt.ended_at
            if attempt.ended_at is not None
            else (seen if attempt.state == "running" else start)
        )
        cause = by_id.get(attempt.caused_by or "")
        caused_by = numbers.get(cause.id) if cause else None
        tried = int(names[attempt.id].rsplit("#", 1)[1])
        lanes[key]["bars"].append(
            {
                "attempt": attempt.id,
                "number": numbers[attempt.id],
                "try": tried,  # 1, 2, ... along its rank
                "pod": attempt.pod,
                "start": start,
                "end": max(end, start),
                "running": attempt.state == "running",
                "category": attempt.category,
                "grade": attempt.grade,
                "owner": _owner(attempt.category),
                "caused_by": caused_by,
                "color": color_of(attempt.category),
                "node": attempt.node,
                "summary": attempt.summary,
                "label": f"#{tried} "
                + (
                    f"peer.failure <- {names[cause.id]}"
                    if cause is not None
                    else (attempt.category or "running")
                ),
                "evidence": attempt.evidence,
            }
        )
    covered: list[tuple[str, int, int]] = [
        (e.entity, e.at, e.end)
        for e in explanation.timeline
        if e.end is not None and e.end > e.at and e.kind.startswith(_WINDOW_KINDS)
    ]
    # A notice a warning is drawn for is shaded once, as the warning.
    warned = {check.evidence for risk in explanation.at_risk for check in risk.reasons}
    for entry in explanation.timeline:
        match = _ENTITY.match(entry.entity)
        kind, name = (match["kind"], match["name"]) if match else ("other", entry.entity)
        if entry.attempt is not None:
            owner = by_id.get(entry.attempt)
            key = pod_lane.get(owner.pod, "other") if owner else "other"
        elif kind == "pod":
            key = pod_lane.get(name) or f"rank:{_GENERATED.sub('', name)}"
            lane(key, _GENERATED.sub("", name), "rank")
        elif kind in ("node", "instance"):
            node = name if kind == "node" else instance_node.get(name, name)
            key = f"node:{node}"
            lane(key, f"node {node}", "node")
        elif kind == "gpu":
            key = f"gpu:{name}"
            lane(key, name if name.startswith("GPU-") else f"GPU {name}", "gpu")
        else:
            key = "other"
        if key == "other":
            lane(key, "other", "other")
        shape = shape_of(entry.kind)
        ended = by_id.get(entry.attempt or "") if shape == "termination" else None
        # Coloured by the cause that claims the record, else a run's end by what ended the
        # run, else by the family its kind speaks of (an Xid line is a GPU's, a taint a node's).
        category = (
            claimed.get(entry.id)
            or (ended.category if ended else None)
            or next(
                (family for prefix, family in _KIND_FAMILY if entry.kind.startswith(prefix)), None
            )
        )
        item = {
            "id": entry.id,
            "at": entry.at,
            "end": entry.end,
            "kind": entry.kind,
            "severity": entry.severity,
            "message": entry.message,
            "time": format_ts(entry.at),
            "shape": shape,
            "color": color_of(category) if category else NEUTRAL,
        }
        window = entry.kind.startswith(_WINDOW_KINDS) and entry.id not in warned
        if window and entry.end is not None and entry.end > entry.at:
            lanes[key]["windows"].append(item)
        elif (
            window
            and entry.end is None
            and not any(
                e == entry.entity and a - _NOTICE_FOLD_MS <= entry.at <= b for e, a, b in covered
            )
        ):
            # A notice without an end (an Azure scheduled event with no duration, an EC2 event
            # not yet dated) shades from its start to the edge of the view: still open.
            lanes[key]["windows"].append(item | {"end": t1, "open": True})
        else:
            lanes[key]["marks"].append(item)
    for risk in explanation.at_risk:
        reasons = "; ".join(check.message for check in risk.reasons)
        lane(f"node:{risk.node}", f"node {risk.node}", "node")["windows"].append(
            {
                "id": risk.reasons[0].evidence if risk.reasons else "",
                "at": risk.starts,
                "end": risk.ends if risk.ends is not None else t1,  # open-ended: to the edge
                "open": risk.ends is None,
                "kind": "at-risk",
                "severity": 4,
                "message": f"AT RISK ({', '.join(risk.ranks)}), in {risk.until}: {reasons}",
                "time": format_ts(risk.starts),
                "shape": "notice",
                "color": "#c62828",
            }
        )
    order = {"rank": 0, "node": 1, "gpu": 2, "other": 3}
    ordered = sorted(
        lanes.values(), key=lambda lane_: (order.get(lane_["kind"], 9), lane_["label"])
    )
    for lane_ in ordered:
        siblings = [o["label"] for o in ordered if o["kind"] == lane_["kind"]]
        lane_["short"] = elide(lane_["label"], siblings, 24)
    verdict = explanation.verdict
    f0, f1 = _focus(explanation, t0, t1)
    return {
        "experiment": explanation.experiment.to_json(),
        "verdict": verdict.to_json(),
        # A failure's colour while it restarts too: a loop of maintenance is not a healthy run.
        "verdict_color": color_of(
            verdict.category
            if verdict.outcome != "running" or _owner(verdict.category) != "-"
            else None
        ),
        "t0": t0,
        "t1": t1,
        "t0_text": format_ts(t0),
        "t1_text": format_ts(t1),
        "focus": {"t0": f0, "t1": f1},
        "lanes": ordered,
        "chain": [step.to_json() for step in explanation.chain],
        "gpu_hours": explanation.gpu_hours.to_json(),
        "retry_helps": explanation.retry_helps.to_json(),
        "loop": explanation.loop.to_json(),
        "missing": explanation.missing,
        "at_risk": [risk.to_json() for risk in explanation.at_risk],
    }
