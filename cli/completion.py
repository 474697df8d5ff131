"""Shell completion for bash, zsh and fish, the way kubectl and gh offer it: `whyjob completion
SHELL` prints a script to source; the shell then asks whyjob itself (click's protocol, Typer's
scripts) for commands, options and experiment names read from the index."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer import _click  # Typer's own copy of click: its groups and contexts are these
from typer.core import TyperGroup

__all__ = ["COMPLETE_VAR", "Shell", "WhyjobGroup", "completion", "experiment_names"]

COMPLETE_VAR = "_WHYJOB_COMPLETE"  # click's variable for a program named whyjob
_MOST = 200  # names offered at once: the newest experiments first


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def completion(
    shell: Annotated[Shell, typer.Argument(help="The shell to print the script for.")],
) -> None:
    """Print a shell completion script (commands, options, experiment names from the index).

    \b
    bash:  source <(whyjob completion bash)      # or save it under ~/.local/share/bash-completion/completions/whyjob
    zsh:   source <(whyjob completion zsh)       # after compinit
    fish:  whyjob completion fish > ~/.config/fish/completions/whyjob.fish
    """
    from typer._completion_shared import get_completion_script

    typer.echo(get_completion_script(prog_name="whyjob", complete_var=COMPLETE_VAR, shell=shell))


def _index_path(ctx: _click.Context) -> Path | None:
    """The SQLite file the command line names, else the configured one (completion runs no
    callbacks, so the root's options are read from what was parsed so far)."""
    params = ctx.find_root().params
    if params.get("index"):
        return Path(params["index"])
    from whyjob.core.settings import load_settings

    try:
        settings = load_settings(params.get("config"))
    except Exception:  # a broken config file: complete nothing rather than print a traceback
        return None
    return settings.index if settings.elastic is None else None


def experiment_names(ctx: _click.Context, incomplete: str) -> list[str]:
    """The index's experiment names starting with what was typed, newest first; nothing when
    there is no index (completion never creates one, and never fails loudly)."""
    path = _index_path(ctx)
    if path is None or not path.exists():
        return []
    from whyjob.core.index import SqliteIndex

    try:
        with SqliteIndex(path, readonly=True) as index:
            found = index.experiments(limit=10_000)
    except Exception:  # a locked or foreign file: a shell prompt is no place for errors
        return []
    names = dict.fromkeys(e.name for e in found if e.name.startswith(incomplete))
    return list(names)[:_MOST]


class WhyjobGroup(TyperGroup):
    """The root command: `whyjob EXPERIMENT` is a shortcut, so the first word completes to
    commands and experiment names alike."""

    def shell_complete(self, ctx: _click.Context, incomplete: str) -> list[Any]:
        from typer._click.shell_completion import CompletionItem

        items = super().shell_complete(ctx, incomplete)
        if incomplete.startswith("-"):
            return items
        commands = {item.value for item in items}
        return items + [
            CompletionItem(name, help="experiment")
            for name in experiment_names(ctx, incomplete)
            if name not in commands
        ]


def prepare() -> None:
    """Register Typer's bash, zsh and fish completers when the shell is asking (they are
    registered only with Typer's --install-completion otherwise, which whyjob leaves out)."""
    if COMPLETE_VAR in os.environ:
        from typer._completion_classes import completion_init

        completion_init()
