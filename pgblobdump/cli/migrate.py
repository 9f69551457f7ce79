"""``pgblobdump migrate``: move LO columns to bytea and back, online and verified."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import click

from pgblobdump import migrate as core
from pgblobdump.cli.options import connection_options, output_options
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.progress import note, reporter
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report import Column, Table
from pgblobdump.report.reporter import Reporter
from pgblobdump.report.table import jsonable, record_table
from pgblobdump.units import format_bytes

schema_option = click.option(
    "--state-schema",
    "schema",
    default="pgblobdump",
    show_default=True,
    help="Schema holding the runs' state (and the sync triggers while a run goes).",
)


@click.group()
def migrate() -> None:
    """Move LO columns to bytea (and back), online, verified and resumable.

    Example: pgblobdump migrate plan -d mydb
    """


def _size(n: int | None) -> str:
    return "" if n is None else format_bytes(n)


def plan_table(p: core.Plan) -> Table:
    rows = []
    for c in p.columns:  # raw numbers (CSV carries them); the columns format them for people
        st = c.stats
        rows.append({
            "column": c.column, "type": c.type,
            "LOs?": "yes" if c.confirmed else f"no ({c.sampled_los}/{c.sampled} sampled)",
            "rows": st.rows if st else None,
            "LOs": st.present if st else None,
            "dangling": st.dangling if st else None,
            "bytes": st.total_bytes if st else None,
            "largest": st.largest if st else None,
            ">1GB": st.over_1gb_count if st else None,
            "shared": st.shared_rows + c.shared_with_other_columns if st else None,
            "widens": c.widening.los if c.widening is not None else None,
            "storage": (
                f"{c.storage.storage} {c.storage.compression or ''}".strip() if c.storage else ""
            ),
            "space needed": c.space_needed if st else None,
        })  # fmt: skip
    notes = list(p.notes)
    for c in p.columns:
        if c.storage:
            notes.append(f"{c.column}: {c.storage.reason}")
        notes += [f"{c.column}: {n}" for n in c.notes]
    heads = ["column", "type", "LOs?", "rows", "LOs", "dangling", "bytes", "largest", ">1GB",
             "shared", "widens", "storage", "space needed"]  # fmt: skip
    return Table(
        [_plan_column(h) for h in heads],
        rows,
        title=f"oid/lo columns of {p.database} (PostgreSQL {p.server_version}):"
        f" {p.large_objects:,} LOs, {p.orphans:,} orphans",
        notes=notes,
    )


_SIZES = ("bytes", "largest", "space needed")
_COUNTS = ("rows", "LOs", "dangling", ">1GB", "shared", "widens")
_UNDER = ("type", "LOs?", "storage")
"""What the narrow layout says on the column's own line, beside its name."""


def _plan_column(h: str) -> Column:
    return Column(h, show=_size, numeric=True) if h in _SIZES else Column(h, numeric=h in _COUNTS)


def plan_narrow_table(table: Table) -> Table:
    """``plan_table``'s table for a terminal too narrow for it (100 columns): each column's
    name on a line of its own with its type, LOs? and storage, its figures under it."""

    def label(row: Mapping[str, Any]) -> str:
        said = "; ".join(f"{k} {row[k]}" for k in _UNDER if row[k])
        return f"{row['column']}  ({said})"

    figures = [c for c in table.columns if c.key != "column" and c.key not in _UNDER]
    return dataclasses.replace(
        table,
        columns=[Column("column"), *figures],
        rows=[{**row, "column": label(row)} for row in table.rows],
        stack=True,
    )


