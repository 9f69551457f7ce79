"""``pgblobdump bench``: storage benchmarks from the seed articles, on your server."""

from __future__ import annotations

from pathlib import Path

import click

from pgblobdump.bench import read as read_bench
from pgblobdump.bench import toast as toast_bench
from pgblobdump.bench.server import server
from pgblobdump.cli.options import connection_options, output_options
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.progress import note, reporter
from pgblobdump.generate.spec import Content
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report import Column, Table
from pgblobdump.report.table import jsonable
from pgblobdump.units import format_bytes, parse_size

MAJOR = click.option(
    "--major",
    type=int,
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


def _sizes(text: str, what: str) -> tuple[int, ...]:
    return tuple(parse_size(s.strip(), what) for s in text.split(",") if s.strip())


def _size_label(n: int) -> str:
    """``4.5 MB`` for a size given in decimal megabytes (as the article's), else binary."""
    return f"{n / 1e6:g} MB" if n >= 1_000_000 and n % 10_000 == 0 else format_bytes(n)


def _settings_note(described: dict[str, object]) -> str:
    settings = described.get("settings") or {}
    assert isinstance(settings, dict)
    shown = ", ".join(f"{k}={v}" for k, v in sorted(settings.items()))
    where = "embedded server" if described.get("embedded") else "given server"
    return f"{where}: {shown}"


@bench.command("read")
@connection_options
@MAJOR
@click.option("--sizes", default="350MB,4.5MB", show_default=True, help="Content sizes.")
@click.option("--chunk", default="1MiB", show_default=True, help="Bytes per chunked read.")
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
def read_cmd(target: ConnectionTarget, major: int, sizes: str, chunk: str, repeat: int,
             content: str, cold: bool, directory: Path | None, plot_dir: Path | None,
             fmt: Format) -> None:  # fmt: skip
    """Read the same bytes as a file, an LO, and bytea EXTERNAL and EXTENDED.

    Chunked reads (lo_get with offset, substring) and whole reads, each repeated; median
    and range per method, size and mode, MB/s, and the ratio to the file system, as in
    binary-data-performance.txt (350 MB and 4.5 MB by default).

    Example: pgblobdump bench read --sizes 350MB,4.5MB --repeat 5 --markdown
    """
    spec = read_bench.ReadSpec(_sizes(sizes, "--sizes"), parse_size(chunk, "--chunk"), repeat,
                               Content(content), cold, directory)  # fmt: skip
    spec.check()
    with server(_target(target), major, cold) as srv, reporter("reading", repeat) as rep:
        result = read_bench.run(srv, spec, rep)
    rows = [{
        "size": _size_label(r.size), "method": r.method, "mode": r.mode,
        "median ms": f"{r.seconds.median * 1000:,.1f}",
        "min-max ms": f"{r.seconds.low * 1000:,.1f}-{r.seconds.high * 1000:,.1f}",
        "MB/s": f"{r.mb_per_s:,.0f}",
        "x file": f"{r.vs_file:.1f}" if r.vs_file is not None else "",
    } for r in result.rows]  # fmt: skip
    heads = ["size", "method", "mode", "median ms", "min-max ms", "MB/s", "x file"]
    notes = [_settings_note(result.server), f"cache: {result.cache}", *result.notes]
    table = Table([Column(h, numeric=h not in ("size", "method", "mode")) for h in heads],
                  rows, title="reads", notes=notes)  # fmt: skip
    if plot_dir is not None:
        from pgblobdump.compare.plots import grouped_bars

        for path in grouped_bars(
            plot_dir, "bench-read", "median read time (ms, log)",
            list(dict.fromkeys(f"{_size_label(r.size)} {r.mode}" for r in result.rows)),
            [(f"{_size_label(r.size)} {r.mode}", r.method, r.seconds.median * 1000)
             for r in result.rows],
        ):  # fmt: skip
            note(f"wrote {path}")
    emit(table, fmt, jsonable(result))


@bench.command("toast")
@connection_options
@MAJOR
@click.option("--lengths", default=",".join(str(n) for n in toast_bench.DEFAULT_LENGTHS),
              show_default=True, help="Value lengths in bytes.")  # fmt: skip
@click.option("--rows", type=click.IntRange(10, 10_000_000), default=2000, show_default=True,
              help="Rows per length and storage.")  # fmt: skip
@click.option("--type", "kind", type=click.Choice(["text", "bytea"]), default="text",
              show_default=True, help="text (words) or bytea (random bytes).")  # fmt: skip
@PLOT
@output_options
def toast_cmd(target: ConnectionTarget, major: int, lengths: str, rows: int, kind: str,
              plot_dir: Path | None, fmt: Format) -> None:  # fmt: skip
    """Sweep value lengths across the TOAST threshold: bytes per row on disk, the share
    stored compressed, insert rate, substring read rate, and buffers per access, for
    EXTENDED with pglz (and lz4 where the server has it) and EXTERNAL.

    Example: pgblobdump bench toast --lengths 1000,2000,4000 --rows 5000 --json
    """
    spec = toast_bench.ToastSpec(_sizes(lengths, "--lengths"), rows, kind)
    spec.check()
    with server(_target(target), major, False) as srv, reporter("toast", 0) as rep:
        result = toast_bench.run(srv, spec, rep)
    table_rows = [{
        "length": f"{r.length:,}", "storage": r.storage,
        "bytes/row": f"{r.bytes_per_row:,.0f}", "heap/row": f"{r.heap_bytes_per_row:,.0f}",
        "toast/row": f"{r.toast_bytes_per_row:,.0f}", "compressed": f"{r.compressed_share:.0%}",
        "stored/length": f"{r.stored_ratio:.2f}",
        "insert MB/s": f"{r.insert_mb_per_s:,.1f}",
        "substring rows/s": f"{r.substring_rows_per_s:,.0f}",
        "buffers/access": str(r.buffers_per_access),
    } for r in result.rows]  # fmt: skip
    heads = list(table_rows[0]) if table_rows else ["length"]
    table = Table([Column(h, numeric=h != "storage") for h in heads], table_rows,
                  title=f"TOAST ({kind})",
                  notes=[_settings_note(result.server), *result.notes])  # fmt: skip
    if plot_dir is not None:
        from pgblobdump.compare.plots import grouped_bars

        for path in grouped_bars(
            plot_dir, "bench-toast", "bytes per row on disk (log)",
            list(dict.fromkeys(f"{r.length:,}" for r in result.rows)),
            [(f"{r.length:,}", r.storage, r.bytes_per_row) for r in result.rows],
        ):  # fmt: skip
            note(f"wrote {path}")
    emit(table, fmt, jsonable(result))
