"""``pgblobdump compare``: pg_dump/pg_restore of many LOs across majors, formats and counts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pgblobdump.cli.options import connection_options, output_options, pg_bin_option
from pgblobdump.cli.output import Format, emit, rich_table, stdout_console
from pgblobdump.cli.progress import note, reporter
from pgblobdump.compare import report, results
from pgblobdump.compare.matrix import DEFAULT_FORMATS, DEFAULT_MAJORS
from pgblobdump.errors import UsageError
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report.table import Table

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_LOS = "10k"
"""The main job's count: every dump and restore of the default plan in about a minute on a
2-core machine (47 s measured, two throwaway clusters included)."""
DEFAULT_CONTENDERS = "pg_dump,packed"


def _render(
    folder: Path, against: Path | None, plots: bool | None, fmt: Format, details: bool
) -> None:
    res = results.load(folder)
    other = results.load(against) if against is not None else None
    if plots:
        where = folder if folder.is_dir() else folder.parent
        _plots(res, where)
        note(f"plots redrawn: {where / 'plots'}/ and {where / 'report.html'}")
    if other is not None:
        emit(report.against_table(res, other, str(against)), fmt)
        _flush()
        return
    _show(res, fmt, details)


def _show(res: results.Results, fmt: Format, details: bool) -> None:
    if fmt is Format.JSON:
        emit(report.flat_table(res), fmt, json_value=report.json_document(res))
    elif fmt is Format.CSV:
        emit(report.flat_table(res), fmt)
    else:
        for i, table in enumerate(report.tables(res, details)):
            if i:
                click.echo("")
            if i == 0 and fmt is Format.TABLE:
                show_headline(stdout_console(), table, report.tables(res, compact=True)[0])
            else:
                emit(table, fmt)
    _flush()


def show_headline(console: Console, table: Table, compact: Table) -> None:
    """The main table as every table is drawn when it fits the terminal; else ``compact``
    (the seed's ratios under ours, a restore's mode under its name) in a frame of spaces,
    with the names' column never narrower than its longest line: wrapped, never cut."""
    from rich import box
    from rich.markup import escape
    from rich.measure import Measurement
    from rich.table import Table as RichTable

    wide = rich_table(table)
    unbounded = console.options.update_width(1_000_000)  # the width it wants, not the one it has
    if Measurement.get(console, unbounded, wide).maximum <= console.width:
        console.print(wide, soft_wrap=False)
    else:
        cells = compact.cells()
        rt = RichTable(title=compact.title or None, title_justify="left",
                       header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                       collapse_padding=True)  # fmt: skip
        for i, c in enumerate(compact.columns):
            if c.numeric:
                rt.add_column(c.heading, justify="right", no_wrap=True)
            else:
                longest = max((len(x) for row in cells for x in row[i].splitlines()), default=1)
                rt.add_column(c.heading, min_width=longest, overflow="fold")
        for row in cells:
            rt.add_row(*row)
        console.print(rt, soft_wrap=False)
        table = compact
    for line in table.notes:  # wrapped at words here, not by the terminal mid-word
        console.print(f"[dim]{escape(line)}[/dim]", soft_wrap=False)


def _flush() -> None:
    # A reader that went away (``| head -1``) raises BrokenPipeError here, inside the
    # command, where the CLI turns it into a quiet exit 0, not at interpreter exit.
    sys.stdout.flush()


def _plots(res: results.Results, folder: Path) -> None:
    """The plots, and report.html with them inline (the plots are what it shows)."""
    from pgblobdump.compare.html import write_report
    from pgblobdump.compare.plots import write_plots

    write_plots(res, folder / "plots")
    write_report(res, folder)


def kept(folder: Path | None, plots: bool) -> str:
    """The run's last line: where its results went, or the option that keeps them."""
    if folder is None:
        return (  # within 100 columns: the terminal would break it mid-option
            "results not kept: add --results DIR to keep results.json, commands.txt, plots"
            " and report.html"
        )
    what = ["results.json", "commands.txt"]
    if plots:
        what += [f"plots/ and {folder / 'report.html'}"]
    return f"results in {folder}/: {', '.join(what)}"


