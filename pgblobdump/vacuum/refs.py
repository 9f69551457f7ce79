"""Where LOs are referenced: every column whose type holds OIDs (``oid``, ``lo``, arrays
of them, domains over either), and the columns a user names with ``--references``
(an integer column, text, jsonb or anything else whose text form holds OIDs); and what
keeps us from seeing them all (a table the role may not read, row-level security, a
column of a type that wraps OIDs in a way we do not read).

The discovery is one catalog query. A type "bears" OIDs when it is ``oid``, a domain
over a type that does, an array of one, a composite type with such an attribute, or a
range over one; the last two (and arrays of anything but a plain OID) are "unknown":
their values are read only when ``--references`` names the column, by taking every
integer in their text form (a superset of the OIDs they hold, so never too few).

A named integer column is read as its value: ``int2`` and ``int4`` (domains, arrays) as
``::oid`` reads them, a negative value being what ``oid::int4`` made of an OID of 2^31
or more (the OID + 2^32); ``int8`` as the OID it is, a value outside 0..2^32-1 being no
OID. Reading the digits alone would take ``-1294967296`` for LO 1294967296 and leave
LO 3000000000, which it names, unreferenced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import NotFound, UnsafeToRemove
from pgblobdump.pgconstants import OID_MAX
from pgblobdump.refs import composite
from pgblobdump.refs.catalog import (
    ACCESS,
    APPLICATION_COLUMNS,
    COLUMN_FIELDS,
    TableColumn,
    regclass_text,
)
from pgblobdump.vacuum.age import full_xid

LIST_MAX = 10
"""How many refused columns a message names before it says ``and N more``."""

# Kinds of reference column: how its values turn into OIDs.
SCALAR = "oid"  # oid, lo, a domain over either; named: int2, int4, domains over them
ARRAY = "array"  # oid[], lo[], a domain over either; named: int2[], int4[], domains
INT8 = "int8"  # named: int8 or a domain over it, a value in 0..2^32-1
INT8_ARRAY = "int8 array"  # named: int8[] or a domain over it, each element as INT8
TEXT = "text"  # named by --references: every integer in the value's text form
UNKNOWN = "unknown"  # a composite or range holding OIDs, not named: refused

_BEARING = """
WITH RECURSIVE bearing(typ, kind) AS (
    {seeds}
  UNION
    SELECT x.typ, x.kind FROM bearing b, LATERAL (
        SELECT t.oid AS typ, b.kind FROM pg_catalog.pg_type t
        WHERE t.typtype = 'd' AND t.typbasetype = b.typ
      UNION ALL
        SELECT t.oid, CASE b.kind WHEN 'oid' THEN 'array' WHEN 'int8' THEN 'int8 array'
                      ELSE 'unknown' END
        FROM pg_catalog.pg_type t WHERE t.typcategory = 'A' AND t.typelem = b.typ
      UNION ALL
        SELECT c.reltype, 'unknown' FROM pg_catalog.pg_attribute a
        JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
        WHERE a.atttypid = b.typ AND a.attnum > 0 AND NOT a.attisdropped AND c.reltype <> 0
          AND c.relnamespace NOT IN ('pg_catalog'::regnamespace,
                                     'information_schema'::regnamespace)
      UNION ALL
        SELECT r.rngtypid, 'unknown' FROM pg_catalog.pg_range r WHERE r.rngsubtype = b.typ
      UNION ALL
        SELECT r.rngmultitypid, 'unknown' FROM pg_catalog.pg_range r WHERE r.rngtypid = b.typ
    ) x
)
"""
"""Every type that holds OIDs, with how (``oid``, ``array`` or ``unknown``; from an
integer seed ``int8`` and ``int8 array`` too), from the ``{seeds}`` given."""

_OID_SEED = "SELECT 'pg_catalog.oid'::pg_catalog.regtype::oid, 'oid'"
_NAMED_SEEDS = (
    _OID_SEED + " UNION ALL SELECT 'pg_catalog.int2'::pg_catalog.regtype::oid, 'oid'"
    " UNION ALL SELECT 'pg_catalog.int4'::pg_catalog.regtype::oid, 'oid'"
    " UNION ALL SELECT 'pg_catalog.int8'::pg_catalog.regtype::oid, 'int8'"
)
"""A named column's integers are OIDs too: int2 and int4 as ``::oid`` reads them (a
negative one is an OID of 2^31 or more, as ``oid::int4`` wrote it), int8 as they are."""

_KIND_OF_TYPE = """
SELECT typ::int8, CASE WHEN bool_or(kind = 'unknown') THEN 'unknown'
                       WHEN bool_or(kind = 'int8 array') THEN 'int8 array'
                       WHEN bool_or(kind = 'array') THEN 'array'
                       WHEN bool_or(kind = 'int8') THEN 'int8' ELSE 'oid' END
