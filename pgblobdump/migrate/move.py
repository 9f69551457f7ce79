"""The SQL of one move, LO to bytea or back: the new value of a row, whether a row's new
value equals its old one, and the triggers that keep rows written during the run right.

Forward (``bytea``): the new value is ``lo_get(oid)``; a dangling OID gives NULL (the
``--missing`` policy decides what that means). Equality is byte for byte on the server,
which is stronger than comparing lengths and hashes and reads the same pages. The OID is
the old value read by its form (``forms``: an oid, an integer as ``oid::int4`` stores
one, a text of digits). ``text`` is the same move decoded in the database encoding, a
value that names no LO keeping its own text; ``oid`` moves no bytes: the new value is the
OID, NULL where no LO is there.

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

from pgblobdump.migrate.columns import Key
from pgblobdump.migrate.forms import OID, Form
from pgblobdump.migrate.reach.access import Reach
from pgblobdump.pg.catalog import LO_EXISTS, lo_exists
from pgblobdump.pgconstants import LOBLKSIZE

FILL_ROW = "pgbd_row"
"""The table's alias in a fill that reads pages (``Move.copy_from_pages``)."""


ENCODING = sql.SQL("pg_catalog.getdatabaseencoding()")
"""The database encoding, which ``--to text`` decodes LOs in."""
PLACEHOLDER = {
    "bytea": "'\\x'::bytea",
    "text": "''::pg_catalog.text",
    "oid": "0::pg_catalog.oid",
    "s3": "''::pg_catalog.text",
    "s3lo": "0::pg_catalog.oid",
}
"""Forward: the value the BEFORE trigger gives a changed row until its copy is made."""


