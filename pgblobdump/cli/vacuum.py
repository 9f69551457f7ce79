"""``pgblobdump inspect`` and ``pgblobdump vacuum``: an LO health report, and orphan
clean-up that never removes a referenced LO."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import click

from pgblobdump.cli.options import connection_options, output_options
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.progress import note, reporter
from pgblobdump.cli.types import COLUMN, Parsed
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report import Column, Table
from pgblobdump.report import stream as rstream
from pgblobdump.report.table import jsonable
from pgblobdump.units import format_bytes, format_duration, noun, parse_duration, plural

DURATION = Parsed("duration", parse_duration)

REFERENCES = click.option(
    "--references",
    type=COLUMN,
    multiple=True,
    metavar="TABLE.COLUMN",
    help="A column holding LO OIDs in a type not found by itself (int4, int8, text, jsonb,"
    " a composite): an integer column's values are OIDs (a negative int4 is what oid::int4"
    " made of one), any other's every integer counts (repeatable).",
)


def _size(n: int | None) -> str:
    return "" if n is None else format_bytes(n)


def _oids(sample: tuple[int, ...], n: int) -> str:
    """``OIDs 16385, 16390`` or ``OIDs 16385, 16390 and 3 more``."""
    more = n - len(sample)
    return f"{noun(len(sample), 'OID')} {', '.join(map(str, sample))}" + (
        f" and {more:,} more" if more > 0 else "")  # fmt: skip


def _counted(n: int, sample: tuple[int, ...]) -> str:
    """A count with the first OIDs it counts, if any: ``2 (OIDs 16385, 16390)``."""
    return f"{n:,} ({_oids(sample, n)})" if n and sample else f"{n:,}"


NOT_REFERENCES = click.option(
    "--not-references",
    type=COLUMN,
    multiple=True,
    metavar="TABLE.COLUMN",
    help="A text or integer column found to hold what look like LO OIDs that, after"
    " review, does not reference LOs: never read as one (repeatable; docs/references.md).",
)


def _suspect(f: dict[str, Any]) -> str:
    """One suspected column's figures for people."""
    if not f["confirmed"]:
        return (f"{f['live']:,} live OIDs of {f['values']:,} values in its {f['screened']}:"
                " a key that meets OIDs by chance, low confidence (not read whole)")  # fmt: skip
    return (f"{f['live']:,} live OIDs and {f['dangling']:,} dangling of {f['values']:,} values"
            f" in {f['rows']:,} rows, {f['pattern']}, {f['confidence']} confidence,"
            f" e.g. {f['examples']}")  # fmt: skip


def whole_seconds(s: float) -> str:
    """A predicted time in whole seconds: ``12 s``, ``1,234 s``; ``<1 s`` for what rounds
    to 0 (a prediction is never nothing)."""
    shown = f"{s:,.0f}"
    return "<1 s" if shown in ("0", "-0") else f"{shown} s"


def bucket_label(label: str) -> str:
    """A size histogram's row: ``LOs up to 4 KiB``, ``LOs of 4-64 KiB``, ``LOs empty``.
    Words, not an indent, set the rows apart: Markdown drops leading spaces."""
    return f"LOs of {label}" if label[0].isdigit() else f"LOs {label}"