FROM bearing GROUP BY typ
"""
_TYPES = _BEARING.replace("{seeds}", _OID_SEED) + _KIND_OF_TYPE
"""Each type holding OIDs once, with its kind."""
_NAMED_TYPES = _BEARING.replace("{seeds}", _NAMED_SEEDS) + _KIND_OF_TYPE
"""The same, for a column ``--references`` names: integer types and theirs too."""

_KINDS = (
    "ROWS FROM (pg_catalog.unnest(%(types)s::int8[]::pg_catalog.oid[]),"
    " pg_catalog.unnest(%(kinds)s::text[])) k(typ, kind)"
)

_TABLE_ACCESS = ACCESS + ", c.relkind::text, pg_catalog.has_table_privilege(c.oid, 'SELECT')"
"""What RefColumn reads of a column's table after its kind: readable, rls, lockable,
relkind, table_select (then ``c.relispopulated``)."""

_COLUMNS = (
    "SELECT "
    + COLUMN_FIELDS
    + ", k.kind, "
    + _TABLE_ACCESS
    + """,
       c.relispopulated
FROM pg_catalog.pg_attribute a
JOIN """
    + _KINDS
    + " ON k.typ = a.atttypid"
    + APPLICATION_COLUMNS
    + """  AND NOT (c.relname = 'vacuum_horizons' AND a.attname = 'database' AND EXISTS (
      SELECT 1 FROM pg_catalog.pg_attribute h WHERE h.attrelid = c.oid
      AND h.attname = 'horizon' AND h.atttypid = 'pg_catalog.xid8'::pg_catalog.regtype))
ORDER BY n.nspname, c.relname, a.attnum
"""
)
"""Every column of a type that holds OIDs, but vacuum's own horizon samples (vacuum/age.py):
their ``database`` is the database's OID, not an LO's."""

_NAMED = (
    "SELECT "
    + COLUMN_FIELDS
    + """,
       coalesce((SELECT CASE k.kind WHEN 'unknown' THEN 'text' ELSE k.kind END
                 FROM """
    + _KINDS
    + """ WHERE k.typ = a.atttypid), 'text'),
       """
    + _TABLE_ACCESS
    + """,
       c.relispopulated
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_roles r ON r.rolname = current_user
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = %(column)s
     AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.oid = pg_catalog.to_regclass(%(table)s)
"""
)

_STAMP = """
SELECT count(*)::text || '/' || coalesce(sum(a.attrelid::int8 * 1601 + a.attnum), 0)::text
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE a.atttypid = ANY(%s::int8[]::pg_catalog.oid[]) AND a.attnum > 0 AND NOT a.attisdropped
  AND c.relkind IN ('r', 'p', 'm')
  AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'
"""


_TEMPORARY = """
SELECT n.nspname || '.' || c.relname || '.' || a.attname
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE a.atttypid = ANY (%(types)s::int8[]::pg_catalog.oid[]) AND a.attnum > 0
  AND NOT a.attisdropped AND c.relkind IN ('r', 'p')
  AND n.nspname LIKE 'pg\\_temp\\_%%' AND n.oid <> pg_catalog.pg_my_temp_schema()
  AND n.oid <> ALL (%(own)s::int8[]::pg_catalog.oid[])
  AND c.relname NOT LIKE 'pgbd\\_%%'
