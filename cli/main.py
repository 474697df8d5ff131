"""Console entry point: `whyjob EXPERIMENT` is `whyjob explain EXPERIMENT`."""

from __future__ import annotations

import sys

__all__ = ["COMMANDS", "main"]

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
    }
)
# Global options that take a value, so `whyjob --index X myexp` still finds "myexp".
_VALUE_OPTIONS = frozenset({"--index", "--config"})


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
        rest.insert(0, "explain")
    return front + rest


def main() -> None:
    from whyjob.cli.app import app

    app(args=route(sys.argv[1:]), prog_name="whyjob")
