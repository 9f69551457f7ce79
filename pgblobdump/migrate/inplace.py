"""``migrate run --in-place``: the one-statement rewrite (``ALTER COLUMN ... TYPE ...
USING``) for small tables, verified before it commits.

The whole table is rewritten under ACCESS EXCLUSIVE: nobody reads or writes it until the
end (the lock held is measured and reported). It needs no primary key. Before the
rewrite, a digest of every row's content (the md5 of each value, sorted and hashed again)
is taken; after it, the same digest of the new column must be equal, or everything rolls
back, LOs created by a backward move included.
"""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError, UsageError
from pgblobdump.migrate import columns, decode, finish, state
from pgblobdump.migrate.locking import LockClock, exclusively
from pgblobdump.migrate.move import Move
from pgblobdump.migrate.options import RunOptions, RunResult
from pgblobdump.migrate.reach import access as access
from pgblobdump.migrate.running import under_way
from pgblobdump.migrate.start import defaults_note, prepare
from pgblobdump.pg.catalog import LO_EXISTS, lo_exists
from pgblobdump.pg.query import scalar
from pgblobdump.report.reporter import QUIET, Reporter


def _digest(
    conn: psycopg.Connection, table: sql.Composable, value: sql.Composable
) -> tuple[int, str]:
    row = conn.execute(
        sql.SQL(
            "SELECT count(v), coalesce(md5(string_agg(v, '' ORDER BY v)), '')"
            " FROM (SELECT md5({}) AS v FROM {}) s"
        ).format(value, table)
    ).fetchone()
    assert row is not None
    return int(row[0]), str(row[1])


FUNCTION = "pgbd_in_place"
"""``pg_temp.pgbd_in_place(value)``: a row's new value, where it needs a subquery (whether
the LO exists), which ``ALTER COLUMN ... USING`` does not take."""


def _hashable(move: Move, value: sql.Composable) -> sql.Composable:
    """``value`` as ``md5`` takes it (an OID as text)."""
    if move.dst_type == "oid" and move.to == "oid":
        return sql.SQL("({})::pg_catalog.text").format(value)
    return value


def _through_function(
    conn: psycopg.Connection, col: columns.Column, move: Move, unlink: bool
) -> tuple[tuple[int, str], sql.Composable]:
    """Forward from another form than oid, or to oid: the digest of every row's new value
    and the USING expression computing it (``FUNCTION``). ``--to text``: LOs that do not
    decode are refused by OID. ``unlink``: the LOs that move are remembered."""
    t = col.ident()
    if unlink and move.reads_bytes:
        finish.remember(conn, move.schema, move.run_id, sql.SQL(
            "SELECT o FROM (SELECT {} AS o FROM {}) s WHERE " + lo_exists("s.o")
        ).format(move.ref(), t))  # fmt: skip
    try:
        with conn.transaction():
            before = _digest(conn, t, _hashable(move, move.copy()))
    except decode.ERRORS:
        decode.define(conn)
        rows = sql.SQL("SELECT {} AS o FROM {}").format(move.ref(), t)
        bad = [int(r[0]) for r in conn.execute(sql.SQL("{} ORDER BY 1").format(
            decode.failing(rows)))]  # fmt: skip
        raise DatabaseError(
            decode.refusal(col.qualified, decode.encoding(conn), bad, online=False)
        ) from None
    fn = sql.Identifier("pg_temp", FUNCTION)
    # The body names the value by the function's name: a column of the catalogs it asks
    # (pg_largeobject_metadata's "oid") would take a bare name for itself.
    create = sql.SQL(
        "CREATE OR REPLACE FUNCTION {fn}({a} {typ}) RETURNS {dst} LANGUAGE sql STABLE"
        " SET search_path = pg_catalog, pg_temp AS $pgbd$ SELECT {v} $pgbd$"
    ).format(fn=fn, a=sql.Identifier(col.name), typ=sql.SQL(col.type),
             dst=sql.SQL(move.dst_type), v=move.copy(FUNCTION))  # fmt: skip
    conn.execute(create)
    for name in columns.lo_manage_triggers(conn, col):
        conn.execute(sql.SQL("DROP TRIGGER {} ON {}").format(sql.Identifier(name), t))
    return before, sql.SQL("{}({})").format(fn, sql.Identifier(col.name))


