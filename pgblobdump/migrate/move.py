"""The SQL of one move, LO to bytea or back: the new value of a row, whether a row's new
value equals its old one, and the triggers that keep rows written during the run right.

Forward (``bytea``): the new value is ``lo_get(oid)``; a dangling OID gives NULL (the
``--missing`` policy decides what that means). Equality is byte for byte on the server,
which is stronger than comparing lengths and hashes and reads the same pages.

Backward (``lo``): the new value is a new LO of the bytes, made by the run's function
(``access.lo_maker_ddl``: owned by the table's owner, readable by the column's readers).
Every LO in the new column was created by this run, so replacing or abandoning one
unlinks it (a row deleted or truncated during the run too): nothing else can refer to it.

Rows written by other sessions while the run goes: a BEFORE trigger gives a changed row a
placeholder (so a NOT NULL check on the new column holds at once) and a deferred constraint
trigger copies the row's current value when its transaction commits, after any LO writes
the same transaction made. A copy the trigger cannot make is logged in ``migration_redo``
and never fails the application's transaction; the switch re-copies those rows.

Rights: the BEFORE trigger runs as the writer (SECURITY INVOKER), so a write pointing a row
at an LO the writer may not read fails with the server's own "permission denied for large
object N". The deferred copy runs as the migrating role, but never copies an LO that some
reader of the column may not read (``access.Reach``: through the column, a view or a
SECURITY DEFINER function) unless the run allows it:
it logs the row instead, and the switch refuses it by name.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from pgblobdump.migrate.access import Reach
from pgblobdump.migrate.columns import Key
from pgblobdump.pg.catalog import LO_EXISTS, lo_exists

LOBLKSIZE = 2048
"""The bytes of one pg_largeobject page at most (the server's LOBLKSIZE, BLCKSZ / 4)."""
FILL_ROW = "pgbd_row"
"""The table's alias in a fill that reads pages (``Move.copy_from_pages``)."""


@dataclass(frozen=True)
class Move:
    to: str
    """``bytea`` or ``lo``."""
    table: sql.Composable
    src: str
    dst: str
    key: Key
    schema: str = ""
    run_id: int = 0
    """The run's state schema and id: backward, ``copy`` calls the run's LO maker."""

    @property
    def lo_fn(self) -> sql.Identifier:
        """The run's function making a new LO of a bytea value (``access.lo_maker_ddl``)."""
        return sql.Identifier(self.schema, lo_maker_name(self.run_id))

    def _s(self, prefix: str = "") -> sql.Identifier:
        return sql.Identifier(prefix, self.src) if prefix else sql.Identifier(self.src)

    def _d(self, prefix: str = "") -> sql.Identifier:
        return sql.Identifier(prefix, self.dst) if prefix else sql.Identifier(self.dst)

    @property
    def dst_type(self) -> str:
        return "bytea" if self.to == "bytea" else "oid"

    def copy(self, prefix: str = "") -> sql.Composed:
        """The new column's value for a row (columns qualified by ``prefix`` if given)."""
        s = self._s(prefix)
        if self.to == "bytea":
            return sql.SQL(
                "CASE WHEN {s} IS NULL THEN NULL WHEN "
                + LO_EXISTS
                + " THEN pg_catalog.lo_get({s}) END"
            ).format(s=s, o=s)
        assert self.schema and self.run_id, "a move to LOs needs its run's LO maker"
        return sql.SQL("{fn}({s})").format(fn=self.lo_fn, s=s)

    def equal(self, prefix: str = "") -> sql.Composed:
        """Whether a row's new column holds exactly its old column's content."""
        s, d = self._s(prefix), self._d(prefix)
        if self.to == "bytea":
            return sql.SQL("({d} IS NOT DISTINCT FROM {c})").format(d=d, c=self.copy(prefix))
        return sql.SQL(
            "(CASE WHEN {s} IS NULL THEN {d} IS NULL WHEN {d} IS NULL OR NOT " + LO_EXISTS
            + " THEN false ELSE pg_catalog.lo_get({d}) = {s} END)"
        ).format(s=s, d=d, o=d)  # fmt: skip

    def copy_from_pages(self) -> sql.Composed:
        """Forward, for a role that may read pg_largeobject: the new value of a row whose
        LO is stored as page 0 alone, of at most LOBLKSIZE bytes (every LO up to 2 KiB),
        is that page's bytes, which is what ``lo_get`` returns for it, read with one index
        probe and without lo_get's per-call open, existence and permission lookups (most
        of the cost of a small LO). Any other LO (several pages, a hole, no page: empty,
        or no LO at all) goes through ``copy``. The verify pass compares every row with
        ``lo_get`` all the same."""
        # The column is qualified inside the subquery: a column named like one of
        # pg_largeobject's ("data") would name the page's there. The row is FILL_ROW.
        return sql.SQL(
            "COALESCE((SELECT CASE WHEN count(*) = 1 AND min(pg.pageno) = 0"
            " AND max(pg_catalog.octet_length(pg.data)) <= {blk}"
            " THEN pg_catalog.string_agg(pg.data, ''::bytea) END"
            " FROM pg_catalog.pg_largeobject pg WHERE pg.loid = {s}), {c})"
        ).format(blk=sql.Literal(LOBLKSIZE), s=self._s(FILL_ROW), c=self.copy())

    def equal_if_found(self) -> sql.Composed:
        """``equal`` without asking whether the LO exists (one index probe a row less):
        for a dangling OID ``lo_get`` raises undefined_object, and the caller compares
        with ``equal`` instead. Forward only."""
        assert self.to == "bytea"
        return sql.SQL(
            "({d} IS NOT DISTINCT FROM CASE WHEN {s} IS NULL THEN NULL"
            " ELSE pg_catalog.lo_get({s}) END)"
        ).format(d=self._d(), s=self._s())

    def fill(self, where: sql.Composable, pages: bool = False) -> sql.Composed:
        """Copy the rows ``where`` selects that have no new value yet; ``pages``: read
        one-page LOs from pg_largeobject (``copy_from_pages``), for a role that may."""
        if pages and self.to == "bytea":
            return sql.SQL(
                "UPDATE {t} AS {r} SET {d} = {c} WHERE {w} AND {d} IS NULL AND {s} IS NOT NULL"
            ).format(t=self.table, r=sql.Identifier(FILL_ROW), d=self._d(),
                     c=self.copy_from_pages(), w=where, s=self._s())  # fmt: skip
        return sql.SQL(
            "UPDATE {t} SET {d} = {c} WHERE {w} AND {d} IS NULL AND {s} IS NOT NULL"
        ).format(t=self.table, d=self._d(), c=self.copy(), w=where, s=self._s())

    def repair(self, where: sql.Composable) -> sql.Composed:
        """Re-copy the rows ``where`` selects whose new value is wrong; returns one row:
        how many were re-copied. Backward, the LO each replaced value named is unlinked."""
        if self.to == "bytea":
            return sql.SQL(
                "WITH u AS (UPDATE {t} SET {d} = {c} WHERE {w} AND NOT {e} RETURNING 1)"
                " SELECT count(*) FROM u"
            ).format(t=self.table, d=self._d(), c=self.copy(), w=where, e=self.equal())
        return sql.SQL(
            "WITH bad AS (SELECT ctid AS tid, {d} AS prev FROM {t} WHERE {w} AND NOT {e}"
            " FOR UPDATE),"
            " u AS (UPDATE {t} x SET {d} = {c} FROM bad WHERE x.ctid = bad.tid RETURNING bad.prev)"
            " SELECT count(*), count(CASE WHEN prev <> 0 AND " + lo_exists("prev")
            + " THEN pg_catalog.lo_unlink(prev) END) FROM u"
        ).format(t=self.table, d=self._d(), c=self.copy("x"), w=where, e=self.equal())  # fmt: skip

    def key_match(self, rec: str) -> sql.Composed:
        """``(k1, k2) = (rec.k1, rec.k2)``."""
        return sql.SQL("{} = {}").format(self.key.row(), self.key.row(rec))

    def key_text(self, rec: str) -> sql.Composed:
        return sql.SQL("ARRAY[{}]").format(
            sql.SQL(", ").join(
                sql.SQL("{}::text").format(sql.Identifier(rec, n)) for n in self.key.names
            )
        )


def trigger_ddl(m: Move, schema: str, run_id: int, reach: Reach) -> list[sql.Composed]:
    """The sync functions and triggers of run ``run_id`` on the table of ``reach`` (whose
    readers, paths included, a forward copy must not widen to)."""
    sch = sql.Identifier(schema)
    before, after = names(run_id)
    s, d = sql.Identifier(m.src), sql.Identifier(m.dst)
    extra: list[sql.Composed] = []
    if m.to == "bytea":
        # As the writer: pointing a row at an LO it may not read fails here, with the
        # server's own error (an LO made later in the same transaction is the writer's).
        placeholder = sql.SQL(
            "IF NEW.{s} IS NOT NULL AND " + LO_EXISTS + " THEN"
            " PERFORM pg_catalog.lo_get(NEW.{s}, 0, 0); END IF;"
            " NEW.{d} := CASE WHEN NEW.{s} IS NULL THEN NULL ELSE '\\x'::bytea END;"
        ).format(d=d, s=s, o=sql.SQL("NEW.{}").format(s))
        body = sql.SQL(
            "SELECT {s} INTO cur FROM {t} WHERE {k} FOR UPDATE;"
            " IF NOT FOUND THEN RETURN NULL; END IF;"
            " IF cur IS NOT NULL AND NOT " + lo_exists("cur") + " THEN"
            "   INSERT INTO {sch}.migration_redo (run_id, key, error)"
            "   VALUES ({id}, {kt}, 'no such large object ' || cur);"
            " ELSIF cur IS NOT NULL AND NOT (SELECT allow_widening FROM {sch}.migrations"
            "   WHERE id = {id}) THEN"
            "   wider := {readers};"
            "   IF cardinality(wider) > 0 THEN"
            "     INSERT INTO {sch}.migration_redo (run_id, key, error) VALUES ({id}, {kt},"
            "       'large object ' || cur || ' may not be read by '"
            "       || array_to_string(wider, ', ') || ', who may reach the column');"
            "     RETURN NULL;"
            "   END IF;"
            " END IF;"
            " UPDATE {t} SET {d} = {c} WHERE {k};"
        ).format(s=s, d=d, t=m.table, k=m.key_match("new"), sch=sch, id=sql.Literal(run_id),
                 kt=m.key_text("new"), c=m.copy(),
                 readers=reach.any_readers_not_of(sql.SQL("cur")))  # fmt: skip
        declare = sql.SQL("cur oid; wider text[];")
    else:
        # On INSERT the new column is always ours to set: a row copied whole from another
        # (INSERT ... SELECT *) must not bring that row's new LO, which the deferred
        # trigger would replace and unlink. On UPDATE it keeps the run's LO, so the
        # deferred trigger unlinks that one once the new copy is made.
        placeholder = sql.SQL(
            "IF TG_OP = 'INSERT' THEN NEW.{d} := CASE WHEN NEW.{s} IS NULL THEN NULL ELSE 0 END;"
            " ELSIF NEW.{d} IS NULL AND NEW.{s} IS NOT NULL THEN NEW.{d} := 0; END IF;"
        ).format(d=d, s=s)
        body = sql.SQL(
            "SELECT {d} INTO prev FROM {t} WHERE {k} FOR UPDATE;"
            " IF NOT FOUND THEN RETURN NULL; END IF;"
            " UPDATE {t} SET {d} = {c} WHERE {k};"
            " IF prev IS NOT NULL AND prev <> 0 AND " + lo_exists("prev") + " THEN"
            "   PERFORM pg_catalog.lo_unlink(prev);"
            " END IF;"
        ).format(d=d, t=m.table, k=m.key_match("new"), c=m.copy())  # fmt: skip
        declare = sql.SQL("prev oid;")
        extra = _drop_with_row_ddl(m, schema, run_id)
    # A change of the key fires them too: the deferred copy finds its row by the key the
    # row had when it was queued, and a later change of key in the same transaction
    # queues the copy again under the new one.
    watched = sql.SQL(", ").join([s, *(sql.Identifier(k) for k in m.key.names if k != m.src)])
    fn_b = sql.Identifier(schema, before)
    fn_a = sql.Identifier(schema, after)
    return [
        sql.SQL(
            "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql SECURITY INVOKER"
            " SET search_path = pg_catalog, pg_temp AS $pgbd$ BEGIN"
            " IF TG_OP = 'INSERT' OR NEW.{s} IS DISTINCT FROM OLD.{s} THEN {p} END IF;"
            " RETURN NEW; END $pgbd$"
        ).format(fn=fn_b, s=s, p=placeholder),
        sql.SQL(
            "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER"
            " SET search_path = pg_catalog, pg_temp AS $pgbd$ DECLARE {decl} BEGIN"
            " BEGIN {body}"
            " EXCEPTION WHEN OTHERS THEN"
            "   INSERT INTO {sch}.migration_redo (run_id, key, error) VALUES ({id}, {kt}, SQLERRM);"
            " END; RETURN NULL; END $pgbd$"
        ).format(
            fn=fn_a, decl=declare, body=body, sch=sch, id=sql.Literal(run_id), kt=m.key_text("new")
        ),
        sql.SQL(
            "CREATE TRIGGER {n} BEFORE INSERT OR UPDATE OF {c} ON {t} FOR EACH ROW"
            " EXECUTE FUNCTION {fn}()"
        ).format(n=sql.Identifier(before), c=watched, t=m.table, fn=fn_b),
        sql.SQL(
            "CREATE CONSTRAINT TRIGGER {n} AFTER INSERT OR UPDATE OF {c} ON {t}"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {fn}()"
        ).format(n=sql.Identifier(after), c=watched, t=m.table, fn=fn_a),
        *extra,
        # ALWAYS: they fire under session_replication_role = replica too (a logical
        # replication apply worker, pg_restore --disable-triggers sessions).
        *(
            sql.SQL("ALTER TABLE {t} ENABLE ALWAYS TRIGGER {n}").format(
                t=m.table, n=sql.Identifier(n)
            )
            for n in (before, after, *(_gone_names(run_id) if extra else ()))
        ),
    ]


def _drop_with_row_ddl(m: Move, schema: str, run_id: int) -> list[sql.Composed]:
    """Backward: a row deleted (or a table truncated) during the run takes the LO the run
    made for it along, which nothing else can name."""
    d = sql.Identifier(m.dst)
    row_fn, all_fn = (sql.Identifier(schema, n) for n in _gone_names(run_id))
    gone = "IF {v} IS NOT NULL AND {v} <> 0 AND " + lo_exists("{v}") + " THEN"
    return [
        sql.SQL(
            "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER"
            " SET search_path = pg_catalog, pg_temp AS $pgbd$ BEGIN "
            + gone.replace("{v}", "OLD.{d}")
            + " PERFORM pg_catalog.lo_unlink(OLD.{d}); END IF; RETURN NULL; END $pgbd$"
        ).format(fn=row_fn, d=d),
        sql.SQL(
            "CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER"
            " SET search_path = pg_catalog, pg_temp AS $pgbd$ BEGIN"
            " PERFORM pg_catalog.lo_unlink(x.{d}) FROM {t} x WHERE x.{d} <> 0 AND "
            + lo_exists("x.{d}")
            + "; RETURN NULL; END $pgbd$"
        ).format(fn=all_fn, d=d, t=m.table),
        sql.SQL(
            "CREATE TRIGGER {n} AFTER DELETE ON {t} FOR EACH ROW EXECUTE FUNCTION {fn}()"
        ).format(n=sql.Identifier(_gone_names(run_id)[0]), t=m.table, fn=row_fn),
        sql.SQL(
            "CREATE TRIGGER {n} BEFORE TRUNCATE ON {t} FOR EACH STATEMENT EXECUTE FUNCTION {fn}()"
        ).format(n=sql.Identifier(_gone_names(run_id)[1]), t=m.table, fn=all_fn),
    ]


def drop_triggers_ddl(m: Move, schema: str, run_id: int) -> list[sql.Composed]:
    out: list[sql.Composed] = []
    for name in (*names(run_id), *_gone_names(run_id)):
        out.append(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(name), m.table))
        out.append(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(sql.Identifier(schema, name)))
    out.append(
        sql.SQL("DROP FUNCTION IF EXISTS {}(bytea)").format(
            sql.Identifier(schema, lo_maker_name(run_id))
        )
    )
    return out


def names(run_id: int) -> tuple[str, str]:
    """The BEFORE and the deferred trigger (and function) names of run ``run_id``."""
    return f"pgbd_sync_{run_id}_b", f"pgbd_sync_{run_id}_a"


def _gone_names(run_id: int) -> tuple[str, str]:
    """Backward only: the row-deleted and table-truncated triggers (and functions)."""
    return f"pgbd_sync_{run_id}_d", f"pgbd_sync_{run_id}_t"


def lo_maker_name(run_id: int) -> str:
    return f"pgbd_lo_{run_id}"


def check_name(run_id: int) -> str:
    """The NOT VALID check that lets the switch set NOT NULL without a scan under lock."""
    return f"pgbd_nn_{run_id}"
