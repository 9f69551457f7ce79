"""``migrate run``'s Runner: move a column online, from LOs to bytea or back, in phases
that a kill at any moment leaves safe and a rerun resumes.

1. **start** (one short exclusive moment): add the new column with its storage and
   compression, the sync triggers, and for a NOT NULL column a NOT VALID check.
2. **filling**: copy rows in primary-key batches, one short transaction each.
3. **verifying**: compare every row byte for byte, re-copying any that changed; then the
   check is validated (no lock that blocks writes) and rows the triggers could not copy
   are re-copied.
4. **switch** (one short exclusive moment): drop the triggers and ``lo_manage``, rename
   the old column away and the new one in, carry NOT NULL, the comment and column grants.
5. **finishing**: remember the LOs the old column named, drop it (unless ``--keep-old``),
   and with ``--unlink`` unlink those nothing else references, in lock-sized batches.

Up to the switch the old column is untouched; from the switch on the new one is verified.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import psycopg
from psycopg import sql

from pgblobdump import logs
from pgblobdump.errors import DatabaseError
from pgblobdump.migrate import batches, columns, decode, finish, forms, refs, state
from pgblobdump.migrate.columns import Column
from pgblobdump.migrate.locking import LockClock, exclusively
from pgblobdump.migrate.move import Move, check_name, drop_triggers_ddl
from pgblobdump.migrate.options import RunOptions
from pgblobdump.migrate.reach import access as access
from pgblobdump.migrate.start import refuse_widening, value_prefix
from pgblobdump.migrate.state import Migration
from pgblobdump.pg import catalog
from pgblobdump.pg.query import scalar
from pgblobdump.report.reporter import Reporter

log = logging.getLogger(__name__)

REDO_UNDER_LOCK = 100
"""Rows the sync trigger logged that the switch re-copies under its lock (more: outside
it first, so the exclusive moment stays short)."""
BATCH_BYTES = 32 << 20
"""A batch copies about this many bytes (its rows from the average LO size)."""
BATCH_ROWS = (100, 10_000)
REPAIR_ROUNDS = 5


class Objects(Protocol):
    """The objects of a run to (``s3``) or from (``s3``lo) object storage."""

    def sync(self) -> None: ...
    def waiting(self) -> int: ...


class Runner:
    """One run over one column; ``drive`` takes it from whatever phase it is in to done."""

    def __init__(
        self, conn: psycopg.Connection, col: Column, mig: Migration, opts: RunOptions,
        reporter: Reporter,
    ) -> None:  # fmt: skip
        assert col.key is not None
        self.conn, self.col, self.mig, self.opts, self.reporter = conn, col, mig, opts, reporter
        self.clock = LockClock(mig.lock_ms)
        self.move = Move(
            mig.direction, col.ident(), mig.column_name, mig.new_column, col.key, opts.schema,
            mig.id, forms.Form(mig.source), value_prefix(mig.target, mig.url),
        )  # fmt: skip
        self.objects: Objects | None = None
        """``s3``, ``s3lo``: the objects written, or read into LOs, before the switch."""
        if mig.direction == "s3":
            from pgblobdump.migrate.objects.upload import Uploader

            self.objects = Uploader(conn, mig, opts.schema, col.ident(), self.move, reporter)
        elif mig.direction == "s3lo":
            from pgblobdump.migrate.objects.back import Fetcher

            self.objects = Fetcher(conn, mig, opts.schema, col.ident(), self.move, reporter)
        self.recopied = mig.recopied
        self.notes: list[str] = list(mig.notes)
        self.kept_referenced = 0
        self.ranges: list[batches.Range] | None = None
        self._reach: access.Reach | None = None
        self.undecodable: decode.Found | None = None
        """--to text: the LOs this pass found not to decode (their rows are left out)."""
        if mig.direction == "text":
            self.undecodable = decode.Found(conn, opts.schema, mig.id, col.ident(),
                                            self.move.ref())  # fmt: skip

    @property
    def reach(self) -> access.Reach:
        """The column's readers and paths, read once per run of the command (a view or
        function made while a run was stopped is seen when it resumes)."""
        if self._reach is None:
            self._reach = access.reach(self.conn, self.col.relid, self.mig.column_name)
        return self._reach

    def save(self, **values: object) -> None:
        state.update(self.conn, self.opts.schema, self.mig.id, **values)
        for k, v in values.items():
            setattr(self.mig, k, v)

    def drive(self) -> None:
        what = f"run {self.mig.id} of {self.col.qualified}"
        if self.mig.phase == "filling":
            if self.objects is not None:
                with logs.phase(log, f"{what}: objects first"):
                    self.objects.sync()
            with logs.phase(log, f"{what}: filling the new column"):
                self.fill()
        if self.mig.phase == "verifying":
            with logs.phase(log, f"{what}: verifying every row"):
                self.verify()
            with logs.phase(log, f"{what}: switching the columns"):
                self.switch()
        if self.mig.phase in ("switched", "finishing"):
            with logs.phase(log, f"{what}: finishing"):
                self.kept_referenced = finish.finish(
                    self.conn, self.mig, self.opts.schema, self.opts.unlink, self.opts.lock,
                    self.clock, self.reporter, self.notes,
                )  # fmt: skip
            self.mig = state.load(self.conn, self.opts.schema, self.mig.id)

    def fill(self) -> None:
        self.reporter.task("filling", self.mig.rows_total)
        rows = self.batch_size()
        done = self.mig.rows_done
        # A fill from the start keeps its key ranges for the verify pass (a few per million
        # rows), which then finds no boundaries of its own.
        self.ranges = [] if self.mig.last_key is None else None
        if self.mig.last_key is None and self.undecodable:
            self.undecodable.forget()
        pages = catalog.pages_readable(self.conn)
        for r in batches.walk(self.conn, self.col.ident(), self.move.key, self.mig.last_key, rows):
            if self.ranges is not None:
                self.ranges.append(r)
            with self.conn.transaction():
                self._guarded(lambda w: self.move.fill(w, pages), r.where(self.move.key),
                              r.params())  # fmt: skip
                done = min(done + rows, self.mig.rows_total) if r.upto else self.mig.rows_total
                self.save(last_key=r.upto, rows_done=done)
            self.reporter.progress(done, 0)
        # Every row was read: an LO that does not decode is refused now, by OID, before
        # the verify pass (a rerun fills again, from the start: only rows left out).
        self._refuse_undecodable()
        with self.conn.transaction():
            self.save(phase="verifying", last_key=None, rows_done=0)

    def batch_size(self) -> int:
        if self.opts.batch_rows:
            return self.opts.batch_rows
        if self.mig.direction == "lo":
            return 1000  # each batch creates its LOs in one transaction
        if self.mig.direction in ("oid", "s3", "s3lo"):
            return BATCH_ROWS[1]  # no LO is read
        avg = (
            scalar(
                self.conn,
                sql.SQL(
                    "SELECT avg(octet_length(pg_catalog.lo_get(o, 0, 1048576)))::int8"
                    " FROM (SELECT {c} AS o FROM {t} WHERE {c} IS NOT NULL LIMIT 100) s"
                    " WHERE " + catalog.lo_exists("s.o")
                ).format(c=self.move.ref(), t=self.col.ident()),
            )
            or 4096
        )  # no LO to measure (or only empty ones): the default size
        return max(BATCH_ROWS[0], min(BATCH_ROWS[1], BATCH_BYTES // max(avg, 1)))

    def verify(self) -> None:
        self.reporter.task("verifying", self.mig.rows_total)
        if self.mig.verify_xmin is None:
            # LO pages written by this transaction or later may not be seen by the pass;
            # finish looks at exactly those (bytes written into an LO in place).
            self.save(
                verify_xmin=scalar(self.conn, "SELECT txid_snapshot_xmin(txid_current_snapshot())")
            )
        rows = self.batch_size()
        done = self.mig.rows_done
        if self.mig.last_key is None and self.undecodable:
            self.undecodable.forget()
        ranges: Iterable[batches.Range]
        if self.ranges is not None and self.mig.last_key is None:
            ranges = self.ranges
        else:
            ranges = batches.walk(
                self.conn, self.col.ident(), self.move.key, self.mig.last_key, rows
            )
        for r in ranges:
            where, params = r.where(self.move.key), r.params()
            with self.conn.transaction():
                row = None
                if self.move.reads_bytes:
                    # Most batches name no dangling OID: compared without asking, for each
                    # row, whether its LO exists; one that does is compared again in full
                    # (and one with an LO that does not decode, leaving out its rows).
                    try:
                        with self.conn.transaction():
                            e = self.move.equal_if_found()
                            stmt = self._compare(e, self._decodable(where))
                            row = self.conn.execute(stmt, params).fetchone()
                    except (psycopg.errors.UndefinedObject, *decode.ERRORS):
                        row = None
                if row is None:
                    e = self.move.equal()
                    row = self._guarded(lambda w: self._compare(e, w), where, params).fetchone()  # noqa: B023
                assert row is not None
                if row[0]:
                    self._repair(where, params)
                if row[0] or row[1]:
                    self._check_missing(where, params)
                done = min(done + rows, self.mig.rows_total) if r.upto else self.mig.rows_total
                self.save(last_key=r.upto, rows_done=done, recopied=self.recopied)
            self.reporter.progress(done, 0)

    def _compare(self, equal: sql.Composable, where: sql.Composable) -> sql.Composed:
        """One scan compares every row of ``where`` (and counts NULL copies of non-NULL
        values, which are dangling ones once compared); only a batch with differences is
        rewritten, and only one with dangling OIDs is looked at again."""
        return sql.SQL(
            "SELECT count(*) FILTER (WHERE NOT {e}),"
            " count(*) FILTER (WHERE {d} IS NULL AND {s} IS NOT NULL)"
            " FROM {t} WHERE {w}"
        ).format(e=equal, d=sql.Identifier(self.mig.new_column),
                 s=sql.Identifier(self.mig.column_name), t=self.col.ident(), w=where)  # fmt: skip

    def _repair(self, where: sql.Composable, params: Mapping[str, object]) -> None:
        """Re-copy the rows of ``where`` that differ until none does; refuse, naming them,
        LOs some reader of the column may not read (written during the run by a role that
        may), unless the run allows widening."""
        self._check_widening(where, params)
        for _ in range(REPAIR_ROUNDS):
            row = self._guarded(self.move.repair, where, params).fetchone()
            fixed = int(row[0]) if row else 0
            self.recopied += fixed
            if not fixed:
                return
        raise DatabaseError(
            f"rows of {self.col.qualified} kept changing while they were re-copied;"
            " run again when the writes calm down"
        )

    def _new_lo_owner(self) -> str | None:
        """The owner the run gives its new LOs (``--owner`` at its start), read off one of
        them; None (the table's owner) when it has made none."""
        row = self.conn.execute(
            sql.SQL(
                "SELECT pg_catalog.pg_get_userbyid(m.lomowner) FROM {t} x"
                " JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = x.{d} LIMIT 1"
            ).format(t=self.col.ident(), d=sql.Identifier(self.mig.new_column))
        ).fetchone()
        return str(row[0]) if row else None

    def _check_widening(self, where: sql.Composable, params: Mapping[str, object]) -> None:
        if not self.move.reads_bytes or self.mig.allow_widening:
            return
        o = self.move.ref()
        wider = self.reach.any_readers_not_of(o)
        rows = self._guarded(
            lambda w: sql.SQL(
                "SELECT DISTINCT {o}, {r} FROM {t} WHERE {w} AND NOT {e}"
                " AND cardinality({r}) > 0 ORDER BY 1 LIMIT %(n)s"
            ).format(o=o, r=wider, t=self.col.ident(), w=w, e=self.move.equal()),
            where, {**params, "n": refs.LIST_MAX},
        ).fetchall()  # fmt: skip
        if rows:
            found = access.Widening(
                len(rows), tuple(int(r[0]) for r in rows),
                tuple(sorted({name for r in rows for name in r[1]})),
            )  # fmt: skip
            raise DatabaseError(
                f"rows written during the run of {self.col.qualified} name LOs that readers"
                f" of the column may not read: {found.describe()}. Point those rows"
                " elsewhere or grant SELECT on the LOs, then run again; or rerun with"
                " --allow-acl-widening"
            )

    def _check_missing(self, where: sql.Composable, params: Mapping[str, object]) -> None:
        """With ``--missing error``, refuse rows whose OID names no LO. Called on verified
        rows, where a NULL copy of a non-NULL OID means exactly that (no LO is read)."""
        if self.mig.direction not in ("bytea", "oid", "s3") or self.opts.missing != "error":
            return
        s = sql.Identifier(self.mig.column_name)
        rows = self.conn.execute(
            sql.SQL(
                "SELECT {v} FROM {t} WHERE {w} AND {d} IS NULL AND {s} IS NOT NULL LIMIT %(n)s"
            ).format(
                v=self.move.form.sample(s), s=s, d=sql.Identifier(self.mig.new_column),
                t=self.col.ident(), w=where,
            ),
            {**params, "n": refs.LIST_MAX},
        ).fetchall()  # fmt: skip
        if rows:
            found = tuple(r[0] for r in rows)
            what = "references LOs that do not exist"
            if self.move.form.name != "oid":
                what = "holds values that name no LO"
            raise DatabaseError(
                f"{self.col.qualified} {what} ({refs.listed(found, len(found))}); rerun"
                " with --missing null or skip"
            )

    def _guarded(
        self, make: Callable[[sql.Composable], sql.Composed], where: sql.Composable,
        params: Mapping[str, object],
    ) -> psycopg.Cursor[tuple[Any, ...]]:  # fmt: skip
        """Run ``make(where)`` (in a savepoint), its rows left out whose LO this pass
        found not to decode. ``--to text``: when it raises because an LO does not decode
        in the database encoding, find the LOs of ``where`` that do not (one at a time),
        record them, and run it again without their rows."""
        while True:
            try:
                with self.conn.transaction():
                    return self.conn.execute(make(self._decodable(where)), params)
            except decode.ERRORS:
                if self.undecodable is None or not self.undecodable.find(where, params):
                    raise

    def _decodable(self, where: sql.Composable) -> sql.Composable:
        return self.undecodable.left_out(where) if self.undecodable else where

    def _refuse_undecodable(self) -> None:
        """DatabaseError naming the LOs this pass found not to decode, if any."""
        line = self.undecodable.refusal(self.col.qualified) if self.undecodable else None
        if line:
            raise DatabaseError(line)

    def _redo(self) -> None:
        """Re-copy the rows the sync trigger logged as failed, and forget exactly those: a
        row logged while this runs stays logged for the next round (the switch refuses
        while any remain)."""
        sch = sql.Identifier(self.opts.schema)
        key = self.move.key
        logged = self.conn.execute(
            sql.SQL("SELECT DISTINCT key FROM {}.migration_redo WHERE run_id = %s").format(sch),
            (self.mig.id,),
        ).fetchall()
        if not logged:
            return
        keys = sql.SQL(
            "SELECT ARRAY(SELECT jsonb_array_elements_text(e)) AS key"
            " FROM jsonb_array_elements(%(keys)s::jsonb) AS e"
        )
        where = sql.SQL("{} IN (SELECT {} FROM ({}) AS r)").format(
            key.row(), key.from_array("key"), keys
        )
        params = {"keys": json.dumps([list(r[0]) for r in logged]), "run": self.mig.id}
        with self.conn.transaction():
            self._repair(where, params)
            self._check_missing(where, params)
            self.conn.execute(
                sql.SQL(
                    "DELETE FROM {}.migration_redo WHERE run_id = %(run)s AND key IN ({})"
                ).format(sch, keys),
                params,
            )

    def switch(self) -> None:
        if not self.mig.allow_widening:
            # Again, as it is now: a view, a SECURITY DEFINER function, a grant or a row
            # policy may have come while the run went. Nothing is switched if so.
            if self.move.reads_bytes:
                self._reach = None  # read afresh: the verify pass may have read it
                refuse_widening(self.conn, self.col, self.mig.direction, self.reach)
            elif self.mig.direction in ("lo", "s3lo"):
                refuse_widening(self.conn, self.col, self.mig.direction, None, self._new_lo_owner())
        self._refuse_undecodable()
        if self.col.not_null:
            self.reporter.note("validating the NOT NULL check (writes go on meanwhile)")
            self.conn.execute(
                sql.SQL("ALTER TABLE {} VALIDATE CONSTRAINT {}").format(
                    self.col.ident(), sql.Identifier(check_name(self.mig.id))
                )
            )
        for _ in range(REPAIR_ROUNDS):
            self._redo()
            self._refuse_undecodable()
            if self.objects is not None:
                # Rows written during the run name LOs (or keys) the first pass did not
                # see: their objects (LOs) are made now, and such rows copied again.
                self.objects.sync()
                if self.mig.direction == "s3lo":
                    self._repair(sql.SQL("true"), {})
            if exclusively(
                self.conn, self.col.ident(), f"switching {self.col.qualified}", self._switch,
                self.opts.lock, self.clock,
            ):  # fmt: skip
                self.save(lock_ms=self.clock.longest_ms)
                self.reporter.note(f"switched {self.col.qualified} to {self.move.dst_type}")
                return
        raise DatabaseError(
            f"rows of {self.col.qualified} kept failing to copy in the sync trigger; see"
            f" {self.opts.schema}.migration_redo"
        )

    def _switch(self) -> bool:
        c, m, t = self.conn, self.mig, self.col.ident()
        row = c.execute(
            sql.SQL("SELECT count(*) FROM {}.migration_redo WHERE run_id = %s").format(
                sql.Identifier(self.opts.schema)
            ),
            (m.id,),
        ).fetchone()
        if row and row[0] > REDO_UNDER_LOCK:
            return False  # re-copy them first, outside the lock
        if row and row[0]:
            self._redo()  # a few, logged since the last round: nobody writes meanwhile
            self._refuse_undecodable()
        if self.objects is not None and self.objects.waiting():
            return False  # rows written since name objects (LOs) still to be made
        for stmt in drop_triggers_ddl(self.move, self.opts.schema, m.id):
            c.execute(stmt)
        if m.direction != "lo":
            for name in columns.lo_manage_triggers(c, self.col):
                c.execute(sql.SQL("DROP TRIGGER {} ON {}").format(sql.Identifier(name), t))
        src, dst, old = (sql.Identifier(n) for n in (m.column_name, m.new_column, m.old_column))
        c.execute(sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(t, src, old))
        c.execute(sql.SQL("ALTER TABLE {} RENAME COLUMN {} TO {}").format(t, dst, src))
        if self.col.not_null:
            c.execute(
                sql.SQL(
                    "ALTER TABLE {t} ALTER COLUMN {s} SET NOT NULL, DROP CONSTRAINT {k},"
                    " ALTER COLUMN {o} DROP NOT NULL"
                ).format(t=t, s=src, k=sql.Identifier(check_name(m.id)), o=old)
            )
        if self.col.default is not None:
            c.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN {} DROP DEFAULT").format(t, old))
            if m.direction == "text":  # a text column's default applies to text still
                c.execute(
                    sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET DEFAULT {}").format(
                        t, src, sql.SQL(self.col.default)
                    )
                )
        if self.col.comment is not None:
            c.execute(
                sql.SQL("COMMENT ON COLUMN {} IS {}").format(
                    sql.Identifier(self.col.schema, self.col.table, m.column_name),
                    sql.Literal(self.col.comment),
                )
            )
        for grant in self.col.grants:
            priv, grantee, grantable = grant.split("|")
            c.execute(
                sql.SQL("GRANT {} ({}) ON {} TO {}{}").format(
                    sql.SQL(priv),
                    src,
                    t,
                    sql.SQL(grantee),
                    sql.SQL(" WITH GRANT OPTION" if grantable == "y" else ""),
                )
            )
        self.save(phase="switched", last_key=None)
        return True
