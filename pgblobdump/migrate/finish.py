"""After the switch: remember the LOs the old column named, drop it, and (``--unlink``)
unlink those LOs that nothing else references.

Each step is idempotent, so a kill anywhere here is finished by the next run:
- the OIDs go into ``migration_los`` (``ON CONFLICT DO NOTHING``) before the old column
  is dropped, so a later ``migrate run --unlink`` still knows them;
- references from every other oid or lo column of the database are struck off the list
  first (as vacuumlo finds them), then the rest are unlinked in batches sized to the lock
  table (each ``lo_unlink`` holds a lock until commit), each batch deleting its rows from
  the list in the same transaction.

After the switch the application reads bytea from the column, so an old OID can only gain
a new reference from another place that already had it, which the first step sees.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError
from pgblobdump.migrate import refs, state
from pgblobdump.migrate.columns import quote
from pgblobdump.migrate.forms import Form
from pgblobdump.migrate.locking import LockClock, exclusively
from pgblobdump.migrate.options import LockPolicy
from pgblobdump.migrate.refs import STATE_TABLES
from pgblobdump.migrate.state import Migration
from pgblobdump.pg import catalog
from pgblobdump.pg.catalog import lo_exists
from pgblobdump.pg.locks import LockBudget
from pgblobdump.refs import candidates, suspects
from pgblobdump.report.reporter import Reporter
from pgblobdump.vacuum.refs import discover

UNLINK_BATCH = 1000


def table_of(conn: psycopg.Connection, relid: int) -> sql.Identifier:
    row = conn.execute(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n"
        " ON n.oid = c.relnamespace WHERE c.oid = %s",
        (relid,),
    ).fetchone()
    if row is None:
        from pgblobdump.errors import NotFound

        raise NotFound(f"the table of this migration (OID {relid}) no longer exists")
    return sql.Identifier(row[0], row[1])


def has_column(conn: psycopg.Connection, relid: int, name: str) -> bool:
    if not name:
        return False
    row = conn.execute(
        "SELECT 1 FROM pg_attribute WHERE attrelid = %s AND attname = %s AND attnum > 0"
        " AND NOT attisdropped",
        (relid, name),
    ).fetchone()
    return row is not None


def pending(conn: psycopg.Connection, schema: str, run_id: int) -> bool:
    """Whether run ``run_id`` still lists LOs to unlink."""
    row = conn.execute(
        sql.SQL("SELECT EXISTS (SELECT 1 FROM {}.migration_los WHERE run_id = %s)").format(
            sql.Identifier(schema)
        ),
        (run_id,),
    ).fetchone()
    return bool(row and row[0])


def remember(conn: psycopg.Connection, schema: str, run_id: int, source: sql.Composable) -> None:
    """Add the OIDs ``source`` (a query of column ``o``) yields to the run's LO list."""
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.migration_los (run_id, oid) SELECT DISTINCT %s::int8, o FROM ({}) s"
            " WHERE o IS NOT NULL ON CONFLICT DO NOTHING"
        ).format(sql.Identifier(schema), source),
        (run_id,),
    )


def finish(
    conn: psycopg.Connection,
    mig: Migration,
    schema: str,
    unlink: bool,
    lock: LockPolicy,
    clock: LockClock,
    reporter: Reporter,
    notes: list[str] | None = None,
) -> int:
    """Take run ``mig`` from ``switched`` to ``done``; returns how many LOs ``--unlink``
    kept because other columns reference them. What the user must know goes to
    ``notes``."""
    table = table_of(conn, mig.relid)
    old = sql.Identifier(mig.old_column)
    if mig.phase == "switched":
        late = written_after_verify(conn, mig, table, reporter, schema)
        with conn.transaction():
            if late:
                # Keep what those rows' LOs hold now: the old column stays, nothing of it
                # is unlinked, and the user is told where to look.
                unlink = False
                mig.keep_old = True
                state.update(conn, schema, mig.id, keep_old=True)
                msg = (
                    f"{late[0]:,} LOs were written after the verify pass read them (first"
                    f" OIDs: {refs.listed(late[1], late[0])}): their rows hold the bytes from"
                    f" before; the old column {mig.old_column} is kept and nothing is unlinked."
                    f" Compare: SELECT * FROM {mig.table_name} WHERE {mig.column_name} IS"
                    f" DISTINCT FROM {compared(mig)}"
                )
                reporter.note(msg)
                if notes is not None:
                    notes.append(msg)
            if unlink and moved_bytes(mig) and has_column(conn, mig.relid, mig.old_column):
                # The LOs whose bytes moved: a text column's inline values name none, and
                # one that looks like an OID names no LO (none there now: none moved).
                remember(conn, schema, mig.id, sql.SQL(
                    "SELECT o FROM (SELECT {} AS o FROM {}) s WHERE " + lo_exists("s.o")
                ).format(old_oid(mig), table))  # fmt: skip
            state.update(conn, schema, mig.id, phase="finishing", unlink=unlink)
    if not mig.keep_old and has_column(conn, mig.relid, mig.old_column):

        def drop() -> None:
            conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN {}").format(table, old))

        # named in full: "the old column lo_lo" read as a stutter, and lo_lo is a name the
        # user never gave (the switch renamed the old column to it)
        gone = f"{mig.table_name}.{quote(mig.old_column)}"
        exclusively(conn, table, f"dropping column {gone}", drop, lock, clock)
        reporter.note(f"dropped column {gone} (the old {quote(mig.column_name)},"
                      " renamed at the switch)")  # fmt: skip
    kept = 0
    if unlink and moved_bytes(mig):
        kept = unlink_los(conn, mig, schema, reporter)
    elif moved_bytes(mig) and pending(conn, schema, mig.id):
        reporter.note(
            "the LOs the old column named are kept; `migrate run --unlink` on the same column"
            " unlinks those nothing else references"
        )
    elif moved_bytes(mig) and mig.phase == "switched":
        reporter.note(
            "the LOs the old column named are kept (vacuumlo or `migrate plan` finds them as"
            " orphans)"
        )
    with conn.transaction():
        state.update(conn, schema, mig.id, phase="done", lock_ms=clock.longest_ms)
    return kept


