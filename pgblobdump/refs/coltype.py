"""A reference column's type, down to what its values are: the one resolution that
``--referenced-by`` (packed/dump/referenced.py) and ``restore --remap``'s rewrite
(refs/rewrite.py) share, so that a column one reads is a column the other writes.

Domains are followed to their base type; an array's element type (and its domains) too,
with ``array`` set. The base must be one of the built-in types ``refs/values.py`` reads
(``READINGS``); a column of any other type (``jsonb``, ``bytea``, a composite) is refused:
read as text it would select some forms of OIDs and silently miss others."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import NotFound, UsageError
from pgblobdump.refs import values
from pgblobdump.refs.catalog import regclass_text

_CHAIN = """
WITH RECURSIVE chain(typ, arr, mod, n) AS (
    SELECT a.atttypid, false, a.atttypmod, 0 FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = {rel} AND a.attnum = {num}
  UNION ALL
    SELECT CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.typelem END,
           c.arr OR t.typtype <> 'd',
           CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE c.mod END, c.n + 1
    FROM chain c JOIN pg_catalog.pg_type t ON t.oid = c.typ
    WHERE t.typtype = 'd' OR (NOT c.arr AND t.typcategory = 'A' AND t.typelem <> 0)
)
SELECT CASE WHEN t.typnamespace = 'pg_catalog'::pg_catalog.regnamespace
            THEN t.typname::text END, c.arr, c.mod,
       (SELECT pg_catalog.format_type(a.atttypid, a.atttypmod) FROM pg_catalog.pg_attribute a
        WHERE a.attrelid = {rel} AND a.attnum = {num})
FROM chain c JOIN pg_catalog.pg_type t ON t.oid = c.typ ORDER BY c.n DESC LIMIT 1
"""
"""A column's type down to what its values are: the name of that built-in type (NULL for
any other), whether an array was crossed, the type modifier of the base (a domain's own,
or the column's: ``varchar(10)`` is 14), and the column's type as ``\\d`` shows it."""

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
"""The types a reference column may have, as messages and docs say them."""


@dataclass(frozen=True)
class ColumnType:
    """What a column's values are: ``base`` a key of READINGS, ``array`` an array of it
    (or of a domain over it), ``typmod`` the base's type modifier (-1 for none), ``shown``
    the column's type as ``\\d`` says."""

    base: str
    array: bool
    typmod: int
    shown: str

    @property
    def length(self) -> int | None:
        """The most characters a ``varchar(n)``/``char(n)`` base holds (``n``), else None."""
        if self.base in ("varchar", "bpchar") and self.typmod >= 4:
            return self.typmod - 4
        return None

    @property
    def digits(self) -> int | None:
        """The most digits before the point a ``numeric(p, s)`` base holds (``p - s``),
        else None."""
        if self.base == "numeric" and self.typmod >= 4:
            mod = self.typmod - 4
            return ((mod >> 16) & 0xFFFF) - (mod & 0xFFFF)
        return None


def find(conn: psycopg.Connection, table: str, column: str, named: str) -> tuple[int, int]:
    """``(relid, attnum)`` of ``column`` of ``table`` (``[schema.]table`` as a user writes
    it); NotFound naming ``named`` (how messages name the origin) for either missing."""
    row = conn.execute(
        sql.SQL("SELECT c.oid::int8, a.attnum FROM pg_catalog.pg_class c"
                " LEFT JOIN pg_catalog.pg_attribute a"
                " ON a.attrelid = c.oid AND a.attname = {} AND a.attnum > 0"
                " AND NOT a.attisdropped WHERE c.oid = pg_catalog.to_regclass({})").format(
            sql.Literal(column), sql.Literal(regclass_text(table))
        )
    ).fetchone()  # fmt: skip
    if row is None:
        raise NotFound(f"no table {table} (from {named})")
    if row[1] is None:
        raise NotFound(f"no column {table}.{column} (from {named})")
    return int(row[0]), int(row[1])


def column_type(
    conn: psycopg.Connection,
    relid: int,
    attnum: int,
    named: str,
    hint: str = "; name a view's column that extracts the OIDs",
) -> ColumnType:
    """The type of column ``attnum`` of ``relid``, down to its base; UsageError naming
    ``named`` (and ending with ``hint``) when the base is no type whose values we read as
    OIDs."""
    row = conn.execute(
        sql.SQL(_CHAIN).format(rel=sql.Literal(relid), num=sql.Literal(attnum))
    ).fetchone()
    assert row is not None
    base, array, typmod, shown = row
    if base not in READINGS:
        raise UsageError(
            f"{named}: a column of type {shown} holds no LO reference in a form it reads"
            f" ({READABLE}){hint}"
        )
    return ColumnType(str(base), bool(array), int(typmod), str(shown))