def inspection_table(r: Any) -> Table:
    """The report as ``what | value`` lines for people (JSON carries the whole record)."""
    rows: list[dict[str, Any]] = [
        {"what": "LOs", "value": f"{r.los:,}"},
        {"what": "size (logical / stored)",
         "value": "not readable" if r.size_bytes is None
         else f"{_size(r.size_bytes)} / {_size(r.stored_bytes)}"},
        {"what": "pg_largeobject on disk", "value": _size(r.pg_largeobject_bytes)},
        {"what": "pg_largeobject_metadata on disk", "value": _size(r.metadata_bytes)},
    ]  # fmt: skip
    for b in r.histogram:  # its last bucket is "over 1 GiB": its OIDs go there
        v = f"{b.los:,} ({_size(b.bytes)})"
        if b is r.histogram[-1] and r.over_1gib and r.over_1gib_sample:
            v += f": {_oids(r.over_1gib_sample, r.over_1gib)}"
        rows.append({"what": bucket_label(b.label), "value": v})
    if r.over_1gib is not None and not r.histogram:
        rows.append({"what": "over 1 GiB", "value": _counted(r.over_1gib, r.over_1gib_sample)})
    if r.sparse is not None:
        rows.append({"what": "sparse (holes never written)",
                     "value": _counted(r.sparse, r.sparse_sample)})  # fmt: skip
    rows += [{"what": f"owner {o.role}", "value": f"{o.los:,}"} for o in r.owners]
    rows.append({"what": "with ACLs / comments", "value": f"{r.with_acl:,} / {r.with_comment:,}"})
    for c in r.columns:
        if c.references is None:
            v = f"hidden: {c.hidden}"
        else:
            v = f"{c.references:,} OIDs, {c.dangling:,} dangling"
            v += f" ({c.hidden})" if c.hidden else ""
            v += "" if c.populated else " (a materialized view not populated)"
        rows.append({"what": f"column {c.column} ({c.type})", "value": v})
    for f in r.suspects:
        rows.append({"what": f"suspected reference {f['column']} ({f['type']})",
                     "value": _suspect(f)})  # fmt: skip
    rows.append({"what": "text and integer columns screened for OIDs",
                 "value": f"{r.candidate_columns:,} in {r.suspects_seconds:.2f} s"})  # fmt: skip
    if r.kept_only_by_suspects:
        b = r.kept_only_by_suspects_bytes
        rows.append({"what": "vacuumlo would delete (referenced by suspected columns only)",
                     "value": f"{r.kept_only_by_suspects:,} LOs"
                              + (f", {_size(b)}" if b is not None else "")})  # fmt: skip
    rows.append(
        {"what": "orphans (as vacuumlo counts them)" if r.kept_only_by_suspects else "orphans",
         "value": f"{r.orphans:,}" + ("" if r.orphans_exact else " at most")}
    )  # fmt: skip
    if r.kept_only_by_suspects:
        rows.append({"what": "orphans no column names (suspected references counted)",
                     "value": f"{r.unreferenced:,}"
                              + ("" if r.orphans_exact else " at most")})  # fmt: skip
    rows.append({"what": "dangling OIDs", "value": f"{r.dangling:,}"})
    rows.append(
        {
            "what": "lock table (per batch of ours)",
            "value": f"{r.lock_table:,} ({r.locks_per_batch:,})",
        }
    )
    rows.append(
        {
            "what": "largest safe pg_restore --transaction-size",
            "value": f"{r.safe_transaction_size:,}",
        }
    )
    for p in r.predictions:
        extra = f", {plural(p.files, 'file')}" if p.files is not None else ""
        extra += f", {p.toc_entries:,} TOC entries" if p.toc_entries is not None else ""
        took = whole_seconds(p.seconds)
        rows.append({"what": f"predicted {p.tool}",
                     "value": f"{took}, {_size(p.peak_rss)} peak{extra}"})  # fmt: skip
    if r.checksums is not None:
        c = r.checksums
        rows.append({"what": "checksum of every LO's bytes (sha256 of oid, md5)",
                     "value": f"{c.digest} ({c.los:,} LOs)"})  # fmt: skip
    if r.wal_summaries is not None:
        from pgblobdump.pg.wal import ready as walready

        rows += [{"what": w, "value": v} for w, v in walready.rows(r.wal_summaries)]
    notes = [*r.notes, *(r.wal_summaries.notes if r.wal_summaries is not None else ())]
    title = f"LOs of {r.database} (PostgreSQL {r.server_version})"
    return Table([Column("what"), Column("value")], rows, title=title, notes=notes)


