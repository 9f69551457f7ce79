"""The LOs a column references, counted on the server: present, dangling, shared, their
sizes, and whether we may read them.

The distinct OIDs of a column go once into a temporary table (``o`` with ``n``, the rows
naming it); every figure is then a set-based statement over it, so a column of millions of
rows costs one scan and the client holds no OIDs. Sizes come from ``pg_largeobject``'s
index (the last page of each LO) when we may read that catalog (superusers), otherwise
from ``lo_lseek64`` in batches of a thousand (a statement that opens many more descriptors
gets slow on the server).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import UsageError
from pgblobdump.migrate import forms
from pgblobdump.migrate.columns import Column, quote
from pgblobdump.pg import catalog
from pgblobdump.pg.catalog import READABLE
from pgblobdump.pgconstants import INV_READ, MAX_ALLOC_SIZE, OID_MAX, VARHDRSZ

MAX_BYTEA = MAX_ALLOC_SIZE - VARHDRSZ
"""The largest value a bytea can hold (1 GiB less its header): larger LOs cannot move."""

SIZE_BATCH = 1000
LIST_MAX = 20
"""How many OIDs a message lists before it says ``and N more``."""


@dataclass(frozen=True)
class LoColumn:
    """A column of type oid or lo in a user table (a possible LO reference, as vacuumlo
    counts them), or one of another type named as holding OIDs (``form``)."""

    relid: int
    schema: str
    table: str
    name: str
    type: str
    readable: bool = True
    """Whether the connected role can read every row (see ``lo_columns``)."""
    form: forms.Form = forms.OID
    """How its values name LOs: ``oid`` for an oid or lo column."""

    @property
    def qualified(self) -> str:
        return ".".join(quote(p) for p in (self.schema, self.table, self.name))

    def oid(self, prefix: str = "") -> sql.Composable:
        """The OID a row's value names (``forms.Form.oid``), the column qualified by
        ``prefix`` when given."""
        c = sql.Identifier(prefix, self.name) if prefix else sql.Identifier(self.name)
        return self.form.oid(c)

    def select(self) -> sql.Composed:
        """``SELECT col AS o FROM schema.table WHERE col IS NOT NULL``: the OIDs its rows
        name (for another form than oid, the values in none are left out)."""
        return sql.SQL("SELECT {c} AS o FROM {t} WHERE {c} IS NOT NULL").format(
            c=self.oid(), t=sql.Identifier(self.schema, self.table)
        )


STATE_TABLES = (
    "migrations",
    "migration_redo",
    "migration_los",
    "migration_undecodable",
    "migration_objects",
)
"""The state tables in the state schema (``migration_los`` holds OIDs, not references)."""


def lo_columns(conn: psycopg.Connection, state_schema: str = "pgblobdump") -> list[LoColumn]:
    """Every oid or lo column of every table, as vacuumlo finds references (partitions
    are scanned through their parent; our own state tables are left out, and nothing
    else of their schema, which may be an application's). ``readable`` says whether the
    connected role can read the table whole: SELECT on it, and no row security for it."""
    rows = conn.execute(
        """
        SELECT c.oid, n.nspname, c.relname, a.attname, format_type(a.atttypid, NULL),
               has_table_privilege(c.oid, 'SELECT')
               AND (NOT c.relrowsecurity OR r.rolbypassrls OR r.rolsuper
                    OR (c.relowner = r.oid AND NOT c.relforcerowsecurity))
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_type t ON t.oid = a.atttypid
        JOIN pg_roles r ON r.rolname = current_user
        WHERE a.attnum > 0 AND NOT a.attisdropped
          AND (a.atttypid = 'oid'::regtype OR t.typbasetype = 'oid'::regtype)
          AND c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND NOT (n.nspname = %s AND c.relname = ANY (%s))
          AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'
        ORDER BY n.nspname, c.relname, a.attnum
        """,
        (state_schema, list(STATE_TABLES)),
    ).fetchall()
    return [LoColumn(int(r[0]), r[1], r[2], r[3], r[4], bool(r[5])) for r in rows]


def named(conn: psycopg.Connection, col: Column) -> LoColumn:
    """``col`` as a reference column, named by the user: UsageError for a type whose
    values name no LO; ``readable`` as ``lo_columns`` has it."""
    form = forms.of_type(col.base_type)
    if form is None:
        raise UsageError(
            f"{col.qualified} is {col.type}: a column holding OIDs is of type oid, lo, an"
            " integer, numeric, text, varchar or char"
        )
    row = conn.execute(
        "SELECT has_table_privilege(c.oid, 'SELECT')"
        " AND (NOT c.relrowsecurity OR r.rolbypassrls OR r.rolsuper"
        "      OR (c.relowner = r.oid AND NOT c.relforcerowsecurity))"
        " FROM pg_class c, pg_roles r WHERE c.oid = %s AND r.rolname = current_user",
        (col.relid,),
    ).fetchone()
    return LoColumn(col.relid, col.schema, col.table, col.name, col.type,
                    bool(row and row[0]), form)  # fmt: skip


def as_lo_column(col: Column) -> LoColumn:
    return LoColumn(col.relid, col.schema, col.table, col.name, col.type, form=col.form)


@dataclass(frozen=True)
class RefStats:
    """What a column references. Counts are of distinct OIDs unless they say rows."""

    rows: int
    null_rows: int
    referenced: int
    present: int
    dangling: int
    dangling_sample: tuple[int, ...]
    unreadable: int
    unreadable_sample: tuple[int, ...]
    shared_rows: int
    """LOs named by more than one row of this column."""
    total_bytes: int
    largest: int
    over_1gb: tuple[int, ...]
    over_1gb_count: int


def collect(conn: psycopg.Connection, col: LoColumn, temp: str) -> None:
    """(Re)build the temporary table ``temp`` from ``col``: one row per distinct OID with
    ``n`` (rows naming it), ``present``, ``readable`` (by this role) and ``size``."""
    t = sql.Identifier(temp)
    readable_catalog = catalog.pages_readable(conn)
    size = sql.SQL(
        "CASE WHEN m.oid IS NULL THEN 0 ELSE coalesce((SELECT p.pageno::int8 * {blk}"
        " + octet_length(p.data) FROM pg_catalog.pg_largeobject p WHERE p.loid = r.o"
        " ORDER BY p.pageno DESC LIMIT 1), 0) END"
    ).format(blk=sql.SQL("(current_setting('block_size')::int8 / 4)"))
    conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(t))
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE {t} AS SELECT r.o, r.n, m.oid IS NOT NULL AS present,"
            " coalesce({readable}, false) AS readable, {size} AS size"
            " FROM (SELECT o, count(*) AS n FROM ({s}) x GROUP BY o) r"
            " LEFT JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = r.o"
        ).format(
            t=t,
            readable=READABLE,
            s=col.select(),
            size=size if readable_catalog else sql.SQL("0::int8"),
        )
    )
    conn.execute(sql.SQL("ALTER TABLE pg_temp.{} ADD PRIMARY KEY (o)").format(t))
    if not readable_catalog:
        lseek_sizes(conn, temp)
    conn.execute(sql.SQL("ANALYZE pg_temp.{}").format(t))


def lseek_sizes(conn: psycopg.Connection, temp: str) -> None:
    """Set ``size`` of every present, readable LO in ``temp`` with ``lo_lseek64``."""
    t = sql.Identifier(temp)
    first = 0
    while True:
        # One statement per batch (autocommit): its LO descriptors close at its end.
        row = conn.execute(
            sql.SQL(
                "WITH b AS (SELECT o FROM pg_temp.{t} WHERE o >= %s::int8::oid AND present"
                " AND readable ORDER BY o LIMIT %s), s AS (UPDATE pg_temp.{t} r"
                f" SET size = lo_lseek64(lo_open(r.o, {INV_READ}), 0, 2) FROM b WHERE r.o = b.o"
                " RETURNING r.o) SELECT max(o::int8), count(*) FROM s"
            ).format(t=t),
            (first, SIZE_BATCH),
        ).fetchone()
        if row is None or not row[1] or int(row[0]) >= OID_MAX:
            return
        first = int(row[0]) + 1


def stats(conn: psycopg.Connection, col: LoColumn, temp: str) -> RefStats:
    """Figures for a column whose references ``collect`` put in ``temp``."""
    t = sql.Identifier(temp)
    row = conn.execute(
        sql.SQL("SELECT count(*), count(*) FILTER (WHERE {c} IS NULL) FROM {tab}").format(
            c=sql.Identifier(col.name), tab=sql.Identifier(col.schema, col.table)
        )
    ).fetchone()
    assert row is not None
    rows, nulls = int(row[0]), int(row[1])
    agg = conn.execute(
        sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE present),"
            " count(*) FILTER (WHERE present AND NOT readable),"
            " count(*) FILTER (WHERE n > 1), coalesce(sum(size), 0), coalesce(max(size), 0),"
            " count(*) FILTER (WHERE size > %s) FROM pg_temp.{}"
        ).format(t),
        (MAX_BYTEA,),
    ).fetchone()
    assert agg is not None
    referenced, present, unreadable, shared, total, largest, big = (int(v) for v in agg)

    def sample(where: str) -> tuple[int, ...]:
        q = sql.SQL("SELECT o FROM pg_temp.{} WHERE " + where + " ORDER BY o LIMIT %s")
        return tuple(int(r[0]) for r in conn.execute(q.format(t), (LIST_MAX,)))

    return RefStats(
        rows=rows, null_rows=nulls, referenced=referenced, present=present,
        dangling=referenced - present, dangling_sample=sample("NOT present"),
        unreadable=unreadable, unreadable_sample=sample("present AND NOT readable"),
        shared_rows=shared, total_bytes=total, largest=largest,
        over_1gb=sample(f"size > {MAX_BYTEA}"), over_1gb_count=big,
    )  # fmt: skip


PROBE_SECONDS = 1.5e-6
INDEX_BYTES_PER_SECOND = 500e6
"""Rough costs on this kind of machine: one index probe per row, or reading the whole
pg_largeobject index once; ``blockers`` takes the cheaper."""


def _scan_whole_index(conn: psycopg.Connection, relid: int) -> bool:
    row = conn.execute(
        "SELECT (SELECT relpages::float8 * current_setting('block_size')::int"
        " FROM pg_class WHERE oid = 'pg_catalog.pg_largeobject_loid_pn_index'::regclass),"
        # A table never analyzed has reltuples -1: guess from its size (rows of 40 bytes).
        " (SELECT CASE WHEN reltuples >= 0 THEN reltuples ELSE pg_relation_size(oid) / 40 END"
        " FROM pg_class WHERE oid = %s)",
        (relid,),
    ).fetchone()
    assert row is not None
    index_bytes, rows = float(row[0] or 0), float(row[1] or 0)
    return index_bytes / INDEX_BYTES_PER_SECOND < rows * PROBE_SECONDS


@dataclass(frozen=True)
class Blockers:
    """Rows whose LO cannot move: dangling (or, in another form than oid, a value that
    names no LO by its form), unreadable by this role, over 1 GB. Samples are OIDs, or a
    text column's values."""

    dangling: int
    dangling_sample: tuple[int | str, ...]
    unreadable: int
    unreadable_sample: tuple[int | str, ...]
    over_1gb: int
    over_1gb_sample: tuple[int | str, ...]


def blockers(
    conn: psycopg.Connection, col: LoColumn, refs_only: bool = False, sizes: bool = True
) -> Blockers:
    """One pass over the column joined with the LO catalog (no temporary table): what
    ``run`` must refuse before it changes anything. Only LOs with a page past the bytea
    limit are sized, one index probe each; for a role that may not read pg_largeobject,
    each readable LO is asked for one byte past the limit (``lo_get(o, MAX_BYTEA, 1)``:
    a byte there, even of a hole, means the LO is too big; one call a row, which opens
    and closes the LO itself, where sizing every LO with ``lo_lseek64`` took three).

    ``refs_only``: only rows naming an existing LO count (``--to text``: any other value
    is inline text, never dangling); ``sizes`` False: no LO is read or sized (``--to
    oid`` moves no bytes), nor is this role's right to read them asked."""
    t, o = sql.Identifier(col.schema, col.table), col.oid("x")
    if not sizes:
        return _blockers(conn, col, t, None, refs_only, readable=False)
    if not catalog.pages_readable(conn):
        # CASE, not AND: lo_get must not run for a dangling or unreadable OID.
        return _blockers(conn, col, t, sql.SQL(
            "CASE WHEN m.oid IS NOT NULL AND {r} THEN pg_catalog.octet_length("
            "pg_catalog.lo_get({o}, {max}, 1)) > 0 ELSE false END"
        ).format(r=READABLE, o=o, max=sql.Literal(MAX_BYTEA)), refs_only)  # fmt: skip
    last_page = sql.SQL("p.pageno >= {max} / (current_setting('block_size')::int8 / 4)").format(
        max=sql.Literal(MAX_BYTEA)
    )
    big = sql.SQL(
        "m.oid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.pg_largeobject p"
        " WHERE p.loid = {o}"
        " AND {last} AND p.pageno::int8 * (current_setting('block_size')::int8 / 4)"
        " + octet_length(p.data) > {max})"
    ).format(o=o, last=last_page, max=sql.Literal(MAX_BYTEA))
    if _scan_whole_index(conn, col.relid):
        # One pass over pg_largeobject's index (never its data: the planner is told so)
        # finds the LOs with a page near the limit, whatever LO they are; only rows naming
        # one of those are probed. Cheaper than a probe per row when the index is small.
        with conn.transaction():
            conn.execute("SET LOCAL enable_seqscan = off")
            conn.execute("DROP TABLE IF EXISTS pg_temp.pgbd_big_los")
            conn.execute(
                sql.SQL(
                    "CREATE TEMP TABLE pgbd_big_los AS SELECT DISTINCT p.loid"
                    " FROM pg_catalog.pg_largeobject p WHERE {}"
                ).format(last_page)
            )
        found = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_temp.pgbd_big_los)").fetchone()
        if not (found and found[0]):
            # No LO is that big: no row is asked (a --to text run as a superuser then
            # makes no pass over the table at all: it has nothing else to look for).
            return _blockers(conn, col, t, None, refs_only)
        big = sql.SQL("{} IN (SELECT loid FROM pg_temp.pgbd_big_los) AND {}").format(o, big)
    return _blockers(conn, col, t, big, refs_only)


