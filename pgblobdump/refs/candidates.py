"""Candidate references: columns of text, varchar, char, integer, bigint or numeric type
(arrays and domains too) whose values may be OIDs, as applications write them
(``values``: Hibernate's CLOBs, ``<oid>.<ext>`` file names, ``oid::int4``), found in the
catalogs; and the SQL that reads the OIDs a candidate's values name. ``suspects`` tells
which of them hold OIDs of live LOs.

Generated keys (identity columns, ``nextval`` defaults) and the referencing columns of
foreign keys are candidates too (refile-postgres keeps the OID in a serial ``id``), marked
``keyish``: a counter that has run past 16384 meets OIDs by chance in every table.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.refs import values
from pgblobdump.refs.catalog import (
    ACCESS,
    APPLICATION_COLUMNS,
    COLUMN_FIELDS,
    TableColumn,
    regclass_text,
)

STATE_SCHEMAS = ("pgblobdump", "pgblobdump_sync")
"""pgblobdump's own state (OID ranges of copies, migrations): not the application's."""

# How a candidate column's values are read (refs.values).
TEXT = "text"
INT4 = "int4"  # int2 and int4: as oid::int4 stores an OID
INT8 = "int8"
NUMERIC = "numeric"

_SEEDS = {"text": TEXT, "varchar": TEXT, "bpchar": TEXT, "int2": INT4, "int4": INT4,
          "int8": INT8, "numeric": NUMERIC}  # fmt: skip

_TYPES = """
WITH RECURSIVE t(typ, kind, arr) AS (
    SELECT ('pg_catalog.' || s.name)::pg_catalog.regtype::oid, s.kind, false
    FROM ROWS FROM (pg_catalog.unnest(%(names)s::text[]), pg_catalog.unnest(%(kinds)s::text[]))
         s(name, kind)
  UNION
    SELECT x.typ, x.kind, x.arr FROM t, LATERAL (
        SELECT d.oid AS typ, t.kind, t.arr FROM pg_catalog.pg_type d
        WHERE d.typtype = 'd' AND d.typbasetype = t.typ
      UNION ALL
        SELECT a.oid, t.kind, true FROM pg_catalog.pg_type a
        WHERE NOT t.arr AND a.typcategory = 'A' AND a.typelem = t.typ
    ) x
)
SELECT typ::int8, kind, arr FROM t
"""
"""Every type a candidate column may have: the seeds, domains over them, arrays of them
(and domains over those), with how its values read and whether it is an array."""

_CANDIDATES = (
    "SELECT "
    + COLUMN_FIELDS
    + ", k.kind, k.arr, "
    + ACCESS
    + """, c.relkind::text, c.relispopulated,
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid
               AND i.indkey[0] = a.attnum AND i.indpred IS NULL AND i.indexprs IS NULL
               AND i.indisvalid
               AND (SELECT am.amname FROM pg_catalog.pg_class ic
                    JOIN pg_catalog.pg_am am ON am.oid = ic.relam
                    WHERE ic.oid = i.indexrelid) = 'btree'),
       a.attidentity <> '' OR EXISTS (
           SELECT 1 FROM pg_catalog.pg_attrdef d WHERE d.adrelid = c.oid AND d.adnum = a.attnum
           AND pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%%'),
       EXISTS (SELECT 1 FROM pg_catalog.pg_constraint f WHERE f.conrelid = c.oid
               AND f.contype = 'f' AND f.conkey = ARRAY[a.attnum])
FROM pg_catalog.pg_attribute a
JOIN ROWS FROM (pg_catalog.unnest(%(types)s::int8[]::pg_catalog.oid[]),
                pg_catalog.unnest(%(kinds)s::text[]), pg_catalog.unnest(%(arrs)s::bool[]))
     k(typ, kind, arr) ON k.typ = a.atttypid"""
    + APPLICATION_COLUMNS
    + """  AND n.nspname <> ALL (%(state)s::text[])
ORDER BY n.nspname, c.relname, a.attnum
"""
)


@dataclass(frozen=True)
class Candidate(TableColumn):
    """A column whose values may be OIDs: of a candidate type, not a typed reference."""

    kind: str
    """How its values read: TEXT, INT4, INT8 or NUMERIC (of each element for an array)."""
    array: bool
    readable: bool
    rls: bool
    lockable: bool
    relkind: str
    populated: bool
    indexed: bool
    """A plain btree index leads with it: an LO can be looked up in it (integers only)."""
    keyish: bool = False
    """A generated key (identity, a ``nextval`` default) or a foreign key's referencing
    column: usually a counter, which meets OIDs by chance once it passes 16384. Still a
    candidate (refile-postgres keeps the OID in a serial ``id``), but a full pass confirms
    it only when most of what was screened are live OIDs."""

    @property
    def spec(self) -> tuple[str, str]:
        """``(schema.table, column)``, as ``--references`` names one; the table quoted as
        SQL writes it (a name may hold a dot: ``refs.catalog.regclass_text`` reads it)."""
        return (sql.Identifier(self.schema, self.table).as_string(None), self.column)

    def oid_of(self, value: sql.Composable) -> sql.Composed:
        """An ``oid`` expression: the LO one value (an element for an array) names, or
        NULL."""
        if self.kind == TEXT:
            return values.text_sql(sql.SQL("({})::pg_catalog.text").format(value))
        if self.kind == NUMERIC:
            return values.numeric_sql(value)
        return values.int_sql(value, 32 if self.kind == INT4 else 64)

    def named(self, row: str) -> sql.Composed:
        """A subquery of column ``o``: the OIDs its value in row alias ``row`` names
        (every element's for an array), NULLs for values naming none."""
        v = sql.SQL("{}.{}").format(sql.Identifier(row), sql.Identifier(self.column))
        if self.array:
            return sql.SQL("SELECT {} AS o FROM pg_catalog.unnest({}) pgbd_e").format(
                self.oid_of(sql.SQL("pgbd_e")), v
            )
        return sql.SQL("SELECT {} AS o WHERE {} IS NOT NULL").format(self.oid_of(v), v)

    def pattern(self, row: str) -> sql.Composable:
        """The form a scalar value is in (``refs.values.PATTERNS``)."""
        if self.kind != TEXT:
            return sql.SQL("'integer'")
        v = sql.SQL("({}.{})::pg_catalog.text").format(sql.Identifier(row),
                                                      sql.Identifier(self.column))  # fmt: skip
        return values.text_pattern_sql(v)


def candidates(
    conn: psycopg.Connection,
    skip: Iterable[tuple[int, int]] = (),
    dismissed: Sequence[tuple[str, str]] = (),
    state: Sequence[str] = (),
) -> list[Candidate]:
    """Every candidate column of the database but those in ``skip`` ((relid, attnum):
    typed or named references), ``dismissed`` (``--not-references``) and the schemas of
    pgblobdump's state (``STATE_SCHEMAS`` and ``state``)."""
    types = conn.execute(_TYPES, {"names": list(_SEEDS), "kinds": list(_SEEDS.values())}).fetchall()
    rows = conn.execute(
        _CANDIDATES,
        {"types": [int(t[0]) for t in types], "kinds": [str(t[1]) for t in types],
         "arrs": [bool(t[2]) for t in types], "state": [*STATE_SCHEMAS, *state]},
    ).fetchall()  # fmt: skip
    skipped = set(skip)
    gone = _resolved(conn, dismissed)
    out = []
    for r in rows:
        c = Candidate(int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]),
                      str(r[6]), bool(r[7]), bool(r[8]), bool(r[9]), bool(r[10]), str(r[11]),
                      bool(r[12]), bool(r[13]))  # fmt: skip
        if bool(r[14]) or bool(r[15]):
            c = dataclasses.replace(c, keyish=True)
        if (c.relid, c.attnum) not in skipped and (c.relid, c.column) not in gone:
            out.append(c)
    return out