ORDER BY 1
"""
"""Columns holding OIDs in other sessions' temporary tables (``References.temporary``)."""


@dataclass(frozen=True)
class RefColumn(TableColumn):
    """A column that may reference LOs. ``kind``: how its values become OIDs (SCALAR,
    ARRAY, TEXT, UNKNOWN). ``readable``: the role may read the column; ``rls``: row-level
    security filters the rows it reads (either hides references from us)."""

    kind: str
    readable: bool
    rls: bool
    lockable: bool = True
    """The role may lock the table against writers (LOCK ... IN SHARE MODE)."""
    relkind: str = "r"
    named: bool = False
    """Named by ``--references``."""
    table_select: bool = True
    """SELECT on the whole table (system columns such as xmin need it)."""
    populated: bool = True
    """False for a materialized view made WITH NO DATA (or refreshed so): it has no
    rows, and a scan of it fails ("has not been populated"), so it is not read."""
    suspect: bool = False
    """A suspected reference (refs/suspects.py): a text or integer column whose values
    were found to be OIDs of live LOs; read as a named column is."""
    extract: str = ""
    """For a composite, range or array of them (UNKNOWN): a query of column ``o`` giving
    the OIDs of the value ``pgbd_t.<column>`` through its attributes (refs/composite.py),
    braces doubled; empty when none could be built (then refused unless named)."""

    def oids(self, since: str | None = None) -> sql.Composed:
        """A query of column ``o`` (oid): every OID this column names, NULLs left out,
        duplicates kept; with ``since`` (a pg_snapshot's text), only in rows that
        snapshot may not have seen: every row whose xmin is not below the snapshot's xmin.

        Not ``pg_visible_in_snapshot``: a snapshot lists only top-level xids in progress,
        never their subtransactions', so a row written in a savepoint (its xmin the
        subtransaction's xid, above its top-level one and below the snapshot's xmax) of
        a transaction open then would look seen, and a reference it holds be missed. An
        xid below the snapshot's xmin is the only one certainly finished before it."""
        c, t = sql.Identifier(self.column), sql.Identifier(self.schema, self.table)
        if not self.populated:
            # No rows. The planner drops the scan, but the statement still takes the
            # view's ACCESS SHARE lock, which a REFRESH (ACCESS EXCLUSIVE) waits for.
            return sql.SQL("SELECT NULL::pg_catalog.oid AS o FROM {t} pgbd_t WHERE false").format(
                t=t
            )
        if self.kind == UNKNOWN and self.extract:
            q = (
                "SELECT pgbd_x.o FROM {t} pgbd_t, LATERAL (" + self.extract + ") pgbd_x"
                " WHERE pgbd_x.o IS NOT NULL"
            )
        elif self.kind == SCALAR:
            q = "SELECT pgbd_t.{c}::pg_catalog.oid AS o FROM {t} pgbd_t WHERE {c} IS NOT NULL"
        elif self.kind == ARRAY:
            q = (
                "SELECT pgbd_u AS o FROM {t} pgbd_t,"
                " pg_catalog.unnest(pgbd_t.{c}::pg_catalog.oid[]) pgbd_u WHERE pgbd_u IS NOT NULL"
            )
        elif self.kind == INT8:
            q = (
                "SELECT pgbd_t.{c}::pg_catalog.oid AS o FROM {t} pgbd_t"
                f" WHERE pgbd_t.{{c}} BETWEEN 0 AND {OID_MAX}"
            )
        elif self.kind == INT8_ARRAY:
            q = (
                "SELECT pgbd_u::pg_catalog.oid AS o FROM {t} pgbd_t,"
                " pg_catalog.unnest(pgbd_t.{c}::pg_catalog.int8[]) pgbd_u"
                f" WHERE pgbd_u BETWEEN 0 AND {OID_MAX}"
            )
        else:
            # Every run of digits (leading zeros dropped) that fits an OID, and after a
            # minus sign also what oid::int4 made of an OID of 2^31 or more (-1294967296
            # for 3000000000: the OID + 2^32): a superset of the OIDs the value holds,
            # whatever its shape (text, jsonb, a composite).
            q = (
                "SELECT pgbd_v::pg_catalog.oid AS o FROM {t} pgbd_t,"
                " pg_catalog.regexp_matches(pgbd_t.{c}::text, '(-?)([0-9]+)', 'g') pgbd_m,"
                " LATERAL (SELECT NULLIF(pg_catalog.ltrim(pgbd_m[2], '0'), '') AS pgbd_d) pgbd_z,"
                " LATERAL (SELECT CASE WHEN pg_catalog.length(pgbd_d) <= 10"
                " THEN pgbd_d::pg_catalog.int8 END AS pgbd_n) pgbd_y,"
                " LATERAL (VALUES (pgbd_n), (CASE WHEN pgbd_m[1] = '-' AND pgbd_n <= "
                f"{1 << 31} THEN {1 << 32} - pgbd_n END)) pgbd_w(pgbd_v)"
                f" WHERE pgbd_v BETWEEN 1 AND {OID_MAX}"
            )
        if since is not None:
            xmin = full_xid("pgbd_t.xmin").replace("{", "{{").replace("}", "}}")
            # age() first: a cheap 32-bit test that leaves out every row older than the
            # snapshot's xmin, then the same test exact on the 64-bit xid.
            q += (
                " AND pg_catalog.age(pgbd_t.xmin) <= (SELECT pg_catalog.age(((pg_catalog."
                "pg_snapshot_xmin({since}::pg_catalog.pg_snapshot)::text::int8 & 4294967295)"
                "::text)::pg_catalog.xid))"
                f" AND {xmin} >= (SELECT pg_catalog.pg_snapshot_xmin("
                "{since}::pg_catalog.pg_snapshot)::text::int8)"
            )
            return sql.SQL(q).format(c=c, t=t, since=sql.Literal(since))
        return sql.SQL(q).format(c=c, t=t)