@migrate.command("plan")
@connection_options
@click.argument("columns", nargs=-1, metavar="[COLUMN]...")
@click.option(
    "--measure",
    is_flag=True,
    help="Advise storage from the server: write a sample of each column's LOs with each"
    " storage it offers and compare size and time (as bench toast does).",
)
@output_options
def plan_cmd(
    target: ConnectionTarget, columns: tuple[str, ...], measure: bool, fmt: Format
) -> None:
    """List the columns that reference LOs and what moving each to bytea would meet.

    Per column: rows, LOs referenced, dangling OIDs, total and largest size, LOs over 1 GB,
    LOs shared by several rows or columns, LOs whose move would widen access (a role may
    read the column but not the LO), lo_manage triggers, dependants, and the storage
    to give the new column from a zstd sample (EXTERNAL when incompressible, EXTENDED with
    lz4 or pglz otherwise). Orphans are counted as vacuumlo finds them. Read only.

    Every oid and lo column is looked at; a text, varchar, char, integer, bigint or
    numeric column holding OIDs only when named ([schema.]table.column): its values are
    read as refs.values reads them (an integer as oid::int4 stored it; a text when it is
    an OID's digits), the others counted as inline.

    Example: pgblobdump migrate plan -d mydb --json public.task_comment.text
    """
    from pgblobdump.pg.connect import connect, describe

    conninfo = target.conninfo()
    with connect(conninfo, doing="planning the migration") as conn:
        p = core.plan(conn, describe(conninfo), measure, list(columns))
    table = plan_table(p)
    emit(table, fmt, jsonable(p), narrow=plan_narrow_table(table))


def result_table(r: core.RunResult) -> Table:
    rows = [
        {"what": "column", "value": r.column},
        {"what": "phase", "value": r.phase},
        {"what": "run", "value": f"{r.run_id}{' (resumed)' if r.resumed else ''}"},
        {"what": "rows", "value": f"{r.rows:,}"},
        {"what": "rows re-copied", "value": f"{r.recopied:,}"},
        {"what": "LOs unlinked", "value": f"{r.unlinked:,}"},
        {"what": "LOs kept (referenced elsewhere)", "value": f"{r.kept_referenced:,}"},
        {"what": "longest exclusive lock", "value": f"{r.lock_ms / 1000:.3f} s"},
        {"what": "seconds", "value": f"{r.seconds:,.2f} s"},  # as every summary says it
    ]  # fmt: skip
    if r.storage:
        rows.append({"what": "storage", "value": f"{r.storage} {r.compression or ''}".strip()})
    return Table([Column("what"), Column("value")], rows, title="migrated", notes=r.notes)


class Direction(click.ParamType):  # type: ignore[type-arg]
    """A direction of ``--to`` or an ``s3://`` place."""

    name = "[" + "|".join(core.DIRECTIONS) + "|s3://BUCKET/PREFIX]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if text in core.DIRECTIONS or (text.startswith("s3://") and len(text) > 5):
            return text
        self.fail(f"{text!r} is none of {', '.join(core.DIRECTIONS)}, or s3://bucket/prefix")

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[click.shell_completion.CompletionItem]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(d) for d in (*core.DIRECTIONS, "s3://") if d.startswith(incomplete)]


