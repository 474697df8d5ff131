"""`whyjob preflight`: is this node safe to start a job on?"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from whyjob.cli.commands import load_ruleset
from whyjob.cli.state import fail, state_of

__all__ = ["preflight"]


def preflight(
    ctx: typer.Context,
    nodes: Annotated[list[str], typer.Argument(help="Node names (as Kubernetes names them).")],
    window: Annotated[
        str | None,
        typer.Option(
            "--window", help="Maintenance inside this window makes a node unsafe (config: 60m)."
        ),
    ] = None,
    lookback: Annotated[
        str | None,
        typer.Option(
            "--lookback", help="GPU faults and NotReady this far back make it unsafe (config: 24h)."
        ),
    ] = None,
    at: Annotated[
        str | None, typer.Option("--at", help="Judge as of this time (RFC 3339; default: now).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print whyjob.preflight/v1 JSON, a list of nodes.")
    ] = False,
) -> None:
    """Say whether each node is safe to start a job on: no maintenance, retirement, spot or
    autoscaler notice inside the window, no hardware-class GPU fault or NotReady in the
    look-back. Exit 0 all safe, 1 any unsafe, 2 any unknown (no evidence about it) and none
    unsafe."""
    import time

    from whyjob.core.errors import WhyjobError
    from whyjob.core.timeutil import format_ts, parse_ts
    from whyjob.explain.preflight import preflight as check_node
    from whyjob.explain.preflight import preflight_defaults
    from whyjob.explain.ruleset import parse_duration

    state = state_of(ctx)
    try:
        window_ms, lookback_ms = preflight_defaults(state.settings.config_path)
        window_ms = parse_duration(window) if window else window_ms
        lookback_ms = parse_duration(lookback) if lookback else lookback_ms
        now = parse_ts(at) if at else int(time.time() * 1000)
    except (ValueError, WhyjobError) as exc:
        fail(str(exc), 2)
    rules = load_ruleset(ctx)
    with state.open_index(readonly=True) as index:
        results = [
            check_node(index, rules, node, now=now, window_ms=window_ms, lookback_ms=lookback_ms)
            for node in nodes
        ]
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in results], indent=2))
    else:
        for r in results:
            typer.echo(f"{r.node}: {r.verdict.upper()} (as of {format_ts(r.now)})")
            for check in r.checks:
                typer.echo(f"  {'-' if check.blocking else 'note:'} {check.message}")
            if r.verdict == "unknown":
                typer.echo("  the index holds nothing about this node in the look-back")
    codes = {r.exit_code for r in results}
    raise typer.Exit(1 if 1 in codes else 2 if 2 in codes else 0)
