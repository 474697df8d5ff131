"""Server-rendered pages: the experiments index and one experiment's timeline. Jinja2 with
autoescaping; no scripts or styles from anywhere but the page itself, so it works offline."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape

from whyjob.api.access import Principal
from whyjob.api.timeline import COLORS, NEUTRAL, SHAPES, timeline_view
from whyjob.core.taxonomy import CATEGORIES
from whyjob.core.timeutil import format_ts
from whyjob.explain.model import Explanation

if TYPE_CHECKING:
    from whyjob.explain.fleetmodel import Fleet
    from whyjob.explain.nodehistory import NodeHistory

__all__ = [
    "evidence_page",
    "experiment_page",
    "fleet_page",
    "index_page",
    "node_page",
    "page_policy",
]

_WIDTH = 1000  # the plot's coordinates before its script fits them to the screen
_LANE = 30
_AXIS = 26
_GROUP_MS = 1000  # records of one lane, shape and colour this close are one mark
# An event repeated word for word (a BackOff every few seconds) is one mark.
_REPEAT_MS = 900_000
_TIP = 240
# Who acts on a failure, as the page says it next to the verdict.
_OWNERS = {
    "infra": "the cloud, the node or its GPUs; not the job",
    "platform": "the cluster: scheduling, autoscaling, eviction",
    "user": "the job itself: its code, config or image",
}


@cache
def page_policy() -> str:
    """The pages' Content-Security-Policy: nothing from elsewhere, no framing, and of scripts
    only the pages' own, pinned by their hashes (computed from the templates, so an edit to a
    script cannot be forgotten here)."""
    import base64
    import hashlib
    import re

    loader = _environment().loader
    assert loader is not None
    hashes = []
    for name in loader.list_templates():
        source = loader.get_source(_environment(), name)[0]
        for script in re.findall(r"<script>(.*?)</script>", source, re.DOTALL):
            digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
            hashes.append(f"'sha256-{digest}'")
    return (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        f"script-src {' '.join(hashes) or chr(39) + 'none' + chr(39)}; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


@cache
def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("whyjob.api", "templates"),
        autoescape=select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )


def index_page(
    principal: Principal, experiments: list[dict[str, Any]], query: str | None, status: str | None
) -> str:
    return (
        _environment()
        .get_template("index.html.j2")
        .render(principal=principal, experiments=experiments, query=query, status=status)
    )


def _ticks(t0: int, t1: int, x: Callable[[int], float]) -> list[dict[str, Any]]:
    """Axis ticks for the opening view (the page's script redraws them on zoom)."""
    span = t1 - t0
    minutes = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080, 20160, 43200)
    steps = [60_000 * m for m in minutes]
    step = next((s for s in steps if span / s <= 8), int(span / 8) or 1)
    days = span > 86_400_000
    return [
        {"x": x(at), "label": format_ts(at)[5 if days else 11 : 16].replace("T", " ")}
        for at in range((t0 // step + 1) * step, t1, step)
    ]


def _marks(marks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A lane's records as marks: a burst (a traceback's forty lines in one second) or an event
    repeated word for word is one mark that counts them, leads with its most severe record and
    quotes its last, instead of forty marks on one spot of which only the top one could be
    pointed at. Records no cause claims come first, so the evidence is drawn on top."""
    groups: list[list[dict[str, Any]]] = []
    open_: dict[tuple[str, str], list[dict[str, Any]]] = {}  # the newest group of each look
    for mark in sorted(marks, key=lambda m: m["at"]):
        look = (mark["shape"], mark["color"])
        group = open_.get(look)
        gap = mark["at"] - group[-1]["at"] if group is not None else None
        if (
            group is not None
            and gap is not None
            and (
                gap <= _GROUP_MS
                or (
                    gap <= _REPEAT_MS
                    and mark["shape"] == "event"  # each termination ends a run of its own
                    and (mark["kind"], mark["message"]) == (group[-1]["kind"], group[-1]["message"])
                )
            )
        ):
            group.append(mark)
        else:
            open_[look] = [mark]
            groups.append(open_[look])
    out = []
    for group in groups:
        lead = max(group, key=lambda m: (m["severity"], -m["at"]))
        tip = f"{lead['time']} {lead['kind']}: {lead['message'][:_TIP]}"
        if len(group) > 1:
            last = group[-1] if group[-1] is not lead else group[-2]
            kinds = ", ".join(sorted({m["kind"] for m in group}))
            tip += (
                f"\n+{len(group) - 1} more ({kinds}) to {group[-1]['time'][11:]};"
                f" {last['kind']}: {last['message'][: _TIP // 2]}"
            )
        out.append(
            {
                "at": group[0]["at"],
                "id": lead["id"],
                "kind": lead["kind"],
                "shape": lead["shape"],
                "color": lead["color"],
                "size": 6 if lead["severity"] >= 40 else (5 if lead["severity"] >= 30 else 4),
                "count": len(group),
                "tip": tip,
            }
        )
    return sorted(out, key=lambda m: m["color"] != NEUTRAL)


def experiment_page(
    principal: Principal, explanation: Explanation, status: str, now_ms: int
) -> str:
    view = timeline_view(explanation, now_ms=now_ms)
    t0: int = view["t0"]
    f0: int = view["focus"]["t0"]
    f1: int = view["focus"]["t1"]

    def x(at: int) -> float:
        """Where a moment is in the opening view (the script redraws every zoom)."""
        return round((at - f0) / (f1 - f0) * _WIDTH, 1)

    def sec(at: int) -> int:
        return round((at - t0) / 1000)

    for lane in view["lanes"]:
        lane["marks"] = _marks(lane["marks"])
    used = {b["color"] for lane in view["lanes"] for b in lane["bars"]} | {
        m["color"] for lane in view["lanes"] for m in lane["marks"]
    }
    legend = [
        (prefix.rstrip("."), color)
        for prefix, color in (*COLORS, ("running", "#00897b"))
        if color in used
    ]
    shapes = {m["shape"] for lane in view["lanes"] for m in lane["marks"]}
    failed = [a for a in explanation.attempts if a.failed and a.category != "peer.failure"]
    owners = Counter(CATEGORIES[a.category].owner for a in failed if a.category in CATEGORIES)
    geometry = {
        "width": _WIDTH,
        "lane": _LANE,
        "axis": _AXIS,
        "height": _AXIS + _LANE * max(1, len(view["lanes"])),
        "ticks": _ticks(f0, f1, x),
        "f0": sec(f0),
        "f1": sec(f1),
        "end": sec(view["t1"]),
    }
    return (
        _environment()
        .get_template("experiment.html.j2")
        .render(
            principal=principal,
            v=view,
            g=geometry,
            x=x,
            sec=sec,
            status=status,
            legend=legend,
            shapes=[(shape, meaning) for shape, meaning in SHAPES if shape in shapes],
            owner_meaning=_OWNERS.get(view["verdict"]["owner"]),
            owners=sorted(owners.items(), key=lambda item: -item[1]),
            windows={
                "open": any(w.get("open") for lane in view["lanes"] for w in lane["windows"]),
                "closed": any(
                    not w.get("open") and w["kind"] != "at-risk"
                    for lane in view["lanes"]
                    for w in lane["windows"]
                ),
            },
        )
    )


def evidence_page(principal: Principal, record: Mapping[str, Any]) -> str:
    attrs = orjson.dumps(record["attrs"], option=orjson.OPT_INDENT_2).decode()
    return (
        _environment()
        .get_template("evidence.html.j2")
        .render(principal=principal, r=record, attrs=attrs)
    )


_CHART_WIDTH, _CHART_HEIGHT, _CHART_LEFT, _CHART_BOTTOM = 1000, 220, 48, 18
_WEEK_MS = 7 * 86_400_000


def _family(category: str) -> str:
    """The cause family a chart colour stands for (the timeline's colours)."""
    return next(
        (prefix.rstrip(".") for prefix, _ in COLORS if category.startswith(prefix)), "other"
    )


def _loss_chart(fleet: Fleet) -> dict[str, Any]:
    """Stacked bars of GPU-hours lost per week (Monday to Monday, UTC), by cause family: inline
    SVG geometry, nothing for the page to fetch or compute."""
    import math

    first_monday = (fleet.since // 86_400_000 - (fleet.since // 86_400_000 + 3) % 7) * 86_400_000
    weeks: dict[int, dict[str, float]] = {}
    for week in range(first_monday, fleet.until + 1, _WEEK_MS):
        weeks[week] = {}
    for run in fleet.runs:
        week = first_monday + (run.ended_at - first_monday) // _WEEK_MS * _WEEK_MS
        family = _family(run.category)
        weeks.setdefault(week, {})[family] = (
            weeks.get(week, {}).get(family, 0.0) + run.gpu_hours_lost
        )
    # Framed on the weeks that lost something: a year's window of one bad month is a month.
    busy = [week for week, families in weeks.items() if families]
    if busy:
        first, last = min(busy) - _WEEK_MS, max(busy) + _WEEK_MS
        weeks = {w: f for w, f in weeks.items() if first <= w <= last}
    top = max((sum(v.values()) for v in weeks.values()), default=0.0) or 1.0
    scale = 10 ** math.floor(math.log10(top))
    ceiling = math.ceil(top / scale) * scale
    plot = _CHART_HEIGHT - _CHART_BOTTOM - 8
    slot = (_CHART_WIDTH - _CHART_LEFT) / max(1, len(weeks))
    order = [prefix.rstrip(".") for prefix, _ in COLORS] + ["other"]
    colors = {prefix.rstrip("."): color for prefix, color in COLORS} | {"other": "#546e7a"}
    bars: list[dict[str, Any]] = []
    every = max(1, round(len(weeks) / 10))
    for number, (week, families) in enumerate(sorted(weeks.items())):
        y = float(_CHART_HEIGHT - _CHART_BOTTOM)
        segments: list[dict[str, Any]] = []
        for family in order:
            hours = families.get(family, 0.0)
            if hours <= 0:
                continue
            height = hours / ceiling * plot
            y -= height
            segments.append(
                {
                    "cause": family,
                    "hours": hours,
                    "y": round(y, 1),
                    "height": round(height, 1),
                    "color": colors[family],
                }
            )
        bars.append(
            {
                "week": format_ts(week)[:10],
                "x": round(_CHART_LEFT + number * slot + slot * 0.15, 1),
                "width": round(slot * 0.7, 1),
                "total": round(sum(families.values()), 1),
                "segments": segments,
                "label": format_ts(week)[5:10] if number % every == 0 else "",
            }
        )
    ticks = [
        {
            "y": round(_CHART_HEIGHT - _CHART_BOTTOM - step / 4 * plot, 1),
            "label": f"{ceiling * step / 4:g}",
        }
        for step in range(5)
    ]
    used = {s["cause"] for bar in bars for s in bar["segments"]}
    return {
        "width": _CHART_WIDTH,
        "height": _CHART_HEIGHT,
        "left": _CHART_LEFT,
        "bars": bars,
        "ticks": ticks,
        "legend": [(family, colors[family]) for family in order if family in used],
    }


def fleet_page(principal: Principal, fleet: Fleet, window: str, limit: int = 50) -> str:
    return (
        _environment()
        .get_template("nodes.html.j2")
        .render(
            principal=principal,
            fleet=fleet,
            window=window,
            limit=limit,
            since=format_ts(fleet.since),
            until=format_ts(fleet.until),
            lost=sum(r.gpu_hours_lost for r in fleet.runs),
            chart=_loss_chart(fleet),
            ts=format_ts,
        )
    )


def node_page(principal: Principal, history: NodeHistory, fleet: Fleet, window: str) -> str:
    return (
        _environment()
        .get_template("node.html.j2")
        .render(
            principal=principal,
            h=history,
            window=window,
            since=format_ts(fleet.since),
            until=format_ts(fleet.until),
            ts=format_ts,
        )
    )
