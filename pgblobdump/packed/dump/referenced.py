"""``--referenced-by`` columns (dump, copy, sync) read by their type, each value as
``refs/values.py`` reads it: an ``oid`` (``lo``) as it is; ``int2``/``int4`` as
``oid::int4`` stores an OID (a negative one is the OID + 2^32); ``int8`` and ``numeric``
as they are; ``text``, ``varchar``, ``char`` when the value is an OID's digits or an OID
leading a file name (``16385.png``, pg-lo-storage's FileField). Domains over these and
arrays of them (unnested) too. A value of none of these forms (inline text in a mixed
column, an ``int8`` outside 1..2^32-1) names no LO: its row selects nothing, and is no
error. A column of any other type (``jsonb``, ``bytea``, a composite) is refused: read
as text it would select some forms of OIDs and silently miss others."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import psycopg
from psycopg import sql

from pgblobdump.errors import NotFound, UsageError
from pgblobdump.pg.lostream import Selection
from pgblobdump.refs import values

_COLUMN = """
WITH RECURSIVE chain(typ, arr, n) AS (
    SELECT a.atttypid, false, 0 FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = {rel} AND a.attnum = {num}
  UNION ALL
    SELECT CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.typelem END,
           c.arr OR t.typtype <> 'd', c.n + 1
    FROM chain c JOIN pg_catalog.pg_type t ON t.oid = c.typ
    WHERE t.typtype = 'd' OR (NOT c.arr AND t.typcategory = 'A' AND t.typelem <> 0)
)
SELECT CASE WHEN t.typnamespace = 'pg_catalog'::pg_catalog.regnamespace
            THEN t.typname::text END, c.arr,
       (SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = {rel} AND a.attnum = {num})
FROM chain c JOIN pg_catalog.pg_type t ON t.oid = c.typ ORDER BY c.n DESC LIMIT 1
"""
"""A column's type down to what its values are: domains followed to their base type, an
array's element type (and its domains) with ``arr`` true; the name of that built-in type
(NULL for any other), and the column's type as ``\\d`` shows it."""

Reading = Callable[[sql.Composable], sql.Composable]


def _text(v: sql.Composable) -> sql.Composable:
    return values.text_sql(sql.SQL("({})::pg_catalog.text").format(v))


READINGS: dict[str, Reading] = {
    "oid": lambda v: sql.SQL("({})::pg_catalog.oid").format(v),
    "int2": lambda v: values.int_sql(v, 32),
    "int4": lambda v: values.int_sql(v, 32),
    "int8": lambda v: values.int_sql(v, 64),
    "numeric": values.numeric_sql,
    "text": _text,
    "varchar": _text,
    "bpchar": _text,
}
"""How a value of each built-in type (a domain's base, an array's element) names an OID:
an ``oid`` expression, NULL for a value that names none."""

READABLE = "oid, lo, int2, int4, int8, numeric, text, varchar, char, domains and arrays of them"
"""The types ``--referenced-by`` reads, as messages and docs say them."""


def resolve(conn: psycopg.Connection, sel: Selection) -> Selection:
    """``sel`` with each ``--referenced-by`` column's reading (``Selection.reads``), its
    type looked up once, before the run starts. NotFound for a table or column that does
    not exist (rather than the server's "relation does not exist" from the middle of the
    first COPY), UsageError for a column of a type that holds no OID in a form we read."""
    reads = [_read(conn, table, col) for table, col in sel.referenced_by]
    return dataclasses.replace(sel, reads=tuple(reads))


def _read(conn: psycopg.Connection, table: str, col: str) -> str:
    named = f"--referenced-by {table}.{col}"
    ident = sql.Identifier(*table.split("."))
    row = conn.execute(
        sql.SQL("SELECT c.oid::int8, a.attnum FROM pg_catalog.pg_class c"
                " LEFT JOIN pg_catalog.pg_attribute a"
                " ON a.attrelid = c.oid AND a.attname = {} AND a.attnum > 0"
                " AND NOT a.attisdropped WHERE c.oid = pg_catalog.to_regclass({})").format(
            sql.Literal(col), sql.Literal(ident.as_string(conn))
        )
    ).fetchone()  # fmt: skip
    if row is None:
        raise NotFound(f"no table {table} (from {named})")
    if row[1] is None:
        raise NotFound(f"no column {table}.{col} (from {named})")
    kind = conn.execute(
        sql.SQL(_COLUMN).format(rel=sql.Literal(row[0]), num=sql.Literal(row[1]))
    ).fetchone()
    assert kind is not None
    base, array, shown = kind
    reading = READINGS.get(base) if base is not None else None
    if reading is None:
        raise UsageError(
            f"{named}: a column of type {shown} holds no LO reference in a form it reads"
            f" ({READABLE}); name a view's column that extracts the OIDs"
        )
    c = sql.Identifier(col)
    if array:
        query = sql.SQL(
            "SELECT {r} AS o FROM {t} pgbd_t, pg_catalog.unnest(pgbd_t.{c}::{e}[]) pgbd_u"
        ).format(r=reading(sql.SQL("pgbd_u")), t=ident, c=c, e=sql.Identifier("pg_catalog", base))
    else:
        query = sql.SQL("SELECT {r} AS o FROM {t} pgbd_t").format(
            r=reading(sql.SQL("pgbd_t.{}").format(c)), t=ident
        )
    # a value that names no LO reads as NULL: left out, so that no NULL reaches the IN
    return sql.SQL("SELECT o FROM ({}) pgbd_r WHERE o IS NOT NULL").format(query).as_string(conn)
