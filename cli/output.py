"""`-o text|wide|json|yaml` (and `--json`) for every listing and show command, the way kubectl
and gh print: text for people, wide for more columns, JSON or YAML documents for scripts,
each naming its schema (`core/schema/*.v1.json`, listed in docs/cli.md)."""

from __future__ import annotations

import os
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

from whyjob.cli.state import fail

__all__ = ["Format", "JsonFlag", "OutputOption", "choose", "emit", "use_color"]


class Format(StrEnum):
    text = "text"
    wide = "wide"
    json = "json"
    yaml = "yaml"

    @property
    def data(self) -> bool:
        """JSON or YAML: a document for a program, not a table for a person."""
        return self in (Format.json, Format.yaml)


OutputOption = Annotated[
    Format | None,
    typer.Option(
        "--output",
        "-o",
        help="text (the default), wide (more columns), json or yaml (schemas: docs/cli.md).",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="The same as -o json.")]


def choose(output: Format | None, as_json: bool) -> Format:
    if as_json and output not in (None, Format.json):
        fail(f"--json and -o {output} ask for two formats: give one", 2)
    return Format.json if as_json else (output or Format.text)


def emit(document: Any, fmt: Format) -> None:
    """Print a document as JSON (indented) or YAML (block style, keys in their order)."""
    import orjson

    data = orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    if fmt is Format.yaml:
        import yaml

        sys.stdout.write(
            yaml.safe_dump(orjson.loads(data), sort_keys=False, allow_unicode=True, width=100)
        )
    else:
        sys.stdout.buffer.write(data + b"\n")
        sys.stdout.flush()


def use_color() -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set to anything (no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")
