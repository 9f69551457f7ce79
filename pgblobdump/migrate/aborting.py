"""``migrate abort``: undo an unfinished run before its switch, leaving the table as it was.

The triggers go first (in the same transaction that marks the run ``aborted``, so no
resume can continue without them), then, for a backward run, the LOs the run created (every
OID in the new column is one of them), then the new column. A kill in between is finished
by running ``abort`` again.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgblobdump.errors import NotFound, UsageError
from pgblobdump.migrate import columns, finish, state
from pgblobdump.migrate.locking import LockClock, exclusively
from pgblobdump.migrate.move import Move, check_name, drop_triggers_ddl
from pgblobdump.migrate.options import LockPolicy
from pgblobdump.migrate.state import Migration
from pgblobdump.pg.catalog import lo_exists
from pgblobdump.pg.locks import LockBudget
from pgblobdump.report.reporter import QUIET, Reporter


def abort(
    conn: psycopg.Connection,
    spec: str,
    schema: str,
    lock: LockPolicy,
    reporter: Reporter = QUIET,
) -> Migration:
    parts = columns.split_name(spec)
    if len(parts) not in (2, 3):
        raise UsageError(f"{spec!r} is not [schema.]table.column")
    col = columns.resolve(conn, spec)  # first: a missing table is "no table", as for run
    if not state.exists(conn, schema):
        raise NotFound(f"no migration has run in this database (no {schema}.migrations)")
    mig = state.latest(conn, schema, col.relid, col.name)
    if mig is None:
        raise NotFound(f"no migration of {col.qualified} to abort")
    if mig.phase in ("switched", "finishing", "done"):
        back = "lo" if mig.direction in ("bytea", "s3") else "bytea"
        raise UsageError(
            f"run {mig.id} of {col.qualified} has switched already: to go back, run"
            f" `migrate run {spec} --to {back}`"
        )
    state.claim(conn, mig.id)  # not while a run drives it; released when the session ends
    table = col.ident()
    move = Move(mig.direction, table, mig.column_name, mig.new_column, columns.Key((), ()))
    clock = LockClock()

    def drop_triggers() -> None:
        for stmt in drop_triggers_ddl(move, schema, mig.id):
            conn.execute(stmt)
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}").format(
                table, sql.Identifier(check_name(mig.id))
            )
        )
        state.update(conn, schema, mig.id, phase="aborted")

    exclusively(conn, table, f"aborting run {mig.id}", drop_triggers, lock, clock)
    if not finish.has_column(conn, col.relid, mig.new_column):
        return state.load(conn, schema, mig.id)
    if mig.direction == "lo":
        gone = _unlink_created(conn, table, mig.new_column)
        reporter.note(f"unlinked the {gone:,} LOs run {mig.id} had created")
    elif mig.direction == "s3lo":
        from pgblobdump.migrate.objects.back import unlink_made

        gone = unlink_made(conn, schema, mig.id)
        reporter.note(f"unlinked the {gone:,} LOs run {mig.id} had made of objects")
    elif mig.direction == "s3":
        reporter.note(
            f"the objects run {mig.id} wrote to {mig.target} are kept (listed in"
            f" {schema}.migration_objects); a new run reuses them"
        )

    def drop_column() -> None:
        conn.execute(
            sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(table, sql.Identifier(mig.new_column))
        )

    exclusively(conn, table, f"aborting run {mig.id}", drop_column, lock, clock)
    reporter.note(f"run {mig.id} aborted; {col.qualified} is as it was")
    return state.load(conn, schema, mig.id)


def _unlink_created(conn: psycopg.Connection, table: sql.Composable, column: str) -> int:
    """Unlink the LOs named in ``column`` (all created by the run), in lock-sized batches."""
    size = min(1000, LockBudget.read(conn).per_transaction)
    d = sql.Identifier(column)
    gone = 0
    while True:
        with conn.transaction():
            row = conn.execute(
                sql.SQL(
                    "WITH b AS (SELECT ctid AS tid, {d} AS prev FROM {t} WHERE {d} IS NOT NULL"
                    " LIMIT %s FOR UPDATE),"
                    " u AS (UPDATE {t} x SET {d} = NULL FROM b WHERE x.ctid = b.tid"
                    " RETURNING b.prev)"
                    " SELECT count(*), count(CASE WHEN prev <> 0 AND " + lo_exists("prev")
                    + " THEN pg_catalog.lo_unlink(prev) END) FROM u"
                ).format(d=d, t=table),
                (size,),
            ).fetchone()  # fmt: skip
        assert row is not None
        if not row[0]:
            return gone
        gone += int(row[1])
