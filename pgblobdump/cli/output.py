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

__all__ = [
    "Format", "compact_table", "emit", "fits", "print_line", "rich_table", "show_table",
    "stderr_console", "stdout_console", "write_listing",
]  # fmt: skip


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


def print_line(console: Console, line: str) -> None:
    """``line`` as is (no rich markup): on a terminal wrapped at words to its width (the
    terminal itself broke a long note mid-word: "(" / "--max-wal-size)"), into a pipe or
    a file one line whole, for grep."""
    console.print(line, markup=False, highlight=False, soft_wrap=not console.is_terminal)


def rich_table(table: Table) -> RichTable:
    from rich.table import Table as RichTable

    rt = RichTable(title=table.title or None, title_justify="left", header_style="bold")
    for c in table.columns:
        rt.add_column(c.heading, justify="right" if c.numeric else "left",
                      overflow="fold" if c.fold else "ellipsis")  # fmt: skip
    for row in table.cells():
        rt.add_row(*row)
    return rt


def emit(table: Table, fmt: Format, json_value: Any = None, narrow: Table | None = None) -> None:
    """Print ``table`` in ``fmt``; ``json_value`` replaces the rows in JSON when given;
    ``narrow``: the table for people where ``table`` does not fit the terminal."""
    if fmt is Format.JSON:
        sys.stdout.write(to_json(table if json_value is None else json_value))
    elif fmt is Format.CSV:
        sys.stdout.write(to_csv(table))
    elif fmt is Format.MARKDOWN:
        sys.stdout.write(to_markdown(table))
    else:
        show_table(stdout_console(), table, narrow)


def fits(console: Console, rt: RichTable) -> bool:
    """Whether ``rt`` is drawn whole within ``console``'s width (no cell narrowed)."""
    from rich.measure import Measurement

    unbounded = console.options.update_width(1_000_000)  # the width it wants, not the one it has
    return Measurement.get(console, unbounded, rt).maximum <= console.width


def _narrowest(table: Table) -> list[int]:
    """Each column's width in ``compact_table``, at its narrowest: its longest word (of
    the short heading and the cells), a number's whole cell."""
    cells = table.cells()
    widths = []
    for i, c in enumerate(table.columns):
        parts = [r[i] for r in cells] if c.numeric else [w for r in cells for w in r[i].split()]
        widths.append(max(len(w) for w in [*(c.short or c.heading).split(), *parts, "-"]))
    return widths


def compact_table(table: Table) -> RichTable:
    """``table`` in a frame of spaces, under its short headings wrapped at words; a
    column never narrower than its longest word (a number its whole cell), numbers no
    wider, so that the room left goes to the text, which wraps at words, never cut."""
    from rich import box
    from rich.table import Table as RichTable

    rt = RichTable(title=table.title or None, title_justify="left", header_style="bold",
                   box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                   show_edge=False)  # fmt: skip
    for c, longest in zip(table.columns, _narrowest(table), strict=True):
        rt.add_column(c.short or c.heading, justify="right" if c.numeric else "left",
                      min_width=longest, max_width=longest if c.numeric else None,
                      overflow="fold")  # fmt: skip
    for row in table.cells():
        rt.add_row(*row)
    return rt


def show_table(console: Console, table: Table, narrow: Table | None = None) -> None:
    """``table`` as drawn when it fits the terminal; else ``narrow`` (or ``table``)
    narrowed without a cut: every column under its short heading (``compact_table``),
    or each row's first cell on its own line (``report.narrow.stacked``) when its
    ``stack`` says so or the columns do not fit even so; the notes under it, on a
    terminal wrapped at words (not by the terminal mid-word), a legend of the short
    headings with them."""
    from rich.markup import escape

    from pgblobdump.report.narrow import legend, stacked

    wide = rich_table(table)
    if fits(console, wide):
        console.print(wide)
        notes = list(table.notes)
    else:
        table = narrow or table
        notes = list(table.notes)
        widths = _narrowest(table)
        lines = None
        if table.stack or sum(widths) + 2 * (len(widths) - 1) > console.width:
            lines = stacked(table, console.width)  # rich would cut columns off
        if lines is None:
            console.print(compact_table(table), soft_wrap=False)
        else:
            if table.title:
                console.print(f"[italic]{escape(table.title)}[/italic]", soft_wrap=False)
            for line in lines:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
        if legend(table):
            notes.append(legend(table))
    for note in notes:
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
    Markdown as asked; else, on a terminal, aligned columns for people (``numeric`` ones
    right-aligned, ``show`` formatting a column, ``titles`` heading it in words other than
    its key) within its width (the widest text cut with ``…``, a note on stderr naming
    --csv and --json for the whole), and tab-separated lines under a header line of the
    keys when stdout is a pipe or a file (for cut and awk)."""
    if fmt is Format.TABLE and sys.stdout.isatty():
        import shutil

        width = shutil.get_terminal_size().columns
        cut = stream.write_aligned(sys.stdout, columns, records, numeric, show, width, titles)
        from pgblobdump.cli.verbosity import SETTINGS

        if cut and not SETTINGS.quiet:
            from pgblobdump.units import plural

            sys.stdout.flush()
            print_line(stderr_console(), f"{plural(cut, 'cell')} cut with … to fit {width}"
                       " columns: --csv or --json lists them whole")  # fmt: skip
    else:
        stream.write_rows(sys.stdout, fmt, columns, records)
