"""What the packed archive's commands share (dump, restore, verify, ls, cat, merge, pack,
unpack): the archive argument, the volume and level options, --base, and their helpers."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from pgblobdump import storage as places
from pgblobdump.cli.completion import complete_major
from pgblobdump.cli.options import F
from pgblobdump.cli.types import SIZE
from pgblobdump.errors import (
    NotAnArchive,
    PgBlobDumpError,
)
from pgblobdump.packed.format.spec import DEFAULT_VOLUME_SIZE, ZSTD_LEVEL
from pgblobdump.report import Table
from pgblobdump.report.summary import summary_table
from pgblobdump.storage import Storage
from pgblobdump.units import format_bytes

ARCHIVE = click.argument("archive", metavar="ARCHIVE")
VOLUME_SIZE = click.option(
    "--volume-size",
    type=SIZE,
    default=format_bytes(DEFAULT_VOLUME_SIZE).replace(" ", ""),
    show_default=True,
    help="Start a new data volume past this size.",
)
LEVEL = click.option(
    "--level", type=int, default=ZSTD_LEVEL, show_default=True,
    help="zstd level, 0 to store uncompressed.",
)  # fmt: skip


def pg_dump_major_option(text: str) -> Callable[[F], F]:
    """``--pg-dump-major MAJOR``: which pg_dump's archive (dump --full, unpack)."""
    return click.option("--pg-dump-major", type=int, metavar="MAJOR", help=text,
                        shell_complete=complete_major)  # fmt: skip


BASES = click.option(
    "--base",
    "bases",
    multiple=True,
    metavar="PATH",
    help="An incremental archive's base, where its manifest does not say (repeatable;"
    " matched by checksum).",
)
OUTPUT_FILE = click.option(
    "-o", "--output", type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    metavar="FILE|-", help="Write to FILE instead of stdout (- is stdout too).",
)  # fmt: skip
STDOUT = Path(places.STREAM)
"""What ``-o -`` parses to: standard output."""


@contextlib.contextmanager
def pg_dump_hint(archive: str, command: str) -> Iterator[None]:
    """NotAnArchive for a pg_dump archive (custom, directory or tar) says so and names
    ``command``, which reads it; any other error goes through unchanged."""
    try:
        yield
    except NotAnArchive as e:
        path = places.local_path(archive)
        if path is None or archive == places.STREAM:
            raise
        from pgblobdump.toc.reader import open_archive

        try:
            with open_archive(path) as a:  # its header only
                kind = a.kind
        except PgBlobDumpError:
            raise e from None
        raise NotAnArchive(f"{e}; it is a pg_dump {kind} archive: {command} reads it") from e


def new_directory(output: str) -> contextlib.AbstractContextManager[Storage]:
    """storage.create_new for this command: the claim names the command; a claim left
    behind after a run that succeeded is a warning on stderr."""
    ctx = click.get_current_context(silent=True)
    what = f"pgblobdump {ctx.info_name}" if ctx is not None and ctx.info_name else "pgblobdump"
    return places.create_new(output, what, lambda m: click.echo(f"Warning: {m}", err=True))


def result_table(title: str, record: dict[str, Any]) -> Table:
    return summary_table(title, record)