@migrate.command("run")
@connection_options
@click.argument("column")
@click.option(
    "--to",
    type=Direction(),
    default="bytea",
    show_default=True,
    help="bytea: LO references become the bytes; lo: bytea values become new LOs (or a"
    " column of object keys: new LOs of the objects); text: a text/varchar column's OIDs"
    " (Hibernate/JDBC CLOBs) become the LOs' text, decoded in the database encoding, inline"
    " values staying; oid: a column of OIDs in integers or digits is retyped oid (no bytes"
    " move), so pg_dump and vacuumlo see them; s3://bucket/prefix: each LO becomes the"
    " object prefix/<oid> (its sha256 in its metadata, verified before the switch) and the"
    " column a text column of those keys.",
)
@click.option(
    "--url",
    is_flag=True,
    help="With --to s3://: the column holds s3://bucket/prefix/<oid> rather than the key.",
)
@click.option(
    "--from",
    "source",
    metavar="s3://BUCKET/PREFIX",
    help="With --to lo of a text column of object keys that no `--to s3://` run made: where"
    " the keys are (a value is a key under PREFIX, or s3://BUCKET/key).",
)
@click.option(
    "--missing",
    type=click.Choice(list(core.MISSING)),
    default="error",
    show_default=True,
    help="Values that name no LO (dangling OIDs; in an integer or text column, values not"
    " an OID's form too): refuse (error), give those rows NULL (null), or NULL and keep the"
    " old column with their values (skip). Not with --to text, which keeps them.",
)
@click.option(
    "--unlink", is_flag=True, help="After the switch, unlink the LOs nothing else references."
)
@click.option("--keep-old", is_flag=True, help="Keep the old column (renamed <column>_lo).")
@click.option(
    "--in-place",
    is_flag=True,
    help="One ALTER COLUMN ... TYPE rewrite under ACCESS EXCLUSIVE: for small tables.",
)
@click.option(
    "--storage",
    type=click.Choice(["external", "extended"]),
    help="Storage of the new bytea or text column (default: from a compressibility sample).",
)
@click.option(
    "--compression",
    type=click.Choice(["lz4", "pglz"]),
    help="TOAST compression of the new bytea or text column (with --storage extended).",
)
@click.option("--batch-rows", type=click.IntRange(min=1), help="Rows per batch (default: ~32 MB).")
@click.option(
    "--allow-acl-widening",
    is_flag=True,
    help="Move LOs that some role may read in the column (or through a view or SECURITY"
    " DEFINER function over it) but not as an LO: their bytes become readable by all who"
    " reach the column. With --to lo: a table with row-level security (each reader of the"
    " column may then read every row's LO). Refused without it. With --to lo of object"
    " keys: the new LOs get SELECT for the column's readers (without it, only their owner"
    " reads them).",
)
@click.option(
    "--owner",
    metavar="ROLE",
    help="With --to lo: the owner of the new LOs (default: the table's owner). They get"
    " SELECT for the roles that may read the column (of object keys: only with"
    " --allow-acl-widening).",
)
@click.option(
    "--lock-wait",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="Seconds to keep retrying a short exclusive lock before giving up.",
)
@schema_option
@output_options
def run_cmd(
    target: ConnectionTarget,
    column: str,
    to: str,
    url: bool,
    source: str | None,
    missing: str,
    unlink: bool,
    keep_old: bool,
    in_place: bool,
    storage: str | None,
    compression: str | None,
    batch_rows: int | None,
    allow_acl_widening: bool,
    owner: str | None,
    lock_wait: float,
    schema: str,
    fmt: Format,
) -> None:
    """Move COLUMN ([schema.]table.column) to bytea, or back with --to lo, online.

    Adds the new column (storage and compression set before it fills), copies rows in
    primary-key batches of short transactions while triggers keep rows written meanwhile
    right, verifies every row byte for byte, then switches the columns in one short
    transaction keeping NOT NULL, the comment and column grants; lo_manage triggers are
    dropped. The state lives in the database: after a kill or Ctrl-C, the same command
    resumes. Until the switch the old column is untouched. Exclusive locks are taken with a
    short lock_timeout and retried, never queueing for long.

    A column of another type that holds OIDs moves the same way: integers (a negative
    int4 is an OID of 2^31 or more) and text in an OID's digits go --to bytea or --to oid;
    a text/varchar column of CLOB OIDs goes --to text, where a value is an LO's only when
    it is an OID's digits and the LO exists (any other value is inline text and stays),
    and an LO that is not valid text in the database encoding is refused by OID.

    --to s3://bucket/prefix writes each LO the column names as the object prefix/<oid>
    first (an object already there is reused only when its sha256 is the LO's), verifies
    them all, then switches the column to text keys in the same short lock; the report
    says who could read the LOs, and the bucket's access is yours to set (no ACL is put
    on an object). --to lo reads such a column back into new LOs.

    No role gains access: LOs that a reader of the column, or of a view or SECURITY
    DEFINER function over it, may not read are refused (see --allow-acl-widening), as
    each reader's lo_compat_privileges has it; a row written during the run must name an
    LO its writer may read; new LOs (--to lo) belong to the table's owner with SELECT for
    the column's readers, and a table with row-level security is refused.

    Example: pgblobdump migrate run -d mydb docs.lo --unlink
    """
    from pgblobdump.errors import UsageError
    from pgblobdump.pg.connect import connect

    store = source
    if source is not None and to != "lo":
        raise UsageError("--from s3://bucket/prefix goes with --to lo")
    if to.startswith("s3://"):
        to, store = "s3", to
    opts = core.RunOptions(
        to=to, missing=missing, unlink=unlink, keep_old=keep_old, batch_rows=batch_rows,
        schema=schema, storage=storage, compression=compression,
        lock=core.LockPolicy(wait_s=lock_wait), allow_acl_widening=allow_acl_widening,
        owner=owner, store=store, url=url,
    )  # fmt: skip
    with (
        connect(target.conninfo(), doing=f"migrating {column}") as conn,
        reporter("migrating", 0, unit="rows") as rep,
    ):
        result = (core.run_in_place if in_place else core.run)(conn, column, opts, rep)
    emit(record_table(result) if fmt is Format.CSV else result_table(result), fmt,
         jsonable(result))  # fmt: skip


