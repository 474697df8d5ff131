"""`whyjob nodes`, `whyjob gpus` and `whyjob report`: the nodes and GPUs that keep killing jobs,
across every experiment in the index, and the fleet's analytics."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from whyjob.cli.commands import load_ruleset
from whyjob.cli.output import Format, OutputOption, choose, emit
from whyjob.cli.state import fail, state_of

if TYPE_CHECKING:
    from whyjob.explain.fleetmodel import Fleet

__all__ = ["gpus", "nodes", "report"]

Since = Annotated[
    str,
    typer.Option(
        "--since",
        help="Start of the window: a duration back from --until (30d, 12h) or an RFC 3339 time.",
    ),
]
Until = Annotated[
    str | None,
    typer.Option(
        "--until",
        help="End of the window (RFC 3339) [default: the newest experiment's last sighting].",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print whyjob.fleet/v1 JSON (-o json).")]


def _fleet(ctx: typer.Context, since: str, until: str | None) -> Fleet:
    from whyjob.core.errors import WhyjobError
    from whyjob.explain.fleet import build_fleet, fleet_window

    rules = load_ruleset(ctx)
    # What is explained for the first time is kept in the index for the next call.
    with state_of(ctx).open_index_to_keep() as index:
        if not index.experiments(limit=1):
            fail("no experiments in the index yet: `whyjob ingest PATH` or `whyjob demo`", 3)
        try:
            start, end = fleet_window(index, since, until)
        except ValueError as exc:
            fail(str(exc), 2)
        stale = len(index.experiments(limit=1_000_000)) - len(index.derived("fleet/v1"))
        with _progress(stale) as on_progress:
            try:
                return build_fleet(index, rules, since=start, until=end, on_progress=on_progress)
            except WhyjobError as exc:
                fail(str(exc), exc.exit_code)


@contextmanager
def _progress(stale: int) -> Iterator[Callable[[int, int], None] | None]:
    """A first look explains every experiment (tens of seconds on a big index): a bar by
    experiments on a terminal, gone once done; one line otherwise; nothing for a few."""
    import sys

    what = f"explaining {stale} experiments (kept for next time)"
    if stale <= 20:
        yield None
    elif not sys.stderr.isatty():
        sys.stderr.write(f"whyjob: {what}\n")
        yield None
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        with Progress(
            what, BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True
        ) as bar:
            task = bar.add_task("", total=None)
            yield lambda done, total: bar.update(task, completed=done, total=total)


def _hours(value: float) -> str:
    return f"{value:,.1f}"


def _causes(counts: dict[str, int]) -> str:
    return ", ".join(f"{cause} x{n}" for cause, n in counts.items()) or "-"


def _xids(counts: dict[int, int]) -> str:
    return ", ".join(f"{code} x{n}" for code, n in sorted(counts.items())) or "-"


def _heading(fleet: Fleet) -> str:
    from whyjob.core.timeutil import format_ts

    lost = sum(r.gpu_hours_lost for r in fleet.runs)
    hidden = (
        f"; {fleet.hidden_experiments} in namespaces not readable"
        if fleet.hidden_experiments
        else ""
    )
    return (
        f"{format_ts(fleet.since)} to {format_ts(fleet.until)}: {len(fleet.experiments)} "
        f"experiments, {len(fleet.runs)} runs failed first, {_hours(lost)} GPU-hours lost{hidden}"
    )


def nodes(
    ctx: typer.Context,
    node: Annotated[
        str | None, typer.Argument(help="One node: its history instead of the list.")
    ] = None,
    since: Since = "30d",
    until: Until = None,
    limit: Annotated[int, typer.Option("--limit", help="How many nodes, most harmful first.")] = 20,
    as_json: AsJson = False,
    output: OutputOption = None,
) -> None:
    """The nodes that keep killing jobs, most harmful first: hardware-class failures (Xid,
    NotReady), then GPU-hours lost to causes the infrastructure owns, then failed runs; with
    the patterns to act on (a lemon node, a GPU repeating an Xid, failed health checks).
    With NODE, that node's history: notices, faults, NotReady, the runs that died on it.
    Exit 0, or 1 when NODE is not in the index's window, 3 when the index has no experiments."""
    fmt = choose(output, as_json)
    fleet = _fleet(ctx, since, until)
    if node is not None:
        _one_node(ctx, fleet, node, fmt)
        return
    if fmt.data:
        emit(fleet.to_json(), fmt)
        return
    typer.echo(_heading(fleet))
    if not fleet.nodes:
        typer.echo("no failed runs or node faults in this window")
        return
    from whyjob.cli.tables import print_table
    from whyjob.core.timeutil import format_ts

    print_table(
        ["node", "pool", "type", "runs", "hw", "GPU-h lost", "causes", "Xids", "last failure"],
        [
            (
                n.node,
                n.pool,
                n.instance_type,
                n.runs,
                n.hardware_runs,
                _hours(n.gpu_hours_lost),
                _causes(dict(n.by_cause.most_common())),
                _xids(dict(n.xids)),
                format_ts(n.last_failure) if n.last_failure else None,
            )
            for n in fleet.nodes[:limit]
        ],
        right=("runs", "hw", "GPU-h lost"),
    )
    acts = [(n.node, p) for n in fleet.nodes for p in n.patterns()]
    if acts:
        typer.echo("\nTo act on")
        for name, pattern in acts:
            typer.echo(f"  {name}: {pattern}")
    if fleet.init_failures:
        typer.echo("\nInit containers that failed before their job started")
        for f in fleet.init_failures:
            typer.echo(
                f"  {format_ts(f.at)}  {f.node or '?'}  {f.namespace}/{f.experiment} {f.pod}: "
                f"{f.container} ({f.reason})" + (f" GPUs {', '.join(f.gpus)}" if f.gpus else "")
            )
    if len(fleet.nodes) > limit:
        typer.echo(f"({len(fleet.nodes) - limit} more nodes: --limit)")


