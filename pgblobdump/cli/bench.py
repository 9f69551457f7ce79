"""``pgblobdump bench``: storage benchmarks from the seed articles, on your server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pgblobdump.bench.toastspec import DEFAULT_LENGTHS
from pgblobdump.cli.completion import complete_major
from pgblobdump.cli.options import connection_options, output_options
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.progress import note, reporter
from pgblobdump.cli.types import SIZE, SIZES
from pgblobdump.generate.spec import Content
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report import Column, Table
from pgblobdump.report.table import jsonable
from pgblobdump.units import format_bytes

if TYPE_CHECKING:
    from pgblobdump.bench.read import ReadResult
    from pgblobdump.bench.toast import ToastResult

MAJOR = click.option(
    "--major",
    type=int,
    shell_complete=complete_major,
    default=17,
    show_default=True,
    help="The embedded server's major when no -d is given (17 has lz4).",
)
PLOT = click.option(
    "--plot",
    "plot_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write PNG and SVG plots into this folder.",
)


@click.group()
def bench() -> None:
    """Storage benchmarks from the seed articles: reads (file vs LO vs bytea) and TOAST.

    They run on a durable embedded server (PostgreSQL's own fsync, full_page_writes and
    synchronous_commit) unless -d names one; the settings in force are reported.

    Example: pgblobdump bench read --sizes 4.5MB --repeat 3
    """


def _target(target: ConnectionTarget) -> str | None:
    return target.conninfo() if target.given else None


def _size_label(n: int) -> str:
    """``4.5 MB`` for a size given in decimal megabytes (as the article's), else binary."""
    return f"{n / 1e6:g} MB" if n >= 1_000_000 and n % 10_000 == 0 else format_bytes(n)


def _settings_note(described: dict[str, object]) -> str:
    settings = described.get("settings") or {}
    assert isinstance(settings, dict)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    where = "embedded server" if described.get("embedded") else "given server"
    return f"{where}: {shown}"


def _num(spec: str) -> Callable[[Any], str]:
    """A formatter for people (``,.1f``, ``.0%``...); None shows as nothing."""
    return lambda v: "" if v is None else format(v, spec)


def read_table(result: ReadResult) -> Table:
    """Rows of raw numbers (CSV and JSON carry them: sizes in bytes, times in ms), each
    column formatting its own for people."""
    rows = [{
        "size": r.size, "method": r.method, "mode": r.mode,
        "median_ms": r.seconds.median * 1000, "min_ms": r.seconds.low * 1000,
        "max_ms": r.seconds.high * 1000, "mb_per_s": r.mb_per_s, "vs_file": r.vs_file,
    } for r in result.rows]  # fmt: skip
    columns = [
        Column("size", show=_size_label), Column("method"), Column("mode"),
        Column("median_ms", "median ms", _num(",.1f"), True),
        Column("min_ms", "min ms", _num(",.1f"), True),
        Column("max_ms", "max ms", _num(",.1f"), True),
        Column("mb_per_s", "MB/s", _num(",.0f"), True),
        Column("vs_file", "x file", _num(".1f"), True),
    ]  # fmt: skip
    notes = [_settings_note(result.server), f"cache: {result.cache}", *result.notes]
    return Table(columns, rows, title="reads", notes=notes)


def toast_table(result: ToastResult, kind: str) -> Table:
    """As read_table: raw numbers in the rows (a share as 0..1), formatted per column."""
    rows = [{
        "length": r.length, "storage": r.storage, "bytes_per_row": r.bytes_per_row,
        "heap_bytes_per_row": r.heap_bytes_per_row,
        "toast_bytes_per_row": r.toast_bytes_per_row, "compressed_share": r.compressed_share,
        "stored_ratio": r.stored_ratio, "insert_mb_per_s": r.insert_mb_per_s,
        "substring_rows_per_s": r.substring_rows_per_s,
        "buffers_per_access": r.buffers_per_access,
    } for r in result.rows]  # fmt: skip
    columns = [  # short: the headings on a terminal too narrow for the table, wrapped
        Column("length", show=_num(","), numeric=True), Column("storage"),
        Column("bytes_per_row", "bytes/row", _num(",.0f"), True, short="bytes/ row"),
        Column("heap_bytes_per_row", "heap/row", _num(",.0f"), True, short="heap/ row"),
        Column("toast_bytes_per_row", "toast/row", _num(",.0f"), True, short="toast/ row"),
        Column("compressed_share", "compressed", _num(".0%"), True, short="compr."),
        Column("stored_ratio", "stored/length", _num(".2f"), True, short="stored/ length"),
        Column("insert_mb_per_s", "insert MB/s", _num(",.1f"), True),
        Column("substring_rows_per_s", "substring rows/s", _num(",.0f"), True),
        Column("buffers_per_access", "buffers/access", str, True, short="buffers/ access"),
    ]  # fmt: skip
    return Table(columns, rows, title=f"TOAST ({kind})",
                 notes=[_settings_note(result.server), *result.notes])  # fmt: skip


@bench.command("read")
@connection_options
@MAJOR
@click.option("--sizes", type=SIZES, default="350MB,4.5MB", show_default=True,
              help="Content sizes.")  # fmt: skip
@click.option("--chunk", type=SIZE, default="1MiB", show_default=True,
              help="Bytes per chunked read.")  # fmt: skip
@click.option("--repeat", type=click.IntRange(1, 1000), default=5, show_default=True,
              help="Reads per method, size and mode.")  # fmt: skip
@click.option("--content", type=click.Choice([c.value for c in Content]), default="random",
              show_default=True, help="random (incompressible), text or zeros.")  # fmt: skip
@click.option("--cold", is_flag=True,
              help="Drop the OS page cache (and restart the embedded server) before each"
                   " read; needs root.")  # fmt: skip
@click.option("--dir", "directory", type=click.Path(path_type=Path, file_okay=False),
              help="Where the file copy goes (default: the temporary directory).")  # fmt: skip
@PLOT
@output_options
def read_cmd(target: ConnectionTarget, major: int, sizes: tuple[int, ...], chunk: int,
             repeat: int, content: str, cold: bool, directory: Path | None, plot_dir: Path | None,
             fmt: Format) -> None:  # fmt: skip
    """Read the same bytes as a file, an LO, and bytea EXTERNAL and EXTENDED.

    Chunked reads (lo_get with offset, substring) and whole reads, each repeated; median
    and range per method, size and mode, MB/s, and the ratio to the file system, as in
    binary-data-performance.txt (350 MB and 4.5 MB by default).

    Example: pgblobdump bench read --sizes 350MB,4.5MB --repeat 5 --markdown
    """
    from pgblobdump.bench import read as read_bench
    from pgblobdump.bench.server import server

    spec = read_bench.ReadSpec(sizes, chunk, repeat, Content(content), cold, directory)
    with (
        reporter("reading", 0, unit="rounds") as rep,
        server(_target(target), major, cold, rep) as srv,
    ):
        result = read_bench.run(srv, spec, rep)
    table = read_table(result)
    if plot_dir is not None:
        from pgblobdump.harness.plots import grouped_bars

        for path in grouped_bars(
            plot_dir, "bench-read", "median read time (ms)",
            list(dict.fromkeys(f"{_size_label(r.size)} {r.mode}" for r in result.rows)),
            [(f"{_size_label(r.size)} {r.mode}", r.method, r.seconds.median * 1000)
             for r in result.rows],
        ):  # fmt: skip
            note(f"wrote {path}")
    emit(table, fmt, jsonable(result))


@bench.command("toast")
@connection_options
@MAJOR
@click.option("--lengths", type=SIZES, show_default=True, help="Value lengths in bytes.",
              default=",".join(str(n) for n in DEFAULT_LENGTHS))  # fmt: skip
@click.option("--rows", type=click.IntRange(10, 10_000_000), default=2000, show_default=True,
              help="Rows per length and storage.")  # fmt: skip
@click.option("--type", "kind", type=click.Choice(["text", "bytea"]), default="text",
              show_default=True, help="text (words) or bytea (random bytes).")  # fmt: skip
@PLOT
@output_options
def toast_cmd(target: ConnectionTarget, major: int, lengths: tuple[int, ...], rows: int, kind: str,
              plot_dir: Path | None, fmt: Format) -> None:  # fmt: skip
    """Sweep value lengths across the TOAST threshold: bytes per row on disk, the share
    stored compressed, insert rate, substring read rate, and buffers per access, for
    EXTENDED with pglz (and lz4 where the server has it) and EXTERNAL.

    Example: pgblobdump bench toast --lengths 1000,2000,4000 --rows 5000 --json
    """
    from pgblobdump.bench import toast as toast_bench
    from pgblobdump.bench.server import server
    from pgblobdump.bench.toastspec import ToastSpec

    spec = ToastSpec(lengths, rows, kind)
    with (
        reporter("toast", 0, unit="tables") as rep,
        server(_target(target), major, False, rep) as srv,
    ):
        result = toast_bench.run(srv, spec, rep)
    table = toast_table(result, kind)
    if plot_dir is not None:
        from pgblobdump.harness.plots import grouped_bars

        for path in grouped_bars(
            plot_dir, "bench-toast", "bytes per row on disk",
            list(dict.fromkeys(f"{r.length:,}" for r in result.rows)),
            [(f"{r.length:,}", r.storage, r.bytes_per_row) for r in result.rows],
        ):  # fmt: skip
            note(f"wrote {path}")
    emit(table, fmt, jsonable(result))