@dataclass(frozen=True)
class Move:
    to: str
    """``bytea``, ``lo``, ``text`` or ``oid`` (``options.DIRECTIONS``)."""
    table: sql.Composable
    src: str
    dst: str
    key: Key
    schema: str = ""
    run_id: int = 0
    """The run's state schema and id: backward, ``copy`` calls the run's LO maker."""
    form: Form = OID
    """Forward: the form the old column's values name LOs in."""
    value_prefix: str = ""
    """``s3``: what each row's new value starts with, the OID following (``docs/`` makes
    ``docs/16385``; ``migrate/objects/target.py``)."""

    @property
    def lo_fn(self) -> sql.Identifier:
        """The run's function making a new LO of a bytea value (``access.lo_maker_ddl``)."""
        return sql.Identifier(self.schema, lo_maker_name(self.run_id))

    @property
    def reads_bytes(self) -> bool:
        """Whether the new value is made of the LO's bytes (``bytea``, ``text``)."""
        return self.to in ("bytea", "text")

    def _s(self, prefix: str = "") -> sql.Identifier:
        return sql.Identifier(prefix, self.src) if prefix else sql.Identifier(self.src)

    def _d(self, prefix: str = "") -> sql.Identifier:
        return sql.Identifier(prefix, self.dst) if prefix else sql.Identifier(self.dst)

    def ref(self, prefix: str = "") -> sql.Composable:
        """Forward: the OID a row's old value names (NULL when it names none by form)."""
        if self.to == "s3lo":
            return sql.SQL("NULL::pg_catalog.oid")  # a key names an object, not an LO
        return self.form.oid(self._s(prefix))

    @property
    def dst_type(self) -> str:
        return {
            "bytea": "bytea", "lo": "oid", "text": "text", "oid": "oid", "s3": "text",
            "s3lo": "oid",
        }[self.to]  # fmt: skip

    def _made_of(self, data: sql.Composable) -> sql.Composable:
        """The new value made of an LO's bytes ``data``: decoded in the database encoding
        for ``text`` (which raises for bytes not valid in it), the bytes for ``bytea``."""
        if self.to == "text":
            return sql.SQL("pg_catalog.convert_from({}, {})").format(data, ENCODING)
        return data

    def _else(self, s: sql.Composable) -> sql.Composable:
        """The new value of a row whose value names no LO: ``text`` keeps it (the
        column's inline text); otherwise NULL (the ``--missing`` policy's)."""
        if self.to == "text":
            return sql.SQL(" ELSE ({})::pg_catalog.text").format(s)
        return sql.SQL("")

    def copy(self, prefix: str = "") -> sql.Composed:
        """The new column's value for a row (columns qualified by ``prefix`` if given)."""
        s = self._s(prefix)
        if self.to == "lo":
            assert self.schema and self.run_id, "a move to LOs needs its run's LO maker"
            return sql.SQL("{fn}({s})").format(fn=self.lo_fn, s=s)
        if self.to == "s3lo":
            # The LO the run made of the object the value names (migrate/objects/back.py):
            # NULL until it is made, which the switch waits for. The row's column is
            # qualified: the state table's columns would hide one named like them.
            own = s if prefix else sql.SQL("{}.{}").format(self.table, s)
            return sql.SQL(
                "(SELECT f.lo::pg_catalog.oid FROM {} f WHERE f.run_id = {} AND f.value = {})"
            ).format(sql.Identifier(self.schema, "migration_objects"),
                     sql.Literal(self.run_id), own)  # fmt: skip
        o = self.ref(prefix)
        value: sql.Composable = o
        if self.to == "s3":
            value = sql.SQL("{} OPERATOR(pg_catalog.||) {}::pg_catalog.text").format(
                sql.Literal(self.value_prefix), o
            )
        elif self.to != "oid":
            value = self._made_of(sql.SQL("pg_catalog.lo_get({})").format(o))
        return sql.SQL(
            "CASE WHEN {s} IS NULL THEN NULL WHEN " + LO_EXISTS + " THEN {v}{e} END"
        ).format(s=s, o=o, v=value, e=self._else(s))

    def equal(self, prefix: str = "") -> sql.Composed:
        """Whether a row's new column holds exactly its old column's content."""
        s, d = self._s(prefix), self._d(prefix)
        if self.to != "lo":
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
        assert self.reads_bytes
        return sql.SQL("COALESCE({}, {})").format(self._one_page(FILL_ROW), self.copy())

    def _one_page(self, prefix: str = "") -> sql.Composable:
        """The new value made of the row's LO's page 0 when that is all the LO holds (at
        most LOBLKSIZE bytes), NULL otherwise (several pages, a hole, none, no LO). The
        LO's last page is read (one probe backwards on the pages' index, no aggregate):
        when it is page 0, there is no other. Decoded (``--to text``) outside the
        subquery: no other page is ever decoded on its own."""
        return self._made_of(sql.SQL(
            "(SELECT CASE WHEN pg.pageno = 0 AND pg_catalog.octet_length(pg.data) <= {blk}"
            " THEN pg.data END"
            " FROM pg_catalog.pg_largeobject pg WHERE pg.loid = {o}"
            " ORDER BY pg.pageno DESC LIMIT 1)"
        ).format(blk=sql.Literal(LOBLKSIZE), o=self.ref(prefix)))  # fmt: skip

    def equal_if_found(self) -> sql.Composed:
        """``equal`` without asking whether the LO exists (one index probe a row less):
        for a dangling OID ``lo_get`` raises undefined_object, and the caller compares
        with ``equal`` instead. Forward, of bytes only. Every LO is read with ``lo_get``,
        never the way the fill read it (a fault in the one-page read would be copied and
        then confirmed by itself)."""
        assert self.reads_bytes
        got: sql.Composable = self._made_of(sql.SQL("pg_catalog.lo_get({})").format(self.ref()))
        if self.to == "text":
            # The value's own text when it names no LO by its form (lo_get(NULL) is NULL,
            # an LO's text never is): the OID is read once.
            got = sql.SQL("COALESCE({}, ({})::pg_catalog.text)").format(got, self._s())
        return sql.SQL(
            "({d} IS NOT DISTINCT FROM CASE WHEN {s} IS NULL THEN NULL ELSE {g} END)"
        ).format(d=self._d(), s=self._s(), g=got)

    def fill(self, where: sql.Composable, pages: bool = False) -> sql.Composed:
        """Copy the rows ``where`` selects that have no new value yet; ``pages``: read
        one-page LOs from pg_largeobject (``copy_from_pages``), for a role that may."""
        if pages and self.reads_bytes:
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
        if self.to != "lo":
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
    if m.to != "lo":
        placeholder = _placeholder(m, s, d)
        # The row's value, and the OID it names (NULL for a value in no reference's form).
        checks: list[sql.Composable] = []
        if m.to not in ("text", "s3lo"):
            # a value naming no LO becomes NULL, the --missing policy's: said in the log
            checks.append(sql.SQL(
                "has AND (cur IS NULL OR NOT " + lo_exists("cur") + ") THEN"
                "   INSERT INTO {sch}.migration_redo (run_id, key, error)"
                "   VALUES ({id}, {kt}, 'no such large object '"
                "   || coalesce(cur::pg_catalog.text, 'for ' || pg_catalog.left(val, 40)));"
            ).format(sch=sch, id=sql.Literal(run_id), kt=m.key_text("new")))  # fmt: skip
        if m.reads_bytes:
            checks.append(sql.SQL(
                "cur IS NOT NULL AND NOT (SELECT allow_widening FROM {sch}.migrations"
                "   WHERE id = {id}) THEN"
                "   wider := {readers};"
                "   IF cardinality(wider) > 0 THEN"
                "     INSERT INTO {sch}.migration_redo (run_id, key, error) VALUES ({id}, {kt},"
                "       'large object ' || cur || ' may not be read by '"
                "       || array_to_string(wider, ', ') || ', who may reach the column');"
                "     RETURN NULL;"
                "   END IF;"
            ).format(sch=sch, id=sql.Literal(run_id), kt=m.key_text("new"),
                     readers=reach.any_readers_not_of(sql.SQL("cur"))))  # fmt: skip
        branches = sql.SQL(" ELSIF ").join(checks)
        body = sql.SQL(
            "SELECT {s} IS NOT NULL, {s}::pg_catalog.text, {o} INTO has, val, cur FROM {t}"
            " WHERE {k} FOR UPDATE;"
            " IF NOT FOUND THEN RETURN NULL; END IF;"
            " {checks}"
            " UPDATE {t} SET {d} = {c} WHERE {k};"
        ).format(s=s, o=m.ref(), d=d, t=m.table, k=m.key_match("new"), c=m.copy(),
                 checks=sql.SQL("IF {} END IF;").format(branches) if checks
                 else sql.SQL(""))  # fmt: skip
        declare = sql.SQL("cur oid; has boolean; val text; wider text[];")
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


def _placeholder(m: Move, s: sql.Identifier, d: sql.Identifier) -> sql.Composed:
    """Forward, the BEFORE trigger's work on a changed row: a placeholder in the new
    column; and, where the LO's bytes will move, a read of the LO as the writer: pointing
    a row at an LO it may not read fails here, with the server's own error (an LO made
    later in the same transaction is the writer's)."""
    o = m.form.oid(sql.SQL("NEW.{}").format(s))
    read: sql.Composable = sql.SQL("")
    if m.reads_bytes:
        read = sql.SQL(
            "IF {o} IS NOT NULL AND " + LO_EXISTS + " THEN"
            " PERFORM pg_catalog.lo_get({o}, 0, 0); END IF; "
        ).format(o=o)
    return sql.SQL("{r}NEW.{d} := CASE WHEN NEW.{s} IS NULL THEN NULL ELSE {p} END;").format(
        r=read, d=d, s=s, p=sql.SQL(PLACEHOLDER[m.to])
    )


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