def written_after_verify(
    conn: psycopg.Connection, mig: Migration, table: sql.Composable, reporter: Reporter,
    schema: str = "pgblobdump",
) -> tuple[int, tuple[int, ...]] | None:  # fmt: skip
    """The LOs of the old column written into in place (lo_put, lo_write, lo_truncate: none
    of them touches the row) after the verify pass began, whose bytes now differ from the
    row's: ``(count, sample)``, or None. Every page such a write leaves has an xmin at or
    past ``verify_xmin``; finding them reads pg_largeobject, which only some roles may."""
    if not moved_bytes(mig) or mig.verify_xmin is None:
        return None
    if not has_column(conn, mig.relid, mig.old_column):
        return None
    if not catalog.pages_readable(conn):
        reporter.note(
            "bytes written into LOs in place after the verify pass cannot be looked for by"
            " this role (it may not read pg_largeobject)"
        )
        return None
    form, new = Form(mig.source), sql.Composed([sql.Identifier("w", mig.column_name)])
    if mig.direction == "text":  # compared as bytes: an LO written since may not decode
        new = sql.SQL("pg_catalog.convert_to({}, pg_catalog.getdatabaseencoding())").format(new)
    differs = sql.SQL("{} IS DISTINCT FROM pg_catalog.lo_get(w.o)").format(new)
    if mig.direction == "s3":  # the object's bytes, as their sha256 was entered
        differs = sql.SQL(
            "pg_catalog.sha256(pg_catalog.lo_get(w.o)) IS DISTINCT FROM (SELECT f.sha256"
            " FROM {} f WHERE f.run_id = {} AND f.lo = w.o::int8 LIMIT 1)"
        ).format(sql.Identifier(schema, "migration_objects"), sql.Literal(mig.id))
    with conn.transaction():
        row = conn.execute("SELECT txid_current() - %s", (mig.verify_xmin,)).fetchone()
        assert row is not None
        # age() counts from this transaction's xid: pages written since verify_xmin. The
        # rows of those LOs are found first (MATERIALIZED): left to itself, the planner
        # pushes the comparison down to the scan of the table and reads every LO again.
        found = conn.execute(
            sql.SQL(
                "WITH w AS MATERIALIZED (SELECT {o} AS o, x.{n} FROM {t} x WHERE {o}"
                " IN (SELECT p.loid FROM pg_catalog.pg_largeobject p WHERE age(p.xmin) <= %s))"
                " SELECT DISTINCT w.o FROM w WHERE CASE WHEN " + lo_exists("w.o")
                + " THEN {v} ELSE false END ORDER BY 1"
            ).format(o=form.oid(sql.Identifier("x", mig.old_column)), n=sql.Identifier(
                mig.column_name), t=table, v=differs),
            (min(int(row[0]), 2**31 - 1),),
        ).fetchall()  # fmt: skip
    if not found:
        return None
    oids = tuple(int(r[0]) for r in found)
    return len(oids), oids[: refs.LIST_MAX]


def compared(mig: Migration) -> str:
    """What a row's new value is compared with, as a user would write it."""
    got = f"lo_get({old_oid(mig).as_string(None)})"
    if mig.direction == "text":
        return f"convert_from({got}, getdatabaseencoding())"
    return got


def moved_bytes(mig: Migration) -> bool:
    """Whether the run moved LOs' bytes into the column (``bytea``, ``text``): their LOs
    are then orphans, which ``--unlink`` removes."""
    return mig.direction in ("bytea", "text", "s3")


def old_oid(mig: Migration) -> sql.Composable:
    """The OID a value of the run's old column names (by its form)."""
    return Form(mig.source).oid(sql.Identifier(mig.old_column))


