"""``pgblobdump import``: every file under a directory or an S3 prefix becomes an LO."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from pgblobdump.cli.options import connection_options, jobs_option, output_options
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.progress import reporter
from pgblobdump.errors import UsageError
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report import Column, Table
from pgblobdump.units import format_bytes

if TYPE_CHECKING:  # the core (and libpq) is imported by a run, not by --help
    from pgblobdump.files.importing.run import ImportResult


def result_table(r: ImportResult) -> Table:
    rows = [
        {"what": "run", "value": r.run + (" (resumed)" if r.resumed else "")},
        {"what": "files imported", "value": f"{r.files:,}"},
        {"what": "bytes", "value": f"{r.bytes:,} ({format_bytes(r.bytes)})"},
        {"what": "OIDs", "value": f"{r.oids[0]}..{r.oids[1]}" if r.oids else "-"},
        {"what": "kept (imported before)", "value": f"{r.kept:,}"},
        {"what": "skipped", "value": f"{r.skipped_count:,}"},
        {"what": "rows inserted / updated", "value": f"{r.rows_inserted:,} / {r.rows_updated:,}"},
        {"what": "LOs now unreferenced", "value": f"{len(r.unreferenced):,}"},
        {"what": "seconds", "value": f"{r.seconds:,.2f} s"},
    ]
    return Table([Column("what"), Column("value")], rows, title="imported")


@click.command("import")
@click.argument("where", metavar="DIR|s3://bucket/prefix")
@connection_options
@jobs_option("Connections writing LOs at once, each a contiguous share of the files.")
@click.option(
    "--follow-symlinks",
    is_flag=True,
    help="Follow symbolic links that stay inside DIR (else each is skipped).",
)
@click.option(
    "--table",
    "table",
    metavar="TABLE",
    help="Write a row per file in TABLE (with --path-column and --lo-column).",
)
@click.option(
    "--path-column",
    metavar="COLUMN",
    help="--table's text column holding the file's path (relative, '/'-separated).",
)
@click.option(
    "--lo-column", metavar="COLUMN", help="--table's oid (or bigint) column set to the file's LO."
)
@click.option(
    "--owner", metavar="ROLE", help="Owner of the LOs: a role you may SET ROLE to (default: you)."
)
@click.option(
    "--grant",
    "grants",
    multiple=True,
    metavar="ROLE[:SELECT,UPDATE]",
    help="Grant ROLE SELECT (or the privileges named) on every LO (repeatable).",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Finish the interrupted import of the same place (kill -9): the files it"
    " imported, unchanged since, are kept.",
)
@output_options
def import_cmd(target: ConnectionTarget, where: str, jobs: int, follow_symlinks: bool,
               table: str | None, path_column: str | None, lo_column: str | None,
               owner: str | None, grants: tuple[str, ...], resume: bool,
               fmt: Format) -> None:  # fmt: skip
    """Import every regular file under a directory or an S3 prefix as a large object,
    streamed (a big file 1 MiB at a time), over --jobs connections, in lock-budgeted
    batches, at OIDs of one block reserved above every LO.

    Each LO is verified against its file's sha256 before its batch commits. A file
    that changes while it is read (size, mtime, ETag) is read again once, then skipped
    and reported. Symbolic links (unless --follow-symlinks), special files and the
    tool's own .pgblobdump-* names are skipped and reported. With --table, a row per
    file is inserted, or updated where the path is there (the LO it named before is
    kept, and listed as now unreferenced), in the transaction of its LO.

    On failure or interrupt the LOs this run made are removed and its rows put back.
    After a kill -9, --resume imports what the journal (schema pgblobdump_import)
    does not hold, never a file twice.

    Example: pgblobdump import ./scans -d app --table docs --path-column path --lo-column blob
    """
    from pgblobdump.files.importing.rows import RowTarget
    from pgblobdump.files.importing.run import ImportRequest, parse_grant, run_import

    given = [table, path_column, lo_column]
    if any(given) and not all(given):
        raise UsageError("--table, --path-column and --lo-column go together")
    rows = RowTarget(table, path_column, lo_column) if table and path_column and lo_column else None
    req = ImportRequest(where, jobs, follow_symlinks, resume, rows, owner,
                        tuple(parse_grant(g) for g in grants))  # fmt: skip
    with reporter("importing files", 0, unit="files") as rep:
        result = run_import(target.conninfo(), req, rep)
    record: dict[str, Any] = result.record()
    emit(result_table(result), fmt, record)
