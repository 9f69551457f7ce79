"""``pgblobdump verify``: a packed archive checked on its own, and against a database."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import click

from pgblobdump.cli.options import connection_options, output_options
from pgblobdump.cli.output import Format, emit, write_listing
from pgblobdump.cli.packed.common import ARCHIVE, BASES, result_table
from pgblobdump.errors import (
    CorruptArchive,
)
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report import stream
from pgblobdump.report.table import record_table
from pgblobdump.units import plural

if TYPE_CHECKING:  # the core is imported by a run, not by --help
    from pgblobdump.packed.verify import ArchiveCheck


@click.command()
@ARCHIVE
@connection_options
@BASES
@output_options
def verify(archive: str, target: ConnectionTarget, bases: tuple[str, ...], fmt: Format) -> None:
    """Check a packed archive: every file, frame and LO checksum, the index against the
    volumes; with -d (or any connection option), also against that database: LOs
    missing, extra or different, by OID. Exits 1 when the database differs.

    Prints the archive's counts; with -d, the differences (one row per LO) and then the
    counts with the database's verdict; --json prints one object with the archive's
    counts, "differences" (a list, empty when equal) and "missing", "extra", "differs";
    --csv and --markdown print the differences under their header (only the header when
    equal). A damaged archive exits 7; with --json it first prints what is damaged
    ("damaged_files", "damaged": each frame and the OIDs it loses, "damaged_los",
    "problems"), with --csv or --markdown the same as one row.

    Example: pgblobdump verify lobs.pbd -d mydb --json
    """
    from pgblobdump.cli.progress import note, reporter
    from pgblobdump.packed.chain.archives import Chain
    from pgblobdump.packed.verify import check_chain, compare_database

    chain = Chain.open(archive, bases)
    a = chain.top
    with reporter("checking files", 0) as rep:
        check = check_chain(chain, rep)
    if not check.ok:
        if fmt is not Format.TABLE:  # the report on stdout, the error line on stderr
            report, flat = _damage_report(check)
            emit(record_table(flat, "archive is damaged"), fmt, report)
        raise CorruptArchive(_problems(check.problems, skippable=check.data_only))
    record: dict[str, Any] = {"files": check.files, "los": check.los, "bytes": check.bytes}
    if chain.incremental:
        record["bases_checked"] = sum(k.archive is not None for k in chain.links)
        record["bases_not_needed"] = sum(k.archive is None for k in chain.links)
    if not target.given:
        emit(result_table("archive is sound", record), fmt, record)
        return
    columns = ["oid", "what", "detail"]
    counts = {"missing": 0, "extra": 0, "differs": 0}

    def counted(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for row in rows:
            counts[row["what"]] += 1
            yield row

    with reporter("comparing with the database", 0) as rep:
        rows = counted(dataclasses.asdict(d) for d in compare_database(a, target.conninfo(), rep))
        if fmt is Format.JSON:
            stream.write_json_object(sys.stdout, record, "differences", rows, lambda: counts)
        else:
            listed = stream.started(rows)
            if listed is not None or fmt is not Format.TABLE:  # CSV/Markdown: the header too
                write_listing(fmt, columns, listed or iter(()), numeric=["oid"])
    found = sum(counts.values())
    if fmt is Format.TABLE:
        verdict = "differs from" if found else "equals"
        seen = {
            "LOs missing from the database": counts["missing"],
            "LOs extra in the database": counts["extra"],
            "LOs differing": counts["differs"],
        }
        emit(result_table(f"archive is sound; the database {verdict} it", record | seen), fmt)
    if not found:
        note(f"the database holds the archive's {plural(check.los, 'LO')}, equal")
        return
    click.echo(f"Error: the database differs from the archive: {plural(found, 'difference')}"
               " (listed on stdout)", err=True)  # fmt: skip
    raise SystemExit(1)


def _damage_report(check: ArchiveCheck) -> tuple[dict[str, Any], dict[str, Any]]:
    """verify's report of a damaged archive: for --json (lists, OIDs as integers), and
    for --csv and --markdown (one row of raw values: OIDs as ranges, lists joined by
    ``; ``).
    ``damaged_los`` is None (null) when the damage hides which LOs it takes (the index
    or manifest damaged): only restore --skip-damaged's kind of damage names them."""
    from pgblobdump.pg.ledger import ranges_text

    lost = sorted(o for d in check.damaged for o in d.oids)
    report: dict[str, Any] = {
        "sound": False, "files": check.files, "los": check.expected_los,
        "bytes": check.expected_bytes, "damaged_files": check.damaged_files,
        "damaged_los": len(lost) if check.damaged else None,
        "damaged": [{"where": d.where, "reason": d.reason, "oids": d.oids}
                    for d in check.damaged],
        "problems": check.problems,
    }  # fmt: skip
    ranges = ranges_text(lost)
    flat = {k: v for k, v in report.items() if k not in ("sound", "damaged")}
    flat["damaged_oids"] = ranges
    return report, flat


def _problems(problems: list[str], skippable: bool, shown: int = 3) -> str:
    """verify's one line for what it found: the first ``shown`` problems, how many more,
    and, when only data volumes are damaged, the restore that reads past them."""
    line = "; ".join(problems[:shown])
    more = len(problems) - shown
    if more > 0:
        line += f"; and {more:,} more problem{'s' if more > 1 else ''}"
    if skippable:
        line += "; restore --skip-damaged restores the LOs the damage spares"
    return line
