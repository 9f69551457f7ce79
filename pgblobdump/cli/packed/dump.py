"""``pgblobdump dump``: LOs from a database into a packed archive."""

from __future__ import annotations

import sys

import click

from pgblobdump import storage as places
from pgblobdump.cli.options import (
    ONLY_OIDS,
    connection_options,
    detect_option,
    jobs_option,
    output_options,
)
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.packed.common import (
    LEVEL,
    VOLUME_SIZE,
    new_directory,
    pg_dump_major_option,
    result_table,
)
from pgblobdump.cli.pipes import silence_stdout
from pgblobdump.cli.types import COLUMN
from pgblobdump.errors import (
    FileError,
    UsageError,
)
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.units import format_bytes, plural


@click.command()
@connection_options
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="DIR|-",
    help="A new directory for the archive, or - for one stream on stdout.",
)
@ONLY_OIDS
@click.option(
    "--referenced-by",
    type=COLUMN,
    multiple=True,
    metavar="TABLE.COLUMN",
    help="Only LOs this column references (repeatable): an oid, an integer or numeric, or"
    " a text holding an OID's digits or <oid>.<ext>.",
)
@jobs_option("Workers (connections) sharing one snapshot.")
@VOLUME_SIZE
@LEVEL
@click.option(
    "--full",
    is_flag=True,
    help="Also the rest of the database: pg_dump under the same snapshot, kept in the archive.",
)
@pg_dump_major_option("With --full: the pg_dump to use (default: the server's major).")
@click.option(
    "--since",
    metavar="PREV",
    help="An incremental dump: only the bytes of LOs new or changed since the archive PREV"
    " (standalone or incremental, local or s3://); restore reads the chain.",
)
@detect_option("With --since")
@output_options
def dump(target: ConnectionTarget, output: str, oids: tuple[int, int],
         referenced_by: tuple[tuple[str, str], ...], jobs: int, volume_size: int, level: int,
         full: bool, pg_dump_major: int | None, since: str | None, detect: str,
         fmt: Format) -> None:  # fmt: skip
    """Dump large objects into a packed archive: a few files whatever the count.

    Owners, ACLs and comments come along; every worker reads under one snapshot, with
    set-based COPYs (never a round trip per LO). The manifest is written last: an
    interrupted dump leaves no archive behind.

    Example: pgblobdump dump -d mydb -o lobs.pbd --jobs 2
    """
    from pgblobdump.cli.progress import note, reporter
    from pgblobdump.packed.dump.run import DumpRequest
    from pgblobdump.packed.dump.run import dump as run_dump
    from pgblobdump.pg.lostream import Selection

    req = DumpRequest(Selection(*oids, referenced_by), jobs, volume_size,
                      level, full, pg_dump_major, since, detect)  # fmt: skip
    conninfo = target.conninfo()
    if output == places.STREAM:
        if fmt is not Format.TABLE:
            raise UsageError(
                f"--{fmt.value} prints to stdout, which -o - fills with the archive: drop it"
                " (the summary goes to stderr) or give -o DIR"
            )
        if sys.stdout.isatty():
            raise UsageError("-o - writes binary data: redirect stdout to a file or a pipe")
        try:
            with reporter("dumping LOs", 0) as rep:
                result = run_dump(conninfo, req, stream=sys.stdout.buffer, reporter=rep)
        except BrokenPipeError as e:
            silence_stdout()
            # Not `| head`: what the reader got is not an archive, and it must not pass.
            raise FileError(
                "the reader of the stream (-o -) went away: what it got is incomplete"
            ) from e
    else:
        with new_directory(output) as storage, reporter("dumping LOs", 0) as rep:
            result = run_dump(conninfo, req, storage=storage, reporter=rep)
    record = {"los": result.los, "bytes": result.bytes, "seconds": round(result.seconds, 3),
              "files": len(result.files), "archive_bytes": result.archive_bytes,
              "snapshot": result.snapshot}  # fmt: skip
    if result.incremental is not None:
        inc = result.incremental
        record.update({"los_at_snapshot": inc.los, "bytes_at_snapshot": inc.bytes,
                       "new": inc.new, "changed": inc.changed,
                       "carried": inc.carried, "gone": inc.gone,
                       "metadata_only": inc.metadata_only or 0,
                       "base": inc.chain[-1].where,
                       "chain_length": len(inc.chain) + 1})  # fmt: skip
    if output == places.STREAM:
        note(f"dumped {plural(result.los, 'LO')} ({format_bytes(result.bytes)})")
        return
    emit(result_table("dumped", record), fmt, record)
