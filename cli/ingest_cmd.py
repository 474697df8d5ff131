"""`whyjob ingest`: import export files into the index."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer

from whyjob.cli.state import fail, state_of

if TYPE_CHECKING:
    from whyjob.collector.ingest.run import IngestSummary, ProgressHook

__all__ = ["ingest"]

_SHOWN_REJECTIONS = 30
_PROGRESS_MIN_BYTES = 8 << 20

_FORMATS_HELP = (
    "Formats are detected per file: kubectl get events|pods|nodes -o json|yaml (List or one "
    "object, core/v1 and events.k8s.io/v1); aws autoscaling describe-scaling-activities; aws ec2 "
    "describe-instance-status; EventBridge events; IMDS spot and maintenance documents; gcloud "
    "compute operations list; GCE upcoming-maintenance; Azure Scheduled Events; dcgm-exporter "
    "scrapes and Prometheus API results; kubelet container logs "
    "(/var/log/pods/NS_POD_UID/CONTAINER/N.log, CRI or docker json-file); dmesg, journalctl -k "
    "(text or -o json) and kern.log; plain log files attached with --pod."
)


def _time(value: str | None, flag: str) -> int | None:
    if value is None:
        return None
    from whyjob.core.timeutil import parse_ts

    try:
        return parse_ts(value)
    except ValueError:
        fail(f"{flag}: {value!r} is not a time (use RFC 3339, e.g. 2026-03-04T10:11:12Z)", 2)


def ingest(
    ctx: typer.Context,
    paths: Annotated[
        list[str] | None,
        typer.Argument(
            help="Files or folders to import; - reads standard input.", show_default=False
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="Skip detection and read every file as this format (see `whyjob ingest --list-formats`).",
        ),
    ] = None,
    node: Annotated[
        str | None,
        typer.Option(
            "--node",
            help="Node for files that do not name it (dmesg, IMDS documents, a scrape without a Hostname label).",
        ),
    ] = None,
    instance: Annotated[
        str | None, typer.Option("--instance", help="Cloud instance for IMDS documents.")
    ] = None,
    pod: Annotated[
        str | None,
        typer.Option("--pod", help="Attach plain log files to NAMESPACE/POD[/CONTAINER]."),
    ] = None,
    restart: Annotated[
        int | None,
        typer.Option("--restart", help="With --pod: which run of the container the log is from."),
    ] = None,
    at: Annotated[
        str | None,
        typer.Option("--at", help="Observation time for documents that carry none (RFC 3339)."),
    ] = None,
    year: Annotated[
        int | None,
        typer.Option(
            "--year", help="Year for syslog timestamps that have none [default: the file's year]."
        ),
    ] = None,
    boot_time: Annotated[
        str | None,
        typer.Option("--boot-time", help="Boot time for raw dmesg (`uptime -s`), RFC 3339."),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster", help="Cluster name stamped on every record [default: config `cluster`]."
        ),
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="Print only errors and the totals line.")
    ] = False,
    list_formats: Annotated[
        bool, typer.Option("--list-formats", help="List the format names and exit.", is_eager=False)
    ] = False,
) -> None:
    """Import export files into the index. Exit code 0: everything stored; 1: some records
    were rejected (each is printed with its file, line and reason, and kept in quarantine;
    the rest were stored); 2: bad usage; 3: a file could not be read at all (unreadable,
    not a format whyjob recognises, or over an `ingest:` limit), or nothing was recognised.

    Formats are detected per file from content. Re-importing the same files stores nothing new.
    """
    from whyjob.collector.ingest.base import IngestOptions, PodRef
    from whyjob.collector.ingest.formats import FORMAT_NAMES
    from whyjob.collector.ingest.run import Ingestor

    if list_formats:
        for name in FORMAT_NAMES:
            typer.echo(name)
        return
    if not paths:
        fail("nothing to import: give files or folders (- for standard input)", 2)
    from pathlib import Path

    for raw in paths:
        if raw != "-" and not Path(raw).exists():
            fail(f"{raw}: no such file or folder", 2)

    if fmt is not None and fmt not in FORMAT_NAMES:
        fail(f"--format {fmt!r} is not one of: {', '.join(FORMAT_NAMES)}", 2)
    try:
        pod_ref = PodRef.parse(pod) if pod else None
    except ValueError as exc:
        fail(f"--pod: {exc}", 2)
    state = state_of(ctx)
    settings = state.settings
    options = IngestOptions(
        cluster=cluster or settings.cluster,
        node=node,
        instance=instance,
        pod=pod_ref,
        restart=restart,
        at=_time(at, "--at"),
        year=year,
        boot_time=_time(boot_time, "--boot-time"),
        fmt=fmt,
        launchers=settings.launchers,
        log_markers=settings.log_markers,
        limits=settings.limits,
    )
    rejections: list[str] = []

    def on_reject(where: str, reason: str) -> None:
        rejections.append(where)
        if len(rejections) <= _SHOWN_REJECTIONS:
            sys.stderr.write(f"whyjob: {where}: {reason}\n")

    with state.open_index(readonly=False) as index:
        ingestor = Ingestor(index, options, on_reject=on_reject)
        with _progress(paths, quiet) as on_progress:
            ingestor.on_progress = on_progress
            try:
                summary = ingestor.ingest(paths)
            except FileNotFoundError as exc:
                fail(f"{exc.filename}: no such file or folder", 2)
    if len(rejections) > _SHOWN_REJECTIONS:
        sys.stderr.write(
            f"whyjob: ... and {len(rejections) - _SHOWN_REJECTIONS} more rejected records\n"
        )
    _report(summary, quiet, settings.describe())
    if summary.exit_code:
        raise typer.Exit(summary.exit_code)


@contextmanager
def _progress(paths: list[str], quiet: bool) -> Iterator[ProgressHook | None]:
    """A progress bar on stderr for long imports in a terminal; None otherwise."""
    from pathlib import Path

    total = 0
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    if quiet or not sys.stderr.isatty() or total < _PROGRESS_MIN_BYTES:
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        "importing",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.description}", markup=False),  # a file name is no markup: run[rank0].log
        transient=True,
    ) as bar:
        task = bar.add_task("", total=total)

        def update(done: int, whole: int, origin: str, records: int) -> None:
            name = origin if len(origin) <= 40 else "…" + origin[-39:]
            bar.update(
                task,
                completed=done,
                total=max(whole, 1),
                description=f"{name}: {records:,} records",
            )

        yield update


def _report(summary: IngestSummary, quiet: bool, index: str) -> None:
    out = sys.stdout
    if not quiet:
        rows = [f for f in summary.files if not f.skipped]
        if rows:
            width = min(max(len(f.origin) for f in rows), 70)
            out.write(
                f"{'file':<{width}}  {'format':<24} {'read':>8} {'stored':>8} {'dup':>8} {'rejected':>8}\n"
            )
            for f in rows:
                name = f.origin if len(f.origin) <= width else "..." + f.origin[-(width - 3) :]
                out.write(
                    f"{name:<{width}}  {f.fmt:<24} {f.read:>8,} {f.stored:>8,} {f.duplicate:>8,} {f.rejected:>8,}\n"
                )
                if f.cut:
                    out.write(
                        f"{'':<{width}}  {f.cut:,} lines longer than ingest.max_line were cut\n"
                    )
                if f.ignored:
                    kinds = ", ".join(f"{k} x{n}" for k, n in sorted(f.ignored.items()))
                    out.write(f"{'':<{width}}  ignored objects: {kinds}\n")
        skipped = [f for f in summary.files if f.skipped]
        for f in skipped:
            out.write(f"skipped {f.origin}: {f.skipped}\n")
    read, stored = summary.total("read"), summary.total("stored")
    rate = read / summary.seconds if summary.seconds > 0 else 0.0
    out.write(
        f"read {read:,}, stored {stored:,}, duplicate {summary.total('duplicate'):,}, "
        f"rejected {summary.total('rejected'):,} from {len(summary.files)} files "
        f"in {summary.seconds:.2f} s ({rate:,.0f} records/s) into {index}\n"
    )
    if summary.total("rejected"):
        out.write("rejected records are kept with their reasons: `whyjob quarantine` lists them\n")