def run_in_place(
    conn: psycopg.Connection, spec: str, opts: RunOptions, reporter: Reporter = QUIET
) -> RunResult:
    t0 = time.monotonic()
    if opts.to in ("s3", "s3lo") or opts.store is not None:
        raise UsageError(
            "--in-place does not go with object storage: the objects are written before"
            " the column moves, which only an online run does"
        )
    col, running = under_way(conn, spec, opts.schema)
    if running is not None:
        raise UsageError(
            f"a migration of {col.qualified} to {running.direction} is under way (run"
            f" {running.id}): resume it without --in-place, or `migrate abort` it first"
        )
    if opts.missing == "skip":
        raise UsageError("--in-place keeps no old column: use --missing error or null")
    storage, compression, _ = prepare(conn, col, opts, reporter)
    notes = ["in place", *defaults_note(col, opts.to)]
    new_los = None
    if opts.to == "lo":
        new_los = access.new_lo_access(conn, col.relid, col.name, opts.owner)
        notes.append(new_los.note())
    t, c = col.ident(), sql.Identifier(col.name)
    clock = LockClock()
    holder: list[int] = []
    reporter.note(f"rewriting {col.table_name} under an ACCESS EXCLUSIVE lock")

    def work() -> None:
        run_id = state.insert(
            conn, opts.schema, relid=col.relid, table_name=col.table_name, column_name=col.name,
            new_column=col.name, old_column="", direction=opts.to, phase="switched",
            missing=opts.missing, keep_old=False, storage=storage, compression=compression,
            notes=notes, allow_widening=opts.allow_acl_widening, source=col.form.name,
        )  # fmt: skip
        holder.append(run_id)
        move = Move(opts.to, t, col.name, col.name, columns.Key((), ()), opts.schema, run_id,
                    col.form)  # fmt: skip
        if new_los is not None:
            for stmt in access.lo_maker_ddl(move.lo_fn, new_los):
                conn.execute(stmt)
        using: sql.Composable = move.copy()
        if (opts.to != "lo" and col.form.name != "oid") or opts.to == "oid":
            before, using = _through_function(conn, col, move, opts.unlink)
        elif opts.to == "bytea":
            if opts.unlink:
                everything = sql.SQL("SELECT {} AS o FROM {}").format(c, t)
                finish.remember(conn, opts.schema, run_id, everything)
            before = _digest(conn, t, move.copy())
            # USING takes no subquery: dangling OIDs (--missing null) become NULL first.
            conn.execute(
                sql.SQL(
                    "UPDATE {t} SET {c} = NULL WHERE {c} IS NOT NULL AND NOT " + LO_EXISTS
                ).format(t=t, c=c, o=c)
            )
            using = sql.SQL("pg_catalog.lo_get({})").format(c)
            for name in columns.lo_manage_triggers(conn, col):
                conn.execute(sql.SQL("DROP TRIGGER {} ON {}").format(sql.Identifier(name), t))
        else:
            before = _digest(conn, t, c)
        if col.default is not None and opts.to != "text":  # text's goes on applying
            conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP DEFAULT").format(t, c))
        extra = sql.Composed([])
        if storage:
            extra = sql.SQL(", ALTER COLUMN {} SET STORAGE {}").format(c, sql.SQL(storage))
        if compression:
            extra = sql.SQL("{}, ALTER COLUMN {} SET COMPRESSION {}").format(
                extra, c, sql.SQL(compression)
            )
        conn.execute(
            sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}{}").format(
                t, c, sql.SQL(move.dst_type), using, extra
            )
        )
        if new_los is not None:
            conn.execute(sql.SQL("DROP FUNCTION {}(bytea)").format(move.lo_fn))
        after_value: sql.Composable = c
        if opts.to == "lo":
            after_value = sql.SQL("pg_catalog.lo_get({})").format(c)
        after = _digest(conn, t, _hashable(move, after_value))
        if after != before:
            raise DatabaseError(
                f"the rewritten {col.qualified} does not match what it held"
                f" ({after[0]:,} values against {before[0]:,}); nothing was changed"
            )

    exclusively(conn, t, f"rewriting {col.table_name}", work, opts.lock, clock)
    reporter.note(f"held ACCESS EXCLUSIVE on {col.table_name} for {clock.longest_ms / 1000:.2f} s")
    mig = state.load(conn, opts.schema, holder[0])
    kept = finish.finish(conn, mig, opts.schema, opts.unlink, opts.lock, clock, reporter)
    mig = state.load(conn, opts.schema, holder[0])
    rows = scalar(conn, sql.SQL("SELECT count(*) FROM {}").format(t))
    return RunResult(
        run_id=mig.id, column=col.qualified, direction=opts.to, phase=mig.phase, resumed=False,
        rows=rows, recopied=0, unlinked=mig.unlinked, kept_referenced=kept,
        lock_ms=clock.longest_ms, seconds=time.monotonic() - t0, storage=storage,
        compression=compression, notes=mig.notes,
    )  # fmt: skip
