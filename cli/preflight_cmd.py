"""`whyjob preflight`: is this node safe to start a job on?"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from whyjob.cli.commands import load_ruleset
from whyjob.cli.output import Format, OutputOption, choose, emit
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
    output: OutputOption = None,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="WHYJOB_SERVER",
            help="Ask a `whyjob serve` at this URL instead of the index (token: $WHYJOB_TOKEN).",
        ),
    ] = None,
) -> None:
    """Say whether each node is safe to start a job on: no maintenance, retirement, spot or
    autoscaler notice inside the window, no hardware-class GPU fault or NotReady in the
    look-back. Exit 0 all safe, 1 any unsafe, 2 any unknown (no evidence about it, or the
    server could not be asked) and none unsafe."""
    import time

    from whyjob.core.errors import WhyjobError
    from whyjob.core.timeutil import parse_ts
    from whyjob.explain.preflight import preflight as check_node
    from whyjob.explain.preflight import preflight_defaults
    from whyjob.explain.ruleset import parse_duration

    fmt = choose(output, as_json)
    if server:
        documents = [_ask(server, node, window, lookback, at) for node in nodes]
        _report(documents, fmt)
        return
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
    _report([r.to_json() for r in results], fmt)


def _report(documents: list[dict[str, Any]], fmt: Format) -> None:
    """Print the answers and exit 1 if any node is unsafe, else 2 if any is unknown, else 0."""
    if fmt.data:
        emit(documents, fmt)
    else:
        for doc in documents:
            typer.echo(f"{doc['node']}: {doc['verdict'].upper()} (as of {doc['at']})")
            for check in [*doc["reasons"], *doc["notes"]]:
                typer.echo(f"  {'-' if check['blocking'] else 'note:'} {check['message']}")
            if doc["verdict"] == "unknown":
                typer.echo(f"  {doc.get('error') or 'the index has never heard of this node'}")
    verdicts = {doc["verdict"] for doc in documents}
    raise typer.Exit(1 if "unsafe" in verdicts else 2 if "unknown" in verdicts else 0)


def _ask(
    server: str, node: str, window: str | None, lookback: str | None, at: str | None
) -> dict[str, Any]:
    """The server's answer for one node; a server that cannot be asked makes it `unknown`
    (a launcher decides what unknown means to it), a refused question is a usage error."""
    import os
    import urllib.error
    import urllib.parse
    import urllib.request

    if urllib.parse.urlsplit(server).scheme not in ("http", "https"):
        fail(f"--server must be an http(s) URL, not {server!r}", 2)
    query = urllib.parse.urlencode(
        {k: v for k, v in (("window", window), ("lookback", lookback), ("at", at)) if v}
    )
    url = f"{server.rstrip('/')}/api/v1/nodes/{urllib.parse.quote(node, safe='')}/preflight"
    request = urllib.request.Request(url + (f"?{query}" if query else ""))
    if token := os.environ.get("WHYJOB_TOKEN"):
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            document: dict[str, Any] = json.loads(response.read())
            return document
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403, 422):
            fail(f"{server} refused the question ({exc.code}): {exc.read()[:200]!r}", 2)
        error = f"{server} answered {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        error = f"could not ask {server}: {exc}"
    return {"node": node, "verdict": "unknown", "at": at or "now", "reasons": [], "notes": [],
            "error": error}  # fmt: skip