@click.command("inspect")
@connection_options
@REFERENCES
@NOT_REFERENCES
@click.option(
    "--checksums",
    is_flag=True,
    help="Also read every LO's bytes (on the server: an md5 each, 16 bytes an LO over the"
    " network) and print one digest of them all: equal on two databases holding the same"
    " LOs with the same bytes (after copy, sync or restore).",
)
@output_options
def inspect_cmd(target: ConnectionTarget, references: tuple[tuple[str, str], ...],
                not_references: tuple[tuple[str, str], ...], checksums: bool,
                fmt: Format) -> None:  # fmt: skip
    """Report on a database's LOs from the catalogs: count and sizes (a histogram, over
    1 GiB, sparse), owners, ACLs and comments, every column referencing LOs with its
    dangling OIDs, suspected references (text or integer columns holding LO OIDs, found
    from statistics or a sample, then counted: live, dangling, form, confidence; and
    the LOs vacuumlo would delete that only they name), orphans (as vacuumlo counts
    them), the lock budget and the largest safe pg_restore --transaction-size, and
    pg_dump/pg_restore 16/17/18 time, memory and files predicted from curves this
    project measured (docs/vacuum.md). Reads no LO bytes unless --checksums.

    Example: pgblobdump inspect -d mydb --markdown
    """
    from pgblobdump.pg.connect import connect, describe
    from pgblobdump.vacuum.inspect import inspect

    conninfo = target.conninfo()
    with connect(conninfo, autocommit=True, doing="inspect") as conn:
        r = inspect(conn, describe(conninfo), references, checksums, not_references)
    emit(inspection_table(r), fmt, jsonable(r))


def dry_run_line(r: Any, min_age: float) -> str:
    """What a dry run found, for stderr: ``would remove 0 of 5,000 orphans; kept 5,000 as
    younger than --min-age 1 h: <when they will be old enough>``."""
    line = f"would remove {r.removable:,} of {plural(r.orphans, 'orphan')}"
    kept = []
    if r.young:
        kept.append(f"{r.young:,} as younger than --min-age {format_duration(min_age)}")
    if r.not_owned:
        kept.append(f"{r.not_owned:,} as not this role's to unlink")
    if kept:
        line += "; kept " + " and ".join(kept)
    return line + f" ({r.old_enough or r.age})" if r.young else line + f" ({r.age})"


def result_table(r: Any) -> Table:
    did = "would remove" if r.dry_run else "removed"
    rows = [
        {"what": "LOs", "value": f"{r.los:,}"},
        {"what": "reference columns", "value": f"{r.columns:,}"},
        {"what": "orphans", "value": f"{r.orphans:,}"},
        {"what": did, "value": f"{r.removable if r.dry_run else r.removed:,}"},
        {"what": "kept: younger than --min-age", "value": f"{r.young:,}"
         + (f" ({r.old_enough})" if r.old_enough else "")},
        {"what": "kept: not this role's to unlink",
         "value": _counted(r.not_owned, tuple(r.not_owned_sample))},
        {"what": "kept: referenced meanwhile", "value": f"{r.referenced_meanwhile:,}"},
        {"what": "kept: gone or changed meanwhile", "value": f"{r.skipped:,}"},
        {"what": "age", "value": r.age},
        {"what": "batches (LOs each)", "value": f"{r.batches:,} ({r.batch_size:,})"},
        {"what": "seconds", "value": f"{r.seconds:.2f}"},
    ]  # fmt: skip
    rows.insert(
        4,
        {
            "what": "kept: only suspected references name them (vacuumlo would delete them)",
            "value": f"{r.kept_only_by_suspects:,}",
        },
    )
    rows.insert(
        5,
        {
            "what": "kept: named by another text or integer column",
            "value": f"{r.kept_by_candidates:,}",
        },
    )
    for f in r.suspects:
        rows.append({"what": f"suspected reference {f['column']}", "value": _suspect(f)})
    if r.candidate_check is not None:
        c = r.candidate_check
        rows.append(
            {
                "what": "orphans checked against other columns",
                "value": f"{len(c['columns'])} columns read in {c['seconds']:.2f} s",
            }
        )
    if r.archived is not None:
        rows.insert(4, {"what": "archived and verified", "value": f"{r.archived:,}"})
    return Table([Column("what"), Column("value")], rows, title=f"vacuum of {r.database}",
                 notes=r.notes)  # fmt: skip


