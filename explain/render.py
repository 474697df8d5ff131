"""Narratives rendered with Jinja2 from the one Explanation model: terminal text and Markdown.

The first paragraph is what a researcher reads in ten seconds: what ended the job, how sure
whyjob is, whether a retry can help and what it cost. The ledger, the chain, what could not
be checked and the timeline follow, each line pointing at evidence ids (`whyjob show ID`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Final

from jinja2 import Environment, FileSystemBytecodeCache, PackageLoader, StrictUndefined

from whyjob.core.timeutil import format_duration
from whyjob.explain.model import Attempt, Explanation

__all__ = ["render_markdown", "render_text"]

_COLORS = {
    "red": "\x1b[31m",
    "green": "\x1b[32m",
    "yellow": "\x1b[33m",
    "dim": "\x1b[2m",
    "bold": "\x1b[1m",
    "reset": "\x1b[0m",
}
_OUTCOME_COLOR = {"failed": "red", "completed": "green", "running": "yellow", "pending": "yellow"}

_env: Environment | None = None


def _environment() -> Environment:
    global _env
    if _env is None:
        _env = Environment(
            loader=PackageLoader("whyjob.explain", "templates"),
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
            autoescape=False,  # text and Markdown; HTML surfaces use their own autoescaping env
            bytecode_cache=_bytecode_cache(),
        )
    return _env


def _bytecode_cache() -> FileSystemBytecodeCache | None:
    """Compiled templates kept in the user's cache (Jinja checks each against its source):
    compiling explain.txt.j2 was a tenth of a `whyjob EXPERIMENT`. None where it cannot be."""
    from whyjob.core.settings import cache_dir

    folder = cache_dir() / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return FileSystemBytecodeCache(str(folder))


def _clock(ms: int | None, day: str | None = None) -> str:
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    if day is not None and moment.strftime("%Y-%m-%d") == day:
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def _cause_cell(attempt: Attempt, short_ids: dict[str, str]) -> str:
    if attempt.state == "running":
        return "(running)"
    if attempt.category == "peer.failure" and attempt.caused_by:
        return f"peer.failure <- {short_ids.get(attempt.caused_by, attempt.caused_by)}"
    return attempt.category or "-"


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return lines


def _context(explanation: Explanation, timeline_limit: int) -> dict[str, Any]:
    attempts = explanation.attempts
    first = explanation.experiment.first_seen
    day = datetime.fromtimestamp(first / 1000, UTC).strftime("%Y-%m-%d") if first else None
    short_ids = {a.id: f"#{n}" for n, a in enumerate(attempts)}
    rows = [
        [
            short_ids[a.id],
            a.rank or "-",
            a.pod,
            str(a.restart),
            a.node or "-",
            _clock(a.started_at, day),
            _clock(a.ended_at, day),
            "-" if a.exit_code is None else str(a.exit_code),
            _cause_cell(a, short_ids),
            a.grade or "-",
        ]
        for a in attempts
    ]
    ledger = _table(
        rows, ["#", "rank", "pod", "restart", "node", "start", "end", "exit", "cause", "grade"]
    )
    collateral = [a for a in attempts if a.category == "peer.failure"]
    verdict = explanation.verdict
    root = explanation.attempt(verdict.root_attempt) if verdict.root_attempt else None
    timeline = explanation.timeline
    shown = timeline if timeline_limit < 0 else _focus(explanation, timeline_limit)
    return {
        "e": explanation,
        "x": explanation.experiment,
        "v": verdict,
        "root": root,
        "day": day,
        "ledger": ledger,
        "causes": Counter(
            a.category for a in attempts if a.failed and a.category != "peer.failure"
        ),
        "collateral": collateral,
        "collateral_names": _names(collateral),
        "short_ids": short_ids,
        "failed_attempts": [a for a in attempts if a.failed and a.category != "peer.failure"],
        "timeline": shown,
        "timeline_total": len(timeline),
        "clock": lambda ms: _clock(ms, day),
        "duration": format_duration,
        "gpu": explanation.gpu_hours,
    }


_NAMES_SHOWN: Final = 8


def _names(attempts: Iterable[Attempt]) -> str:
    """'ranks 0, 1, 3' (each once, in natural order), then the pods no rank names; a long
    list ends with how many more there are."""
    runs = list(attempts)
    ranks = sorted({a.rank for a in runs if a.rank}, key=_natural)
    pods = list(dict.fromkeys(a.pod for a in runs if not a.rank))
    words = ranks + pods
    shown = ", ".join(words[:_NAMES_SHOWN])
    if ranks:
        shown = f"rank{'s' if len(ranks) > 1 else ''} {shown}"
    more = len(words) - _NAMES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def _natural(text: str) -> tuple[tuple[int, str], ...]:
    """worker-2 before worker-10."""
    return tuple(
        (int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", text)
    )


def _focus(explanation: Explanation, limit: int) -> list[Any]:
    """The entries cited by the verdict and the attempts first, then the most severe."""
    if limit == 0:
        return []
    cited = {e for a in explanation.attempts for e in a.evidence} | {
        e for step in explanation.chain for e in step.evidence
    }
    entries = explanation.timeline
    chosen = [t for t in entries if t.id in cited]
    if len(chosen) < limit:
        rest = sorted((t for t in entries if t.id not in cited), key=lambda t: (-t.severity, t.at))
        chosen += rest[: limit - len(chosen)]
    return sorted(chosen[:limit], key=lambda t: t.at)


def _paint(text: str) -> str:
    for name, code in _COLORS.items():
        text = text.replace(f"[{name}]", code)
    return text


def _strip_marks(text: str) -> str:
    for name in _COLORS:
        text = text.replace(f"[{name}]", "")
    return text


def render_text(explanation: Explanation, *, timeline_limit: int = 20, color: bool = False) -> str:
    context = _context(explanation, timeline_limit)
    context["outcome_color"] = _OUTCOME_COLOR.get(explanation.verdict.outcome, "bold")
    text = _environment().get_template("explain.txt.j2").render(context)
    return _paint(text) if color else _strip_marks(text)


def render_markdown(explanation: Explanation, *, timeline_limit: int = 50) -> str:
    return (
        _environment().get_template("explain.md.j2").render(_context(explanation, timeline_limit))
    )
