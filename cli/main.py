"""Console entry point: `whyjob EXPERIMENT` is `whyjob explain EXPERIMENT`."""

from __future__ import annotations

import sys

__all__ = ["COMMANDS", "UnknownCommand", "main", "route"]

# Kept in step with cli/app.py by tests/cli/test_main.py; listed here so routing a bare
# experiment name does not need to import the whole application first.
COMMANDS = frozenset(
    {
        "explain",
        "diagnose",
        "preflight",
        "ingest",
        "collect",
        "agent",
        "serve",
        "simulate",
        "demo",
        "nodes",
        "gpus",
        "report",
        "experiments",
        "search",
        "show",
        "quarantine",
        "stats",
        "prune",
        "rules",
        "bench",
        "completion",
    }
)
# Global options that take a value, so `whyjob --index X myexp` still finds "myexp".
_VALUE_OPTIONS = frozenset({"--index", "--config"})
# explain's options that take a value: what follows them is not a second name.
_EXPLAIN_VALUES = frozenset(
    {"-n", "--namespace", "--cluster", "--timeline", "--rules", "--otlp", "-o", "--output"}
)
# A word this close to a command name (difflib's ratio) is taken for a mistyped command.
_TYPO_CUTOFF = 0.75


class UnknownCommand(Exception):
    """A first word that is neither a command nor, plausibly, an experiment's name."""

    def __init__(self, word: str, suggestion: str | None) -> None:
        self.word, self.suggestion = word, suggestion
        hint = f" Did you mean '{suggestion}'?" if suggestion else ""
        super().__init__(
            f"unknown command '{word}'.{hint} (To explain an experiment of that name: "
            f"whyjob explain {word}; every command: whyjob --help)"
        )


def _names_after(args: list[str]) -> list[str]:
    """The positional words after the first, skipping explain's options and their values."""
    names: list[str] = []
    position = 0
    while position < len(args):
        arg = args[position]
        if arg == "--":
            names.extend(args[position + 1 :])
            break
        if arg.startswith("-"):
            position += 2 if arg in _EXPLAIN_VALUES else 1
            continue
        names.append(arg)
        position += 1
    return names


def route(argv: list[str]) -> list[str]:
    """Move global options to the front (so `whyjob ingest x --index y` works), then insert
    `explain` unless a command (or help) comes first."""
    front: list[str] = []
    rest: list[str] = []
    position = 0
    while position < len(argv):
        arg = argv[position]
        if arg == "--":
            rest.extend(argv[position:])
            break
        name = arg.split("=", 1)[0]
        if name in _VALUE_OPTIONS:
            take = 1 if "=" in arg else 2
            front.extend(argv[position : position + take])
            position += take
            continue
        rest.append(arg)
        position += 1
    if rest and rest[0] not in COMMANDS and rest[0] not in ("-h", "--help", "--version"):
        word = rest[0]
        if not word.startswith("-"):
            import difflib

            close = difflib.get_close_matches(word, sorted(COMMANDS), n=1, cutoff=_TYPO_CUTOFF)
            # Experiment names nearly always carry a digit or a dash; a word of letters close
            # to a command is a typo, and a second name means a command was meant (explain
            # takes one).
            if (close and word.isalpha()) or _names_after(rest[1:]):
                raise UnknownCommand(word, close[0] if close else None)
        rest.insert(0, "explain")
    return front + rest


def main() -> None:
    try:
        argv = route(sys.argv[1:])
    except UnknownCommand as exc:
        sys.stderr.write(f"whyjob: error: {exc}\n")
        raise SystemExit(2) from None
    from whyjob.cli.app import app
    from whyjob.cli.completion import prepare

    prepare()
    app(args=argv, prog_name="whyjob")