@dataclass(frozen=True)
class Refusal:
    """A column whose references we cannot see, and why."""

    column: str
    why: str
    lock: bool = False
    """Only the lock is missing: the references can be read (enough for a dry run)."""

    def __str__(self) -> str:
        return f"{self.column} ({self.why})"


@dataclass(frozen=True)
class References:
    """Every reference column found, and the refusals among them."""

    columns: tuple[RefColumn, ...]
    types: tuple[int, ...] = ()
    """Every type holding OIDs when the columns were found (for ``stamp``)."""
    temporary: tuple[str, ...] = ()
    """Columns holding OIDs in another live session's temporary tables: their rows are in
    that backend's memory, which no other session can read."""

    @property
    def refusals(self) -> tuple[Refusal, ...]:
        """What hides references from us, or keeps us from holding writers off."""
        out = [
            Refusal(t, "another session's temporary table: its rows are that session's"
                    " alone, nothing can be removed while it exists")
            for t in self.temporary
        ]  # fmt: skip
        for c in self.columns:
            if not c.readable:
                out.append(Refusal(c.qualified, "the role may not read it"))
            elif c.rls:
                out.append(Refusal(c.qualified, "row-level security applies to the role"))
            elif c.kind == UNKNOWN and not c.extract:
                out.append(Refusal(c.qualified, f"type {c.type} holds OIDs; name it with"
                                   " --references to read every number in it"))  # fmt: skip
            elif not c.lockable:
                out.append(Refusal(c.qualified, "the role may not lock its table against"
                                   " writers: LOCK IN SHARE MODE needs UPDATE, DELETE or"
                                   " TRUNCATE on it", lock=True))  # fmt: skip
        return tuple(out)

    @property
    def tables(self) -> tuple[tuple[int, str, str], ...]:
        """(relid, schema, table) of every table read, once each, in a stable order."""
        seen: dict[int, tuple[int, str, str]] = {}
        for c in self.columns:
            seen.setdefault(c.relid, (c.relid, c.schema, c.table))
        return tuple(sorted(seen.values()))

    @property
    def matviews(self) -> frozenset[int]:
        """Materialized views among the tables (LOCK TABLE takes none; REFRESH is their
        only writer, and reads tables that are locked when they hold references)."""
        return frozenset(c.relid for c in self.columns if c.relkind == "m")

    @property
    def unpopulated(self) -> tuple[RefColumn, ...]:
        """The columns of materialized views not populated: they hold no references now;
        a run holds a REFRESH off while it unlinks (``lock_unpopulated``)."""
        return tuple(c for c in self.columns if not c.populated)

    @property
    def fingerprint(self) -> tuple[object, ...]:
        """What must not change while a run goes: the columns, by table and number, and
        whether a materialized view is populated (a REFRESH fills one); other sessions'
        temporary tables holding OIDs."""
        cols = tuple(sorted((c.relid, c.attnum, c.kind, c.populated) for c in self.columns))
        return (*cols, self.temporary)

    def notes(self) -> tuple[str, ...]:
        """One line per materialized view not populated (they are read as empty)."""
        views = dict.fromkeys(f"{c.schema}.{c.table}" for c in self.unpopulated)
        return tuple(
            f"materialized view {v} is not populated (WITH NO DATA): it holds no references"
            for v in views
        )

    def union(
        self, since: str | None = None, seen: frozenset[tuple[int, int]] = frozenset()
    ) -> sql.Composable:
        """A query of column ``o``: every OID any column names (duplicates kept); one that
        yields nothing when there is no reference column. With ``since``, the columns in
        ``seen`` ((relid, attnum) read whole under that snapshot) give only the rows
        written after it; the others are read whole."""
        if not self.columns:
            return sql.SQL("SELECT NULL::pg_catalog.oid AS o WHERE false")
        return sql.SQL(" UNION ALL ").join(
            c.oids(since if (c.relid, c.attnum) in seen and c.table_select else None)
            for c in self.columns
        )

    def union_flagged(self) -> sql.Composable:
        """``union`` with a second column ``s``: whether the OID comes from a suspected
        reference (so what only those keep can be counted)."""
        if not self.columns:
            return sql.SQL("SELECT NULL::pg_catalog.oid AS o, false AS s WHERE false")
        return sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT x.o, {} AS s FROM ({}) x").format(sql.Literal(c.suspect), c.oids())
            for c in self.columns
        )

    def refuse_unsafe(self, locking: bool = True) -> None:
        """UnsafeToRemove naming the columns we cannot see whole (or, ``locking``, whose
        tables we cannot lock against writers), if any."""
        bad = tuple(r for r in self.refusals if locking or not r.lock)
        if bad:
            more = f" and {len(bad) - LIST_MAX} more" if len(bad) > LIST_MAX else ""
            raise UnsafeToRemove(
                "cannot see every reference to LOs, nothing removed: "
                + "; ".join(str(r) for r in bad[:LIST_MAX])
                + more
            )


