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
from pgblobdump.errors import CorruptArchive, UsageError
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
@click.option(
    "--map",
    "use_map",
    is_flag=True,
    help="With -d: check a restore --remap through its mapping (schema pgblobdump_remap):"
    " each LO at the OID the run gave it; the latest finished run of this archive.",
)
@click.option(
    "--map-run",
    metavar="RUN",
    help="With --map: check this run (its id in pgblobdump_remap.runs) instead.",
)
@output_options
def verify(archive: str, target: ConnectionTarget, bases: tuple[str, ...], use_map: bool,
           map_run: str | None, fmt: Format) -> None:  # fmt: skip
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

    With --map, the database holds a restore --remap of the archive: each archive LO is
    checked at the new OID the run's mapping gives it; the rows have its "new_oid" too
    (empty when no map row names it: "missing"), and a map row whose old OID the archive
    does not hold is "extra". Refused (exit 8) when the database holds no remap run of
    the archive, (exit 4) when the run did not finish.

    Example: pgblobdump verify lobs.pbd -d mydb --json
    """
    from pgblobdump.cli.progress import note, reporter
    from pgblobdump.packed.chain.archives import Chain
    from pgblobdump.packed.verify import check_chain, compare_database

    if map_run is not None and not use_map:
        raise UsageError("--map-run goes with --map")
    if use_map and not target.given:
        raise UsageError("--map checks a restore --remap in a database: give it with -d DB")
    chain = Chain.open(archive, bases)
    a = chain.top
    run = None
    if use_map:
        from pgblobdump.remap.verify import mapped_run

        source = a.manifest_sum or archive  # what restore --remap keys its runs by
        run = mapped_run(target.conninfo(), archive, source, map_run)
        if run.source != source:
            note(f"run {run.run} restored {run.archive}, not this archive (another manifest):"
                 " its map rows name other LOs")  # fmt: skip
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
    columns = ["oid", "what", "detail"] if run is None else ["oid", "new_oid", "what", "detail"]
    if run is not None:
        record["map_run"] = run.run
    counts = {"missing": 0, "extra": 0, "differs": 0}

    def counted(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for row in rows:
            counts[row["what"]] += 1
            yield row

    with reporter("comparing with the database", 0) as rep:
        if run is None:
            found: Iterator[Any] = compare_database(a, target.conninfo(), rep)
        else:
            from pgblobdump.remap.verify import compare_mapped

            found = compare_mapped(a, target.conninfo(), run.run, rep)
        rows = counted(dataclasses.asdict(d) for d in found)
        if fmt is Format.JSON:
            stream.write_json_object(sys.stdout, record, "differences", rows, lambda: counts)
        else:
            listed = stream.started(rows)
            if listed is not None or fmt is not Format.TABLE:  # CSV/Markdown: the header too
                write_listing(fmt, columns, listed or iter(()), numeric=["oid", "new_oid"])
    differences = sum(counts.values())
    through = "" if run is None else f" (through remap run {run.run})"
    if fmt is Format.TABLE:
        verdict = "differs from" if differences else "equals"
        seen = {
            "LOs missing from the database": counts["missing"],
            "LOs extra in the database": counts["extra"],
            "LOs differing": counts["differs"],
        }
        title = f"archive is sound; the database {verdict} it{through}"
        emit(result_table(title, record | seen), fmt)
    if not differences:
        note(f"the database holds the archive's {plural(check.los, 'LO')}, equal{through}")
        return
    click.echo(f"Error: the database differs from the archive{through}:"
               f" {plural(differences, 'difference')} (listed on stdout)", err=True)  # fmt: skip
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