@migrate.command("status")
@connection_options
@schema_option
@output_options
def status_cmd(target: ConnectionTarget, schema: str, fmt: Format) -> None:
    """List the migration runs of a database, finished or not.

    Example: pgblobdump migrate status -d mydb --json
    """
    from pgblobdump.pg.connect import connect

    with connect(target.conninfo(), doing="reading the migration state") as conn:
        runs = core.every(conn, schema)
    if fmt is Format.CSV:
        emit(raw_status_table(runs), fmt)
    else:
        emit(status_table(runs), fmt, jsonable(runs))


_RAW_STATUS = ("id", "table_name", "column_name", "direction", "phase", "rows_done",
               "rows_total", "recopied", "unlinked", "lock_ms", "updated")  # fmt: skip


def raw_status_table(runs: list[core.Migration]) -> Table:
    """The runs' raw fields by their names, for CSV (JSON has every field)."""
    rows = [{h: getattr(r, h) for h in _RAW_STATUS} for r in runs]
    return Table([Column(h) for h in _RAW_STATUS], rows, title="migrations")


def _to_second(t: datetime) -> str:
    """This machine's local time to the second (the server gives microseconds)."""
    return t.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def status_table(runs: list[core.Migration]) -> Table:
    """The runs for people: worded headings, counts with separators, times to the second
    (``raw_status_table`` and JSON keep the fields' names and raw values)."""
    count = lambda v: f"{v:,}"  # noqa: E731
    rows = [
        {
            "id": r.id,
            "column": f"{r.table_name}.{r.column_name}",
            "to": r.direction,
            "phase": r.phase,
            "rows": f"{r.rows_done:,} of {r.rows_total:,}",
            "recopied": r.recopied,
            "unlinked": r.unlinked,
            "lock_ms": r.lock_ms,
            "updated": r.updated,
        }
        for r in runs
    ]
    columns = [
        Column("id", "run", numeric=True, show=str),
        Column("column", "column", fold=True),
        Column("to", "to"),
        Column("phase", "phase"),
        Column("rows", "rows", numeric=True),
        Column("recopied", "recopied", numeric=True, show=count),
        Column("unlinked", "unlinked", numeric=True, show=count),
        Column("lock_ms", "lock", numeric=True, show=lambda v: f"{v:,} ms"),
        Column("updated", "updated", show=_to_second),
    ]
    return Table(columns, rows, title="migrations")


@migrate.command("abort")
@connection_options
@click.argument("column")
@schema_option
def abort_cmd(target: ConnectionTarget, column: str, schema: str) -> None:
    """Undo an unfinished migration of COLUMN before its switch: triggers, the new column,
    and (backwards) the LOs it created go; the table is as it was.

    Example: pgblobdump migrate abort -d mydb docs.lo
    """
    from pgblobdump.pg.connect import connect

    with connect(target.conninfo(), doing=f"aborting the migration of {column}") as conn:
        mig = core.abort(conn, column, schema, core.LockPolicy(), Reporter(note=note))
    note(f"run {mig.id}: {mig.phase}")
