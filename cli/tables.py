"""Tables for the terminal, through rich: columns sized to the content and the terminal, cells
that do not fit folded inside their column (never run into the next), colour only on a
terminal and never under NO_COLOR (rich reads it)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

__all__ = ["print_table"]

_PIPE_WIDTH = 200  # a pipe or a file has no width: wide enough that rows stay one line


def print_table(
    columns: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    right: Iterable[str] = (),
) -> None:
    """Print rows under the column headers; `right` names the columns of numbers."""
    from rich.console import Console
    from rich.table import Table

    terminal = sys.stdout.isatty()
    console = Console(width=None if terminal else _PIPE_WIDTH, highlight=False, soft_wrap=False)
    table = Table(title=title, title_justify="left", box=None, header_style="bold", pad_edge=False)
    aligned = set(right)
    for name in columns:
        table.add_column(name, justify="right" if name in aligned else "left", overflow="fold")
    for row in rows:
        table.add_row(*("-" if cell is None else str(cell) for cell in row))
    with console.capture() as captured:
        console.print(table)
    # Padding after the last column is noise in a pasted or diffed table.
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
