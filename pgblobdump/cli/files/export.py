"""``pgblobdump export``: LOs out of the database as files or S3 objects, one each, named
from a template."""

from __future__ import annotations

from typing import Any

import click

from pgblobdump.cli.options import (
    ONLY_OIDS,
    REFERENCED_BY,
    connection_options,
    jobs_option,
    output_options,
)
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.progress import reporter
from pgblobdump.cli.types import PART
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report.summary import summary_table

NOTES_SHOWN = 20
"""Renamed LOs told one per line on stderr; the rest are counted (all are in --json and
the manifest's ``renamed`` column)."""


@click.command("export")
@connection_options
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="DIR|s3://BUCKET/PREFIX",
    help="Where the files go: a directory (made 0700 if missing) or an S3 prefix; empty, or"
    " an earlier run of this same export (which is then finished).",
)
@click.option(
    "--name",
    "template",
    default="{oid}",
    show_default=True,
    metavar="TEMPLATE",
    help="Each LO's name: {oid}, and {TABLE.COLUMN} of the row that references it through a"
    " --referenced-by column of TABLE (e.g. '{docs.tenant}/{docs.filename}').",
)
@REFERENCED_BY
@ONLY_OIDS
@jobs_option("Connections, each a contiguous OID range of one snapshot.")
@click.option(
    "--part",
    type=PART,
    metavar="K/N",
    help="Export share K of N of the LOs (OID ranges of equal counts): N exports at once.",
)
@output_options
def export_cmd(target: ConnectionTarget, output: str, template: str,
               referenced_by: tuple[tuple[str, str], ...], oids: tuple[int, int], jobs: int,
               part: tuple[int, int] | None, fmt: Format) -> None:  # fmt: skip
    """Export large objects as files in a directory or objects under an S3 prefix, one
    per LO, read from one snapshot over --jobs connections, each file's sha256
    computed on the way; then a manifest (manifest.csv and manifest.json: OID, path,
    size, sha256, owner, ACL, comment, the referencing row).

    Names come from --name. A name that would leave the target (.., an absolute path),
    holds NUL or control characters, is over-long, is one of the export's own, or
    clashes with another LO's (or with a directory of one) is made safe and said so, on
    stderr, in --json and in the manifest's renamed column. Holes of sparse LOs stay
    holes of sparse files. Files are 0600 and directories 0700; S3 objects get no ACL.

    Interrupted (Ctrl-C, kill -9, a full disk), running the same command again
    finishes it: the journal in the target's .pgblobdump-export/ says what is stored,
    and nothing the export did not write is overwritten or removed.

    Example: pgblobdump export -d mydb -o out --referenced-by docs.body
    --name '{docs.tenant}/{docs.filename}' --jobs 2
    """
    from pgblobdump.files.exporting.run import ExportRequest, export
    from pgblobdump.pg.lostream import Selection

    req = ExportRequest(output, template, Selection(*oids, referenced_by), jobs, part)
    with reporter("exporting LOs", 0) as rep:
        result = export(target.conninfo(), req, rep)
        for oid, path, why in result.renamed[:NOTES_SHOWN]:
            rep.note(f"LO {oid} written as {path} ({why})")
        if len(result.renamed) > NOTES_SHOWN:
            rep.note(f"... and {len(result.renamed) - NOTES_SHOWN:,} more renamed LOs"
                     " (the manifest's renamed column, --json)")  # fmt: skip
    record: dict[str, Any] = result.record()
    shown = {k: v for k, v in record.items() if k != "renamed"}
    shown["renamed"] = len(result.renamed)
    shown["manifest"] = ", ".join(result.manifest)
    emit(summary_table("exported", shown, unless_zero=("kept", "renamed")), fmt, record)
