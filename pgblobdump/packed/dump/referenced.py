"""``--referenced-by`` columns (dump, copy, sync) read by their type, each value as
``refs/values.py`` reads it: an ``oid`` (``lo``) as it is; ``int2``/``int4`` as
``oid::int4`` stores an OID (a negative one is the OID + 2^32); ``int8`` and ``numeric``
as they are; ``text``, ``varchar``, ``char`` when the value is an OID's digits or an OID
leading a file name (``16385.png``, pg-lo-storage's FileField). Domains over these and
arrays of them (unnested) too. A value of none of these forms (inline text in a mixed
column, an ``int8`` outside 1..2^32-1) names no LO: its row selects nothing, and is no
error. A column of any other type (``jsonb``, ``bytea``, a composite) is refused: read
as text it would select some forms of OIDs and silently miss others. The type's
resolution is refs/coltype.py's, shared with ``restore --remap``'s rewrite."""

from __future__ import annotations

import dataclasses

import psycopg
from psycopg import sql

from pgblobdump.pg.lostream import Selection
from pgblobdump.refs import coltype


def resolve(conn: psycopg.Connection, sel: Selection) -> Selection:
    """``sel`` with each ``--referenced-by`` column's reading (``Selection.reads``), its
    type looked up once, before the run starts. NotFound for a table or column that does
    not exist (rather than the server's "relation does not exist" from the middle of the
    first COPY), UsageError for a column of a type that holds no OID in a form we read."""
    reads = [_read(conn, table, col) for table, col in sel.referenced_by]
    return dataclasses.replace(sel, reads=tuple(reads))


def _read(conn: psycopg.Connection, table: str, col: str) -> str:
    named = f"--referenced-by {table}.{col}"
    relid, attnum = coltype.find(conn, table, col, named)
    kind = coltype.column_type(conn, relid, attnum, named)
    reading = coltype.READINGS[kind.base]
    ident = sql.Identifier(*table.split("."))
    c = sql.Identifier(col)
    if kind.array:
        query = sql.SQL(
            "SELECT {r} AS o FROM {t} pgbd_t, pg_catalog.unnest(pgbd_t.{c}::{e}[]) pgbd_u"
        ).format(
            r=reading(sql.SQL("pgbd_u")), t=ident, c=c, e=sql.Identifier("pg_catalog", kind.base)
        )
    else:
        query = sql.SQL("SELECT {r} AS o FROM {t} pgbd_t").format(
            r=reading(sql.SQL("pgbd_t.{}").format(c)), t=ident
        )
    # a value that names no LO reads as NULL: left out, so that no NULL reaches the IN
    # OFFSET 0: the reading evaluated once a value, not once more for the WHERE
    return (
        sql.SQL("SELECT o FROM ({} OFFSET 0) pgbd_r WHERE o IS NOT NULL")
        .format(query)
        .as_string(conn)
    )