def unlink_los(conn: psycopg.Connection, mig: Migration, schema: str, reporter: Reporter) -> int:
    """Unlink the LOs the old column named that no other column references: typed ones as
    vacuum finds them (oid, lo, arrays, domains, composites, ranges, materialized views; a
    kept old column counts), and text or integer columns (refs/suspects.py: Hibernate's
    CLOB digits, ``<oid>.<ext>``, integers); returns how many were kept for such
    references. DatabaseError, nothing unlinked, when one cannot be read whole (no SELECT,
    row security, another session's temporary table)."""
    sch = sql.Identifier(schema)
    ours = _state_tables(conn, schema)
    typed = discover(conn)
    others = [c for c in typed.columns if c.relid not in ours]
    blind = [r for r in typed.refusals if not r.lock and r.column.rsplit(".", 1)[0] not in {
        f"{schema}.{t}" for t in STATE_TABLES}]  # fmt: skip
    if blind:
        names = "; ".join(str(r) for r in blind[:5]) + (", ..." if len(blind) > 5 else "")
        raise DatabaseError(
            f"--unlink must see every column that references LOs, and this role cannot read"
            f" all of them ({names}): nothing unlinked; run `migrate run --unlink` on"
            f" {mig.table_name}.{mig.column_name} again as a role that can (or when the"
            " other session has ended)"
        )
    kept = 0
    for col in others:
        cur = conn.execute(
            sql.SQL(
                "DELETE FROM {}.migration_los l USING ({}) r WHERE l.run_id = {} AND l.oid = r.o"
            ).format(sch, col.oids(), sql.Literal(mig.id))
        )
        if cur.rowcount:
            kept += cur.rowcount
            reporter.note(f"{cur.rowcount:,} LOs are also referenced by {col.qualified}: kept")
    kept += _kept_by_suspects(conn, mig, schema, reporter)
    size = min(UNLINK_BATCH, LockBudget.read(conn).per_transaction)
    total = conn.execute(
        sql.SQL("SELECT count(*) FROM {}.migration_los WHERE run_id = %s").format(sch), (mig.id,)
    ).fetchone()
    reporter.task("unlinking", mig.unlinked + int(total[0] if total else 0))
    unlinked = mig.unlinked
    while True:
        with conn.transaction():
            row = conn.execute(
                sql.SQL(
                    "WITH b AS (DELETE FROM {s}.migration_los WHERE run_id = %(id)s AND oid IN"
                    " (SELECT oid FROM {s}.migration_los WHERE run_id = %(id)s ORDER BY oid"
                    " LIMIT %(n)s) RETURNING oid)"
                    " SELECT count(*), count(CASE WHEN " + lo_exists("b.oid")
                    + " THEN pg_catalog.lo_unlink(b.oid) END) FROM b"
                ).format(s=sch),
                {"id": mig.id, "n": size},
            ).fetchone()  # fmt: skip
            assert row is not None
            if not row[0]:
                break
            unlinked += int(row[1])
            state.update(conn, schema, mig.id, unlinked=unlinked)
        reporter.progress(unlinked, 0)
    reporter.note(f"unlinked {unlinked:,} LOs")
    return kept


def _kept_by_suspects(conn: psycopg.Connection, mig: Migration, schema: str,
                      reporter: Reporter) -> int:  # fmt: skip
    """Strike off the run's list the LOs some text or integer column of the database
    names (an index for an indexed integer column, else a pass per table): an
    application may keep an OID there, which vacuumlo and oid-only checks do not see.
    DatabaseError, nothing unlinked, when such a column cannot be read whole."""
    sch = sql.Identifier(schema)
    ours = _state_tables(conn, schema)
    cands = [c for c in candidates.candidates(conn) if c.relid not in ours]
    blind = [c for c in cands if not c.readable or c.rls]
    if blind:
        names = ", ".join(c.qualified for c in blind[:5]) + (", ..." if len(blind) > 5 else "")
        raise DatabaseError(
            f"--unlink must see every column that may hold LO OIDs as text or integers, and"
            f" this role cannot read all of {names} (no SELECT, or row security): nothing"
            f" unlinked; run `migrate run --unlink` on {mig.table_name}.{mig.column_name}"
            " again as a role that can"
        )
    live = [c for c in cands if c.populated]
    if not live:
        return 0
    check = sql.Identifier("pgbd_unlink_check")
    conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(check))
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE {} AS SELECT oid AS o FROM {}.migration_los WHERE run_id = %s"
        ).format(check, sch),
        (mig.id,),
    )
    try:
        found = suspects.kept(conn, live, sql.SQL("pg_temp.{}").format(check))
        if found.removed:
            conn.execute(
                sql.SQL(
                    "DELETE FROM {s}.migration_los l WHERE l.run_id = %s"
                    " AND NOT EXISTS (SELECT 1 FROM pg_temp.{c} k WHERE k.o = l.oid)"
                ).format(s=sch, c=check),
                (mig.id,),
            )
            for col, n in found.kept.items():
                reporter.note(f"{n:,} LOs are also named by {col} (as text or an integer): kept")
        return found.removed
    finally:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(check))


def _state_tables(conn: psycopg.Connection, schema: str) -> set[int]:
    """The relids of the run's own state tables (their columns name the LOs to unlink):
    only those, not the rest of the schema, which may be an application's."""
    rows = conn.execute(
        "SELECT c.oid::int8 FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = ANY (%s)",
        (schema, list(STATE_TABLES)),
    ).fetchall()
    return {int(r[0]) for r in rows}
