"""The `whyjob` Typer application. Heavy modules are imported inside commands, so that
`whyjob --help` and `whyjob EXPERIMENT` only pay for what they use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from whyjob.cli import (
    agent_cmd,
    bench,
    collect_cmd,
    commands,
    completion,
    diagnose_cmd,
    fleet_cmd,
    ingest_cmd,
    inspect_cmd,
    preflight_cmd,
    rules_cmd,
    serve_cmd,
    sim_cmd,
)
from whyjob.cli.state import state_of

__all__ = ["app"]

app = typer.Typer(
    name="whyjob",
    help=(
        "What happened to my training job? Explains why each pod of a GPU training "
        "experiment died, from the first domino to the last, with the evidence.\n\n"
        "Run `whyjob EXPERIMENT` (short for `whyjob explain EXPERIMENT`)."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    cls=completion.WhyjobGroup,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"whyjob {version('whyjob')}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    index: Annotated[
        Path | None,
        typer.Option(
            "--index",
            envvar="WHYJOB_INDEX",
            help="The index file [default: ~/.local/share/whyjob/index.sqlite].",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="WHYJOB_CONFIG",
            help="Config file [default: ~/.config/whyjob/config.yaml if present].",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    state = state_of(ctx)
    state.config = config
    state.index_override = index


app.command("explain")(commands.explain)
app.command("diagnose")(diagnose_cmd.diagnose)
app.command("preflight")(preflight_cmd.preflight)
app.command("ingest")(ingest_cmd.ingest)
app.command("collect")(collect_cmd.collect)
app.command("agent")(agent_cmd.agent)
app.command("serve")(serve_cmd.serve)
app.command("simulate")(sim_cmd.simulate)
app.command("demo")(sim_cmd.demo)
app.command("nodes")(fleet_cmd.nodes)
app.command("gpus")(fleet_cmd.gpus)
app.command("report")(fleet_cmd.report)
app.command("experiments")(inspect_cmd.experiments)
app.command("search")(inspect_cmd.search)
app.command("show")(inspect_cmd.show)
app.command("quarantine")(inspect_cmd.quarantine)
app.command("stats")(inspect_cmd.stats)
app.command("prune")(inspect_cmd.prune)
app.command("completion")(completion.completion)
app.add_typer(rules_cmd.app, name="rules")
app.add_typer(bench.app, name="bench")