def _resolved(conn: psycopg.Connection, specs: Sequence[tuple[str, str]]) -> set[tuple[int, str]]:
    """``(relid, column)`` of each ``(table, column)`` named that exists."""
    out = set()
    for table, column in specs:
        row = conn.execute(
            "SELECT pg_catalog.to_regclass(%s)::oid::int8", (regclass_text(table),)
        ).fetchone()
        if row and row[0] is not None:
            out.add((int(row[0]), column))
    return out


def union(cols: Sequence[Candidate]) -> sql.Composed:
    """A query of column ``o``: every OID ``cols`` name (one pass per table)."""
    by_table: dict[int, list[Candidate]] = defaultdict(list)
    for c in cols:
        by_table[c.relid].append(c)
    return sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT pgbd_v.o FROM {t} pgbd_t, {named} WHERE pgbd_v.o IS NOT NULL").format(
            t=sql.Identifier(cs[0].schema, cs[0].table), named=live_named(cs)
        )
        for cs in by_table.values()
    )


def live_named(cols: Sequence[Candidate]) -> sql.Composed:
    """``LATERAL (...) pgbd_v(k, o)``: each column's number ``k`` with an OID its value
    names. (Measured: a subquery a column beats one VALUES list of them, 0.63 s against
    2.5 s over 166,666 rows of 4 columns.)"""
    return sql.SQL("LATERAL ({}) pgbd_v(k, o)").format(
        sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {k}, x.o FROM ({q}) x").format(k=sql.Literal(i), q=c.named("pgbd_t"))
            for i, c in enumerate(cols)
        )
    )
