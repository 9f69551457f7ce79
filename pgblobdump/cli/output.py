"""Write results: data to stdout in the chosen format, people-facing extras to stderr."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pgblobdump.report import Table, stream, to_csv, to_json, to_markdown
from pgblobdump.report.formats import Format

if TYPE_CHECKING:  # rich is loaded by the first table or line printed, not by --help
    from rich.console import Console
    from rich.table import Table as RichTable

__all__ = ["Format", "emit", "rich_table", "stderr_console", "stdout_console", "write_listing"]


PIPE_WIDTH = 200
"""Columns for tables written to a pipe or file, where rich would assume 80 and elide cells."""


@functools.cache
def _console_class() -> type[Console]:
    """rich's Console, except that a closed pipe raises BrokenPipeError (which the CLI
    turns into a quiet exit 0, like cat) instead of rich's SystemExit(1)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console


def stdout_console() -> Console:
    width = None if sys.stdout.isatty() else PIPE_WIDTH
    return _console_class()(file=sys.stdout, soft_wrap=True, width=width)


def stderr_console() -> Console:
    return _console_class()(file=sys.stderr, soft_wrap=True)


def rich_table(table: Table) -> RichTable:
    from rich.table import Table as RichTable

    rt = RichTable(title=table.title or None, title_justify="left", header_style="bold")
    for c in table.columns:
        rt.add_column(c.heading, justify="right" if c.numeric else "left",
                      overflow="fold" if c.fold else "ellipsis")  # fmt: skip
    for row in table.cells():
        rt.add_row(*row)
    return rt


def emit(table: Table, fmt: Format, json_value: Any = None) -> None:
    """Print ``table`` in ``fmt``; ``json_value`` replaces the rows in JSON when given."""
    if fmt is Format.JSON:
        sys.stdout.write(to_json(table if json_value is None else json_value))
    elif fmt is Format.CSV:
        sys.stdout.write(to_csv(table))
    elif fmt is Format.MARKDOWN:
        sys.stdout.write(to_markdown(table))
    else:
        from rich.markup import escape

        console = stdout_console()
        console.print(rich_table(table))
        for note in table.notes:  # on a terminal wrapped at words, not by it mid-word
            console.print(f"[dim]{escape(note)}[/dim]", soft_wrap=not console.is_terminal)


def write_listing(
    fmt: Format,
    columns: Sequence[str],
    records: Iterable[dict[str, Any]],
    numeric: Collection[str] = (),
    show: Mapping[str, Callable[[Any], str]] | None = None,
    titles: Mapping[str, str] | None = None,
) -> None:
    """A listing too long to hold (a million LOs), streamed to stdout: JSON, CSV or
    Markdown as asked; else, on a terminal, aligned columns for people (``numeric``
    ones right-aligned, ``show`` formatting a column, ``titles`` heading it in words other
    than its key), and tab-separated lines under a header line of the keys when stdout is
    a pipe or a file (for cut and awk)."""
    if fmt is Format.TABLE and sys.stdout.isatty():
        stream.write_aligned(sys.stdout, columns, records, numeric, show, titles)
    else:
        stream.write_rows(sys.stdout, fmt, columns, records)
