"""Server-rendered pages: the experiments index and one experiment's timeline. Jinja2 with
autoescaping; no scripts or styles from anywhere but the page itself, so it works offline."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import orjson
from jinja2 import Environment, PackageLoader, select_autoescape

from whyjob.api.access import Principal
from whyjob.api.timeline import COLORS, timeline_view
from whyjob.core.timeutil import format_ts
from whyjob.explain.model import Explanation

__all__ = ["evidence_page", "experiment_page", "index_page", "page_policy"]

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