def _one_node(ctx: typer.Context, fleet: Fleet, node: str, fmt: Format) -> None:
    from whyjob.core.timeutil import format_ts
    from whyjob.explain.nodehistory import node_history

    with state_of(ctx).open_index(readonly=True) as index:
        history = node_history(index, load_ruleset(ctx), fleet, node)
    known = bool(history.entries) or fleet.node(node) is not None
    if fmt.data:
        emit(history.to_json(), fmt)
    elif not known:
        typer.echo(
            f"nothing about node {node} from {format_ts(fleet.since)} to {format_ts(fleet.until)}"
        )
    if fmt.data or not known:
        raise typer.Exit(0 if known else 1)
    health = history.health
    kind = " ".join(x for x in (health.pool, health.instance_type) if x)
    typer.echo(f"{node}" + (f" ({kind})" if kind else ""))
    typer.echo(
        f"  {health.runs} runs failed first here ({_causes(dict(health.by_cause.most_common()))}), "
        f"{_hours(health.gpu_hours_lost)} GPU-hours lost; hardware Xids {_xids(dict(health.xids))}; "
        f"NotReady {health.not_ready} time(s)"
    )
    for pattern in health.patterns():
        typer.echo(f"  ! {pattern}")
    typer.echo("\nHistory")
    for entry in history.entries:
        span = f" to {format_ts(entry.until)}" if entry.until else ""
        cited = f"  [{entry.evidence}]" if entry.evidence else ""
        again = f" (x{entry.count}, last {format_ts(entry.last)})" if entry.count > 1 else ""
        typer.echo(
            f"  {format_ts(entry.at)}{span}  {entry.what:<6} {entry.message[:160]}{again}{cited}"
        )


def gpus(
    ctx: typer.Context,
    since: Since = "30d",
    until: Until = None,
    limit: Annotated[int, typer.Option("--limit", help="How many GPUs, most harmful first.")] = 20,
    as_json: AsJson = False,
    output: OutputOption = None,
) -> None:
    """The GPUs that keep failing, most harmful first: runs they ended, hardware-class faults
    (Xid, ECC, NVLink) and the GPU-hours lost; an Xid repeating within 24 h marks a reset or
    RMA candidate. Exit 0, or 3 when the index has no experiments."""
    fmt = choose(output, as_json)
    fleet = _fleet(ctx, since, until)
    if fmt.data:
        emit(fleet.to_json(), fmt)
        return
    typer.echo(_heading(fleet))
    if not fleet.gpus:
        typer.echo("no GPU faults in this window")
        return
    from whyjob.cli.tables import print_table
    from whyjob.core.timeutil import format_ts

    print_table(
        ["gpu", "node", "runs", "faults", "Xids", "GPU-h lost", "last fault", "repeats <24h"],
        [
            (
                g.gpu,
                g.node,
                g.runs,
                g.faults,
                _xids(dict(g.xids)),
                _hours(g.gpu_hours_lost),
                format_ts(g.last_fault) if g.last_fault else None,
                ", ".join(f"Xid {x}" for x in g.repeats) or None,
            )
            for g in fleet.gpus[:limit]
        ],
        right=("runs", "faults", "GPU-h lost"),
    )
    if len(fleet.gpus) > limit:
        typer.echo(f"({len(fleet.gpus) - limit} more GPUs: --limit)")


def report(
    ctx: typer.Context,
    since: Since = "90d",
    until: Until = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Also write every table as CSV and Parquet into this folder."),
    ] = None,
) -> None:
    """Fleet analytics (pandas): GPU-hours lost by cause per week and per namespace, restart
    loops and how long they burned, mean time between failures per node pool and instance
    type, the top offending nodes and GPUs. Exit 0, 2 when pandas is missing, 3 when the index
    has no experiments."""
    from importlib.util import find_spec

    missing = [name for name in ("pandas", "pyarrow") if find_spec(name) is None]
    if missing:
        fail(f"whyjob report needs {' and '.join(missing)}: pip install 'whyjob[report]'", 2)
    from whyjob.explain.report import build_report

    fleet = _fleet(ctx, since, until)
    with state_of(ctx).open_index(readonly=True) as index:
        spans = index.node_spans(fleet.since, fleet.until)
        tables = build_report(fleet, spans, index.node_labels(spans, fleet.until))
    typer.echo(_heading(fleet))
    for name in tables:
        typer.echo(
            f"\n{name.replace('_', ' ')} (GPU-hours)"
            if name.endswith("_week")
            else f"\n{name.replace('_', ' ')}"
        )
        typer.echo(tables.text(name))
    if out is not None:
        written = tables.write(out)
        typer.echo(f"\nwrote {len(written)} files to {out}")