def _blockers(
    conn: psycopg.Connection, col: LoColumn, t: sql.Identifier, big: sql.Composable | None,
    refs_only: bool, readable: bool = True,
) -> Blockers:  # fmt: skip
    """Blockers counted in one pass, ``big`` the condition of a row whose LO is too big
    (over ``x``, the table, joined with ``m``, pg_largeobject_metadata), None when no LO
    is; ``readable``: whether to ask if this role may read each LO. No pass is made when
    there is nothing to count."""
    c = sql.Identifier(col.name)
    if readable:
        row = conn.execute(
            "SELECT current_setting('is_superuser') = 'on'"
            " OR current_setting('lo_compat_privileges') = 'on'"
        ).fetchone()
        readable = not (row and row[0])  # this session reads every LO
    maybe = {
        "dangling": None if refs_only else sql.SQL("m.oid IS NULL"),
        "unreadable": sql.SQL("m.oid IS NOT NULL AND NOT {}").format(READABLE)
        if readable
        else None,
        "big": big,
    }
    if all(w is None for w in maybe.values()):
        return Blockers(0, (), 0, (), 0, ())
    conds: dict[str, sql.Composable] = {
        k: sql.SQL("false") if w is None else w for k, w in maybe.items()
    }
    base = sql.SQL(
        "FROM {t} x LEFT JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = {o}"
        " WHERE x.{c} IS NOT NULL"
    ).format(t=t, c=c, o=col.oid("x"))
    if refs_only:
        base = sql.SQL("{} AND m.oid IS NOT NULL").format(base)
    row = conn.execute(
        sql.SQL("SELECT {} {}").format(
            sql.SQL(", ").join(
                sql.SQL("count(*) FILTER (WHERE {})").format(w) for w in conds.values()
            ),
            base,
        )
    ).fetchone()
    assert row is not None
    counts = dict(zip(conds, (int(v) for v in row), strict=True))
    # A row is shown by its LO's OID, or by its own value where that names no LO.
    shown: sql.Composable = sql.SQL("x.{}").format(c)
    if col.form.name != "oid":
        shown = sql.SQL("coalesce(m.oid::pg_catalog.text, {})").format(col.form.sample(shown))

    def sample(name: str) -> tuple[int | str, ...]:
        if not counts[name]:
            return ()
        q = sql.SQL("SELECT DISTINCT {v} {b} AND {w} ORDER BY 1 LIMIT %s").format(
            v=shown, b=base, w=conds[name]
        )
        raw = name == "dangling" and col.form.is_text
        return tuple(_value(r[0], raw) for r in conn.execute(q, (LIST_MAX,)))

    return Blockers(counts["dangling"], sample("dangling"), counts["unreadable"],
                    sample("unreadable"), counts["big"], sample("big"))  # fmt: skip


def _value(v: object, raw: bool) -> int | str:
    """A sampled value: an OID, or an integer column's own value, as int; a text
    column's own value (``raw``) as text."""
    if isinstance(v, int):
        return v
    return str(v) if raw else int(str(v))


def listed(oids: Sequence[int | str], count: int) -> str:
    """``1, 2, 3 and 7 more`` (a text value quoted: ``'abc'``)."""
    text = ", ".join(forms.shown(o) for o in oids)
    return f"{text} and {count - len(oids)} more" if count > len(oids) else text
