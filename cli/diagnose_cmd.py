"""`whyjob diagnose`: one pod's cause from whatever was pasted, with no index."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from whyjob.cli.commands import load_ruleset
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
    rules: Annotated[
        list[Path] | None, typer.Option("--rules", help="Extra rule file or folder (repeatable).")
    ] = None,
) -> None:
    """Diagnose one pod from pasted text: container logs, dmesg or journal lines, pod JSON or
    YAML, `kubectl describe pod`, `kubectl get events|pods` (tables or JSON), termination
    handler or autoscaler logs, in any mix. Nothing is stored."""
    from whyjob.cli.state import state_of
    from whyjob.collector.ingest.base import IngestOptions, Rejected
    from whyjob.collector.ingest.paste import read_paste
    from whyjob.core.entities import PodRecord
    from whyjob.core.evidence import Evidence
    from whyjob.explain.diagnosis import diagnose as run

    settings = state_of(ctx).settings
    now = int(time.time() * 1000)
    options = IngestOptions(launchers=settings.launchers, log_markers=settings.log_markers, at=now)
    sources = files or ["-"]
    records: list[Evidence] = []
    pods: list[PodRecord] = []
    for source in sources:
        if source == "-":
            data = sys.stdin.buffer.read()
        else:
            try:
                data = Path(source).read_bytes()
            except OSError as exc:
                fail(f"{source}: {exc.strerror}", 2)
        for item in read_paste("<stdin>" if source == "-" else source, data, options):
            if isinstance(item, Evidence):
                records.append(item)
            elif isinstance(item, PodRecord):
                pods.append(item)
            elif isinstance(item, Rejected):
                sys.stderr.write(f"whyjob: {source}:{item.line or '-'}: skipped: {item.reason}\n")
    if not records:
        fail("nothing to diagnose: the input is empty", 2)
    diagnosis = run(records, pods, load_ruleset(ctx, rules), undated=now)
    if as_json:
        import orjson

        sys.stdout.buffer.write(
            orjson.dumps(diagnosis.to_json(), option=orjson.OPT_INDENT_2) + b"\n"
        )
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
