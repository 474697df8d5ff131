"""`whyjob simulate` writes an incident bundle; `whyjob demo` simulates, ingests and explains."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from whyjob.cli.state import fail, state_of

__all__ = ["demo", "simulate"]

DEFAULT_SCENARIO = "xid79"


def _scenarios() -> dict[str, str]:
    from whyjob.sim import SCENARIOS

    return {name: scenario.description for name, scenario in SCENARIOS.items()}


def _check(scenario: str) -> None:
    known = _scenarios()
    if scenario not in known:
        fail(f"no scenario {scenario!r}; `whyjob simulate --list` shows: {', '.join(known)}", 2)


def simulate(
    scenario: Annotated[
        str | None, typer.Argument(help="Scenario id (see --list).", show_default=False)
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Folder to write the bundle into (created).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same bundle, byte for byte.")] = 1,
    noise: Annotated[
        bool,
        typer.Option(
            "--noise/--no-noise", help="Add unrelated pods, nodes and experiments, and clock skew."
        ),
    ] = True,
    list_: Annotated[bool, typer.Option("--list", help="List the scenarios and exit.")] = False,
) -> None:
    """Write a realistic incident bundle (real export formats) plus truth.json."""
    if list_:
        for name, description in _scenarios().items():
            typer.echo(f"{name:<20} {description}")
        return
    if scenario is None or out is None:
        fail("give a SCENARIO and --out DIR (or --list)", 2)
    _check(scenario)
    from whyjob.sim import simulate as run

    truth = run(scenario, seed, out, noise=noise)
    files = sum(1 for p in out.rglob("*") if p.is_file())
    typer.echo(
        f"wrote {files} files to {out}: experiment {truth.experiment_name!r} "
        f"({truth.experiment_namespace}), scenario {scenario}, seed {seed}; truth in {out / 'truth.json'}"
    )


def demo(
    ctx: typer.Context,
    scenario: Annotated[
        str, typer.Argument(help="Scenario id (see `whyjob simulate --list`).")
    ] = DEFAULT_SCENARIO,
    seed: Annotated[int, typer.Option("--seed", help="Simulator seed.")] = 7,
    bundle: Annotated[
        Path | None,
        typer.Option(
            "--bundle", help="Keep the bundle in this folder [default: a temporary folder]."
        ),
    ] = None,
) -> None:
    """Simulate an incident into a fresh demo index, then explain it.

    Uses its own index (demo.sqlite next to the default index) unless --index is given, so the
    demo never mixes with real evidence.
    """
    import tempfile

    from whyjob.collector.ingest.base import IngestOptions
    from whyjob.collector.ingest.run import Ingestor
    from whyjob.core.index import SqliteIndex
    from whyjob.sim import simulate as run

    _check(scenario)
    state = state_of(ctx)
    if state.index_override is None:
        state.index_override = state.settings.index.with_name("demo.sqlite")
        state._settings = None
    path = state.settings.index
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="whyjob-demo-") as scratch:
        folder = bundle or Path(scratch)
        truth = run(scenario, seed, folder, noise=True)
        with SqliteIndex(path) as index:
            summary = Ingestor(
                index,
                IngestOptions(
                    launchers=state.settings.launchers, log_markers=state.settings.log_markers
                ),
            ).ingest([str(folder)])
        sys.stdout.write(
            f"simulated {scenario!r} (seed {seed}): {summary.total('stored'):,} records from "
            f"{len(summary.files)} files into {path}\n\n"
        )
    from whyjob.cli.commands import explain

    explain(ctx, truth.experiment_name, truth.experiment_namespace)
    sys.stdout.write(_next_steps(path, truth.experiment_name))


def _next_steps(index: Path, experiment: str) -> str:
    """The exact commands that go on from here: whyjob on PATH when it is not, and this demo's
    index (kept apart from real evidence) named for the commands that follow."""
    import os
    import shutil

    here = Path(sys.argv[0]).resolve().parent
    found = shutil.which("whyjob")
    exports = []
    if found is None or Path(found).resolve().parent != here:
        folder = str(here)
        if here.is_relative_to(Path.cwd()):
            folder = f"$PWD/{here.relative_to(Path.cwd())}"
        exports.append(f'PATH="{folder}:$PATH"')
    import shlex

    home = Path.home()
    shown = f"~/{index.relative_to(home)}" if index.is_relative_to(home) else str(index)
    if shlex.quote(shown.removeprefix("~/")) != shown.removeprefix("~/"):
        shown = shlex.quote(str(index))  # a space in the path: quoted, and no ~ to expand
    if os.environ.get("WHYJOB_INDEX") != str(index):
        exports.append(f"WHYJOB_INDEX={shown}")
    lines = ["", "Next, in this shell:"]
    if exports:
        lines.append(f"  export {' '.join(exports)}  # bash, zsh; fish: set -gx NAME VALUE")
    steps = [
        (f"whyjob {experiment} --timeline 0", "the story again, without the timeline"),
        (f"whyjob {experiment} -o json", "the same as data"),
        ("whyjob experiments", "what the index holds"),
        ("whyjob serve", "the web timeline: open the login link it prints"),
    ]
    width = max(len(command) for command, _ in steps)
    lines += [f"  {command:<{width}}  # {what}" for command, what in steps]
    return "\n".join(lines) + "\n"