@click.command(
    epilog="Example (the seed's scale, ~15 min, ~9 GB free needed):"
    " pgblobdump compare --los 1M --no-restore --contenders pg_dump --results seed-1m"
)
@connection_options
@click.option(
    "--los",
    "los",
    multiple=True,
    metavar="N[,N...]",
    help=f"LO counts to measure (repeatable or comma list; 50k, 1M) [default: {DEFAULT_LOS}].",
)
@click.option(
    "--majors",
    default=",".join(map(str, DEFAULT_MAJORS)),
    show_default=True,
    help="pg_dump/pg_restore major versions (16,17,18).",
)
@click.option(
    "--formats",
    default=",".join(DEFAULT_FORMATS),
    show_default=True,
    help="Archive formats: custom, directory.",
)
@click.option(
    "--contenders",
    default=DEFAULT_CONTENDERS,
    show_default=True,
    help="What dumps and restores: pg_dump (every --majors x --formats), packed"
    " (pgblobdump's archive), or both.",
)
@click.option(
    "--repeat",
    type=int,
    default=1,
    show_default=True,
    help="Runs of each dump (the report shows median and min-max).",
)
@click.option(
    "--restore/--no-restore",
    default=None,
    help="Also restore each archive into fresh databases and check every LO"
    " [default: on for the throwaway source, off with -d].",
)
@click.option(
    "--jobs",
    type=int,
    default=2,
    show_default=True,
    help="With --restore: also restore with -j N (when N > 1).",
)
@click.option(
    "--transaction-size",
    type=int,
    default=1000,
    show_default=True,
    help="With --restore: also -j N --transaction-size T (pg_restore 17+; 0: skip).",
)
@click.option(
    "--verify-sample",
    type=int,
    default=10_000,
    show_default=True,
    help="With --restore: checksum about this many LOs (0: all).",
)
@click.option("--keep", is_flag=True, help="Keep the archives instead of removing each after use.")
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where archives are written [default: a temporary directory].",
)
@click.option(
    "--results",
    "results_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Save results.json, commands.txt, plots and report.html in this folder.",
)
@click.option(
    "--details",
    is_flag=True,
    help="Also the tables per part: dumps with TOC entries, restores, ratios between"
    " majors and against packed.",
)
@click.option(
    "--render",
    "render_dir",
    type=click.Path(path_type=Path),  # not exists=True: a missing folder is 8, as elsewhere
    help="Measure nothing: show (and re-plot) a saved results folder.",
)
@click.option(
    "--against",
    "against_dir",
    type=click.Path(path_type=Path),  # not exists=True: a missing folder is 8, as elsewhere
    help="With --render: compare with another saved results folder (another machine's).",
)
@click.option(
    "--plots/--no-plots",
    default=None,
    help="Write PNG and SVG plots and report.html into the results folder"
    " [default: with --results].",
)
@click.option(
    "--embedded",
    "embedded_major",
    type=int,
    default=16,
    show_default=True,
    metavar="MAJOR",
    help="Major of the throwaway source cluster (when no -d is given).",
)
@click.option("--embedded-major", "embedded_major_old", type=int, hidden=True,
              help="The former spelling of --embedded.")  # fmt: skip
@click.option(
    "--generate",
    "may_generate",
    is_flag=True,
    help="With -d: add empty LOs to that database to reach each --los count.",
)
@pg_bin_option
@output_options
def compare(
    target: ConnectionTarget, los: tuple[str, ...], majors: str, formats: str,
    contenders: str, repeat: int,
    restore: bool | None, jobs: int, transaction_size: int, verify_sample: int, keep: bool,
    workdir: Path | None, results_dir: Path | None, details: bool, render_dir: Path | None,
    against_dir: Path | None, plots: bool | None, embedded_major: int,
    embedded_major_old: int | None, may_generate: bool,
    pg_bin: tuple[Path, ...], fmt: Format,
) -> None:  # fmt: skip
    """Measure pg_dump/pg_restore and the packed archive on many large objects.

    With no options, the main job (about a minute): 10k empty LOs in a throwaway
    PostgreSQL 16 cluster, dumped by pg_dump 16 and 17 (custom and directory) and by
    pgblobdump's packed archive, each archive restored into a fresh database and checked.
    One table shows each dump's and restore's wall time, peak RSS, archive bytes and
    files over pg_dump 17 -Fc's, with the ratios of the seed (credativ's PostgreSQL 17
    benchmark, 1M LOs) beside ours; --details adds the tables per part (user and system
    CPU, allocated bytes, toc.dat, TOC entries by type, ratios between majors).

    Each dump and restore runs under /usr/bin/time, or is measured by the kernel's wait4
    where GNU time is absent. The source is a throwaway cluster, or the database given
    with -d (dumped as it is; restores only with --restore). Directory dumps make a file
    per LO: free space and inodes are checked first. Each archive is removed after it is
    measured unless --keep. --results DIR keeps results.json, commands.txt, plots and a
    self-contained report.html; without it nothing is kept, and the run's last line says
    so. On a terminal narrower than the table, the seed's ratios go under ours and a
    restore's mode under its name.

    Example: pgblobdump compare --los 50k,200k --results compare-results
    """
    from pgblobdump.compare import session  # the runs (and libpq): not for --help

    if render_dir is not None:
        _render(render_dir, against_dir, plots, fmt, details)
        return
    if against_dir is not None:
        raise UsageError("--against works with --render DIR (compare two saved runs)")
    if plots and results_dir is None:
        raise UsageError("--plots needs --results DIR to write into")
    request = session.CompareRequest(
        counts=session.parse_los(los or [DEFAULT_LOS]),
        majors=session.parse_majors(majors),
        formats=session.parse_formats(formats),
        contenders=tuple(c.strip() for c in contenders.split(",") if c.strip()),
        repeat=repeat,
        restore=not target.given if restore is None else restore,
        jobs=jobs,
        transaction_size=transaction_size or None,
        verify_sample=verify_sample,
        keep=keep,
        workdir=workdir,
        results_dir=results_dir,
        conninfo=target.conninfo() if target.given else None,
        may_generate=may_generate,
        embedded_major=embedded_major if embedded_major_old is None else embedded_major_old,
        pg_bin=pg_bin,
        counts_given=bool(los),
    )
    with reporter("compare", 0, unit="runs") as rep:
        res = session.run(request, rep)
    drawn = results_dir is not None and plots is not False
    if drawn and results_dir is not None:
        _plots(res, results_dir)
    _show(res, fmt, details)
    note(kept(results_dir, drawn))