def _column(row: Sequence[object], named: bool = False) -> RefColumn:
    return RefColumn(int(row[0]), int(row[1]), str(row[2]), str(row[3]), str(row[4]),  # type: ignore[call-overload]
                     str(row[5]), str(row[6]), bool(row[7]), bool(row[8]), bool(row[9]),
                     str(row[10]), named, bool(row[11]), bool(row[12]))  # fmt: skip


def _extract(conn: psycopg.Connection, col: RefColumn) -> str:
    """``RefColumn.extract`` for ``col`` (its type read from the catalogs now)."""
    row = conn.execute(
        "SELECT atttypid::int8 FROM pg_catalog.pg_attribute WHERE attrelid = %s AND attnum = %s",
        (col.relid, col.attnum),
    ).fetchone()
    gen = composite.extractor(conn, int(row[0])) if row else None
    if gen is None:
        return ""
    text = gen(sql.SQL("pgbd_t.{}").format(sql.Identifier(col.column))).as_string(conn)
    return text.replace("{", "{{").replace("}", "}}")


def lock_unpopulated(conn: psycopg.Connection, refs: References) -> None:
    """In ``conn``'s transaction, the ACCESS SHARE lock of every materialized view not
    populated (LOCK TABLE refuses views): a REFRESH, which would fill one with references,
    waits until the transaction ends. Needs SELECT on the column, as reading it does."""
    for c in refs.unpopulated:
        conn.execute(c.oids())


