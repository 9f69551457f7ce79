"""``pgblobdump compare``: pg_dump/pg_restore of many LOs across majors, formats and counts."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import click

from pgblobdump.cli.options import connection_options, output_options, pg_bin_option
from pgblobdump.cli.output import Format, emit, stderr_console
from pgblobdump.compare import report, results, safety
from pgblobdump.compare.commands import find_toolchains
from pgblobdump.compare.matrix import (
    DEFAULT_FORMATS,
    DEFAULT_MAJORS,
    FORMATS,
    Plan,
    pg_dump_contenders,
    restore_modes,
)
from pgblobdump.compare.runner import Runner, RunOptions, RunResult
from pgblobdump.compare.source import (
    Source,
    embedded_source,
    external_source,
    lo_count,
    restore_server,
)
from pgblobdump.errors import UsageError
from pgblobdump.pg.doctor import gnu_time
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.pg.toolchain import check_major
from pgblobdump.units import parse_count

DEFAULT_LOS = "10k"


def _split(values: Sequence[str]) -> list[str]:
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def parse_los(values: Sequence[str]) -> tuple[int, ...]:
    """``--los 50k,200k --los 1M`` -> (50000, 200000, 1000000), sorted and distinct."""
    counts = {parse_count(v, "--los") for v in _split(values)}
    if not counts:
        raise UsageError("--los needs at least one count")
    return tuple(sorted(counts))


def parse_majors(text: str) -> tuple[int, ...]:
    try:
        majors = [int(p) for p in _split([text])]
    except ValueError as e:
        raise UsageError(f"--majors {text!r}: give major versions like 16,17,18") from e
    if not majors:
        raise UsageError("--majors needs at least one major version")
    return tuple(sorted({check_major(m) for m in majors}))


def parse_formats(text: str) -> tuple[str, ...]:
    formats = _split([text])
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UsageError(f"--formats {text!r}: choose from {', '.join(FORMATS)}")
    return tuple(dict.fromkeys(formats))


def _say(line: str) -> None:
    stderr_console().print(line, markup=False, highlight=False)


@contextlib.contextmanager
def _source(target: ConnectionTarget, embedded_major: int, may_generate: bool) -> Iterator[Source]:
    if target.given:
        yield external_source(target.conninfo(), may_generate)
        return
    _say(f"starting a throwaway PostgreSQL {embedded_major} cluster as the source")
    with embedded_source(embedded_major) as source:
        yield source


def _render(folder: Path, against: Path | None, plots: bool | None, fmt: Format) -> None:
    res = results.load(folder)
    other = results.load(against) if against is not None else None
    if plots:
        _plots(res, folder if folder.is_dir() else folder.parent)
    if other is not None:
        emit(report.against_table(res, other, str(against)), fmt)
        return
    _show(res, fmt)


@contextlib.contextmanager
def _workdir(given: Path | None, keep: bool) -> Iterator[Path]:
    if given is not None:
        yield given
        return
    made = Path(tempfile.mkdtemp(prefix="pgbd-compare-"))
    try:
        yield made
    finally:
        if keep:
            _say(f"archives kept in {made}")
        else:
            shutil.rmtree(made, ignore_errors=True)


def _show(res: results.Results, fmt: Format) -> None:
    if fmt is Format.JSON:
        emit(report.flat_table(res), fmt, json_value=report.json_document(res))
    elif fmt is Format.CSV:
        emit(report.flat_table(res), fmt)
    else:
        for i, table in enumerate(report.tables(res)):
            if i:
                click.echo("")
            emit(table, fmt)


def _plots(res: results.Results, folder: Path) -> None:
    from pgblobdump.compare.plots import write_plots

    for path in write_plots(res, folder / "plots"):
        _say(f"plot: {path}")


@click.command(
    epilog="Example (the seed's scale, ~15 min, ~9 GB free needed):"
    " pgblobdump compare --los 1M --results seed-1m"
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
    "--repeat",
    type=int,
    default=1,
    show_default=True,
    help="Runs of each dump (the report shows median and min-max).",
)
@click.option(
    "--restore",
    is_flag=True,
    help="Also pg_restore each archive into fresh databases and check every LO.",
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
    help="Save results.json, commands.txt and plots in this folder.",
)
@click.option(
    "--render",
    "render_dir",
    type=click.Path(path_type=Path, exists=True),
    help="Measure nothing: show (and re-plot) a saved results folder.",
)
@click.option(
    "--against",
    "against_dir",
    type=click.Path(path_type=Path, exists=True),
    help="With --render: compare with another saved results folder (another machine's).",
)
@click.option(
    "--plots/--no-plots",
    default=None,
    help="Write PNG and SVG plots into the results folder [default: with --results].",
)
@click.option(
    "--embedded-major",
    type=int,
    default=16,
    show_default=True,
    help="Major of the throwaway source cluster (when no -d is given).",
)
@click.option(
    "--generate",
    "may_generate",
    is_flag=True,
    help="With -d: add empty LOs to that database to reach each --los count.",
)
@pg_bin_option
@output_options
def compare(
    target: ConnectionTarget, los: tuple[str, ...], majors: str, formats: str, repeat: int,
    restore: bool, jobs: int, transaction_size: int, verify_sample: int, keep: bool,
    workdir: Path | None, results_dir: Path | None, render_dir: Path | None,
    against_dir: Path | None, plots: bool | None, embedded_major: int, may_generate: bool,
    pg_bin: tuple[Path, ...], fmt: Format,
) -> None:  # fmt: skip
    """Measure pg_dump and pg_restore of many large objects: majors x formats x counts.

    Each pg_dump (and with --restore each pg_restore) runs under /usr/bin/time, or is
    measured by the kernel's wait4 where GNU time is absent. Reported per dump: wall
    time, peak RSS, user/system CPU, archive bytes (apparent and allocated), toc.dat
    bytes, files and TOC entries by type; then ratios between majors beside the
    published ones (credativ's PostgreSQL 17 benchmark, 1M LOs).

    The source is a throwaway PostgreSQL 16 cluster filled with empty LOs, or the
    database given with -d. Directory dumps make a file per LO: free space and inodes
    are checked first. Each archive is removed after it is measured unless --keep.

    Example: pgblobdump compare --los 50k,200k --restore --results compare-results
    """
    if render_dir is not None:
        _render(render_dir, against_dir, plots, fmt)
        return
    # Every option is checked, and every folder made writable, before a cluster starts.
    if against_dir is not None:
        raise UsageError("--against works with --render DIR (compare two saved runs)")
    if plots and results_dir is None:
        raise UsageError("--plots needs --results DIR to write into")
    if verify_sample < 0:
        raise UsageError(f"--verify-sample must be 0 (all LOs) or more (got {verify_sample})")
    formats_t = parse_formats(formats)
    plan_majors = parse_majors(majors)
    counts = parse_los(los or [DEFAULT_LOS])
    if target.given and not may_generate and los:
        raise UsageError("--los with -d needs --generate (else the database is dumped as it is)")
    if may_generate and not target.given:
        raise UsageError("--generate applies to a database given with -d")
    if not target.given:
        check_major(embedded_major)
    modes = restore_modes(jobs, transaction_size or None) if restore else ()
    contenders = pg_dump_contenders(plan_majors, formats_t)
    plan = Plan(contenders, counts, repeat, modes)  # checks --repeat, before any cluster
    if results_dir is not None:
        safety.writable_folder(results_dir, "--results")
    if workdir is not None:
        safety.writable_folder(workdir, "--workdir")
    gnu = gnu_time()
    if gnu is None:
        _say("/usr/bin/time (GNU time) not found: measuring with the kernel's wait4 instead")
    toolchains = find_toolchains(plan_majors, pg_bin)
    run = RunResult()
    with contextlib.ExitStack() as stack:
        wd = stack.enter_context(_workdir(workdir, keep))
        source = stack.enter_context(_source(target, embedded_major, may_generate))
        if target.given and not may_generate:
            plan = Plan(contenders, (lo_count(source.conninfo),), repeat, modes)
        restore_to = None
        if modes and (
            source.embedded or int(source.server_version.split(".")[0]) < max(plan_majors)
        ):
            _say(f"starting a throwaway PostgreSQL {max(plan_majors)} cluster to restore into")
            restore_to = stack.enter_context(restore_server(max(plan_majors)))
        options = RunOptions(wd, gnu, keep=keep, verify_sample=verify_sample)
        complete = False
        try:
            Runner(plan, source, toolchains, options, _say, run, restore_to).run()
            complete = True
        finally:
            meta = results.make_meta(plan, source.description, source.server_version,
                                     toolchains, gnu, results.argv_now(), complete)  # fmt: skip
            res = results.Results(run.dumps, run.restores, run.commands, meta)
            if results_dir is not None:
                results.save(res, results_dir)
                _say(f"results saved in {results_dir}")
    if results_dir is not None and plots is not False:
        _plots(res, results_dir)
    _show(res, fmt)
