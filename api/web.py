"""Server-rendered pages: the experiments index and one experiment's timeline. Jinja2 with
autoescaping; no scripts or styles from anywhere but the page itself, so it works offline."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape

from whyjob.api.access import Principal
from whyjob.api.timeline import COLORS, timeline_view
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

_WIDTH = 1000
_LANE = 36
_AXIS = 28


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


def _ticks(t0: int, t1: int) -> list[dict[str, Any]]:
    span = t1 - t0
    minutes = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080, 20160, 43200)
    steps = [60_000 * m for m in minutes]
    step = next((s for s in steps if span / s <= 8), int(span / 8) or 1)
    first = (t0 // step + 1) * step
    ticks = []
    for at in range(first, t1, step):
        text = format_ts(at)
        ticks.append(
            {"x": round((at - t0) / span * _WIDTH, 1), "label": text[5:16].replace("T", " ")}
        )
    return ticks


def experiment_page(
    principal: Principal, explanation: Explanation, status: str, now_ms: int
) -> str:
    view = timeline_view(explanation, now_ms=now_ms)
    t0: int = view["t0"]
    span: int = view["t1"] - t0

    def x(at: int | None) -> float:
        moment: int = at if at is not None else view["t1"]
        return round((moment - t0) / span * _WIDTH, 1)

    geometry = {
        "width": _WIDTH,
        "lane": _LANE,
        "axis": _AXIS,
        "height": _AXIS + _LANE * max(1, len(view["lanes"])),
        "ticks": _ticks(view["t0"], view["t1"]),
    }
    legend = [(prefix.rstrip("."), color) for prefix, color in COLORS] + [("running", "#00897b")]
    return (
        _environment()
        .get_template("experiment.html.j2")
        .render(principal=principal, v=view, g=geometry, x=x, status=status, legend=legend)
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