def oid_array(oids: Sequence[int]) -> str:
    """``oids`` as an array literal for ``%s::int8[]``: joined in C, far cheaper than
    psycopg's per-element list dumping for thousands of OIDs."""
    return "{" + ",".join(map(str, oids)) + "}"


def stamp_sql(types: Sequence[int]) -> sql.Composed:
    """A scalar subquery: a cheap mark of every column of ``types`` that changes when
    such a column is added or dropped anywhere (a table created, altered or dropped),
    unlike a full ``discover``."""
    return sql.SQL("({})").format(
        sql.SQL(_STAMP.replace("%s", "{}")).format(sql.Literal(oid_array(types)))
    )


def stamp(conn: psycopg.Connection, types: Sequence[int]) -> str:
    """The mark ``stamp_sql`` computes, now."""
    row = conn.execute(sql.SQL("SELECT {}").format(stamp_sql(types))).fetchone()
    assert row is not None
    return str(row[0])


def discover(
    conn: psycopg.Connection,
    named: Sequence[tuple[str, str]] = (),
    suspected: Sequence[tuple[str, str]] = (),
    own: Sequence[int] = (),
) -> References:
    """Every column of every table (and materialized view) that may reference LOs, plus
    the ``named`` ones (``([schema.]table, column)``, as ``--references`` gives them).
    Partitions are read through their parent; catalogs, TOAST and temporary tables are
    left out. NotFound for a named table or column that does not exist."""
    kinds = conn.execute(_TYPES).fetchall()
    types = [int(r[0]) for r in kinds]
    params: dict[str, object] = {"types": types, "kinds": [str(r[1]) for r in kinds]}
    found = {(int(r[0]), int(r[1])): _column(r) for r in conn.execute(_COLUMNS, params)}
    for key, col in found.items():
        if col.kind == UNKNOWN:
            found[key] = dataclasses.replace(col, extract=_extract(conn, col))
    if named:
        ints = conn.execute(_NAMED_TYPES).fetchall()
        params = {"types": [int(r[0]) for r in ints], "kinds": [str(r[1]) for r in ints]}
    for (table, column), suspect in [*((n, False) for n in named), *((n, True) for n in suspected)]:
        row = conn.execute(
            _NAMED, {**params, "column": column, "table": regclass_text(table)}
        ).fetchone()
        if row is None:
            raise NotFound(f"no table {table} (from --references {table}.{column})")
        if row[1] is None:
            raise NotFound(f"no column {table}.{column} (from --references {table}.{column})")
        if str(row[10]) not in ("r", "p", "m"):
            raise NotFound(f"{table} is not a table (from --references {table}.{column})")
        col = _column(row, named=True)
        if suspect:
            if (col.relid, col.attnum) in found:
                continue  # named, or typed after all
            col = dataclasses.replace(col, suspect=True)
        found[(col.relid, col.attnum)] = col
    columns = tuple(sorted(found.values(), key=lambda c: (c.schema, c.table, c.attnum)))
    found_temp = conn.execute(_TEMPORARY, {"types": types, "own": list(own)}).fetchall()
    temporary = tuple(str(r[0]) for r in found_temp)
    return References(columns, tuple(types), temporary)
