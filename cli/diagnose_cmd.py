"""`whyjob diagnose`: one pod's cause from whatever was pasted, with no index."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from whyjob.cli.commands import load_ruleset
from whyjob.cli.output import OutputOption, choose, emit
from whyjob.cli.state import fail

__all__ = ["diagnose"]


def diagnose(
    ctx: typer.Context,
    files: Annotated[
        list[str] | None,
        typer.Argument(
            help="Files holding pasted text; - (or nothing) reads standard input.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the diagnosis as JSON (whyjob.diagnosis/v1).")
    ] = False,
    output: OutputOption = None,
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Extra rule file or folder (repeatable).")
    ] = None,
) -> None:
    """Diagnose one pod from pasted text: container logs, dmesg or journal lines, pod JSON or
    YAML, `kubectl describe pod`, `kubectl get events|pods` (tables or JSON), termination
    handler or autoscaler logs, in any mix. Nothing is stored. Exit 0, 2 for empty or
    unreadable input."""
    from whyjob.cli.pasted import read_pasted
    from whyjob.cli.state import state_of
    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.explain.diagnosis import diagnose as run

    fmt = choose(output, as_json)
    settings = state_of(ctx).settings
    now = int(time.time() * 1000)
    options = IngestOptions(
        launchers=settings.launchers,
        log_markers=settings.log_markers,
        limits=settings.limits,
        at=now,
    )
    sources: list[tuple[str, bytes]] = []
    for source in files or ["-"]:
        if source == "-":
            sources.append(("<stdin>", sys.stdin.buffer.read()))
            continue
        try:
            sources.append((source, Path(source).read_bytes()))
        except OSError as exc:
            fail(f"{source}: {exc.strerror}", 2)
    if not any(data.strip() for _, data in sources):
        fail("nothing to diagnose: the input is empty", 2)
    pasted = read_pasted(sources, options)
    for origin, line, reason in pasted.skipped:
        sys.stderr.write(f"whyjob: {origin}:{line or '-'}: skipped: {reason}\n")
    diagnosis = run(pasted.records, pasted.pods, load_ruleset(ctx, rules), undated=now)
    if fmt.data:
        emit(diagnosis.to_json(), fmt)
        return
    out = sys.stdout
    out.write(
        f"{diagnosis.category} ({diagnosis.grade})"
        + (f" - {diagnosis.pod}" if diagnosis.pod else "")
        + "\n"
    )
    out.write(diagnosis.summary + "\n")
    if diagnosis.evidence:
        out.write("\nEvidence\n")
        for ev in diagnosis.evidence:
            out.write(f"  {ev['origin']}: {_clip(ev['text'], 200)}\n")
    if diagnosis.missing:
        out.write("\nNot checked\n")
        for note in diagnosis.missing:
            out.write(f"  - {note}\n")
    if diagnosis.alternatives:
        out.write("\nAlso considered\n")
        for alt in diagnosis.alternatives:
            out.write(f"  - {alt['category']} ({alt['grade']}): {_clip(alt['summary'], 160)}\n")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