@click.command("vacuum")
@connection_options
@REFERENCES
@NOT_REFERENCES
@click.option(
    "--dry-run",
    is_flag=True,
    help="List the OIDs it would remove (one per line, or --json) and change nothing.",
)
@click.option(
    "--min-age",
    type=DURATION,
    default="1h",
    show_default=True,
    help="Keep LOs created less than this long ago (90s, 30m, 1h, 0).",
)
@click.option(
    "--archive-to",
    metavar="DIR|s3://...",
    help="First dump the orphans into this new packed archive; remove only what"
    " it holds, verified (restore brings them back).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    metavar="N",
    help="LOs per transaction (default: a share of the server's lock table).",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(1, 16),
    default=2,
    show_default=True,
    help="Connections unlinking at once (they share the lock budget).",
)
@click.option(
    "--state-schema",
    default="pgblobdump",
    show_default=True,
    help="Schema of the table where each run records which transactions had finished"
    " (how --min-age tells an orphan's age without commit timestamps).",
)
@output_options
def vacuum_cmd(target: ConnectionTarget, references: tuple[tuple[str, str], ...],
               not_references: tuple[tuple[str, str], ...], dry_run: bool, min_age: float,
               archive_to: str | None, batch_size: int | None, jobs: int, state_schema: str,
               fmt: Format) -> None:  # fmt: skip
    """Remove orphan LOs: those no column references (oid, lo, arrays, domains and
    composites of them, --references columns, and text or integer columns found to hold
    LO OIDs as applications write them: Hibernate's CLOB digits, '<oid>.<ext>' names,
    oid::int4; --not-references dismisses one). Before removing, the orphans are checked
    against every other text or integer column (an index where there is one, else one
    pass per table). Set-based, in lock-budgeted batches, each its own
    transaction; every batch is checked again while the referencing tables are locked
    against writers, so a reference inserted meanwhile keeps its LO (in a column that
    references LOs; a text or integer column that named none at the check is not locked:
    docs/references.md). Refuses (exit 13, nothing removed) when it cannot see every
    reference: a table the role may not read, row-level security, another session's
    temporary table holding OIDs. LOs the role may not unlink are kept and named.

    Example: pgblobdump vacuum -d mydb --dry-run --min-age 2h
    """
    from pgblobdump.vacuum import VacuumRequest, vacuum

    req = VacuumRequest(min_age=min_age, dry_run=dry_run, references=references,
                        not_references=not_references, archive_to=archive_to,
                        state_schema=state_schema, batch_size=batch_size, jobs=jobs)  # fmt: skip
    conninfo = target.conninfo()
    listed: list[int] = []

    def listing(oids: Iterator[int]) -> None:
        if fmt is Format.JSON:
            listed.extend(oids)  # printed inside the result's record
        else:
            rstream.write_rows(sys.stdout, fmt if fmt is not Format.TABLE else Format.CSV,
                               ["oid"], ({"oid": o} for o in oids))  # fmt: skip

    def warn(m: str) -> None:
        click.echo(f"Warning: {m}", err=True)

    with reporter("finding orphans" if dry_run else "removing orphans", 0) as rep:
        result = vacuum(conninfo, req, rep, listing if dry_run else None, warn)
    if dry_run and fmt is not Format.JSON:
        note(dry_run_line(result, min_age))
        return
    record = jsonable(result)
    if dry_run:
        record["oids"] = listed
    emit(result_table(result), fmt, record)
