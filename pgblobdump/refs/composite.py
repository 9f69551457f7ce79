"""OIDs inside composite types, ranges and arrays of them: read through their attributes.

A column of a composite type with an ``oid`` attribute (``(col).attr``), of an array of
one (``unnest``), of a range over ``oid`` (its bounds) or a multirange, or a domain over
any of these, holds typed references. ``extractor`` builds, from the catalogs, a query
of column ``o`` giving every OID a value holds, so such a column is read exactly instead
of being refused until a user names it.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import count

import psycopg
from psycopg import sql

Gen = Callable[[sql.Composable], sql.Composed]
"""A value expression -> a query of column ``o``: the OIDs the value holds."""

OID = 26
DEPTH = 8
"""Nesting followed at most (a type cannot contain itself; this bounds odd catalogs)."""

_TYPE = """
SELECT t.typtype::text, t.typcategory::text, t.typelem::int8, t.typbasetype::int8,
       t.typrelid::int8,
       (SELECT r.rngsubtype::int8 FROM pg_catalog.pg_range r WHERE r.rngtypid = t.oid),
       (SELECT r.rngtypid::int8 FROM pg_catalog.pg_range r WHERE r.rngmultitypid = t.oid)
FROM pg_catalog.pg_type t WHERE t.oid = %s
"""

_ATTRIBUTES = """
SELECT a.attname, a.atttypid::int8 FROM pg_catalog.pg_attribute a
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum
"""


def extractor(conn: psycopg.Connection, typ: int) -> Gen | None:
    """How to read the OIDs a value of type ``typ`` holds; None when it holds none."""
    names = count()
    return _gen(conn, typ, names, 0)


def _gen(conn: psycopg.Connection, typ: int, names: count[int], depth: int) -> Gen | None:
    if typ == OID:
        return lambda x: sql.SQL("SELECT ({})::pg_catalog.oid AS o").format(x)
    if depth > DEPTH:
        return None
    row = conn.execute(_TYPE, (typ,)).fetchone()
    if row is None:
        return None
    kind, category, elem, base, relid, subtype, rangetype = row
    if kind == "d":
        # a domain's value is used as its base type's (fields, unnest, bounds)
        return _gen(conn, int(base), names, depth + 1)
    if category == "A" and elem:
        inner = _gen(conn, int(elem), names, depth + 1)
        return None if inner is None else _unnest(inner, next(names))
    if kind == "c" and relid:
        parts = []
        for name, atttyp in conn.execute(_ATTRIBUTES, (relid,)).fetchall():
            g = _gen(conn, int(atttyp), names, depth + 1)
            if g is not None:
                parts.append(_attribute(g, str(name)))
        return _union(parts) if parts else None
    if kind == "r" and subtype is not None:
        inner = _gen(conn, int(subtype), names, depth + 1)
        return None if inner is None else _bounds(inner)
    if kind == "m" and rangetype is not None:
        inner = _gen(conn, int(rangetype), names, depth + 1)
        return None if inner is None else _unnest(inner, next(names))
    return None


def _unnest(inner: Gen, n: int) -> Gen:
    """An array (or multirange): each element's OIDs."""
    alias = sql.Identifier(f"pgbd_u{n}")
    sub = sql.Identifier(f"pgbd_s{n}")

    def gen(x: sql.Composable) -> sql.Composed:
        return sql.SQL(
            # unnest in a select list: a composite element stays one column
            "SELECT {s}.o FROM (SELECT pg_catalog.unnest({x}) AS e) {a}, LATERAL ({q}) {s}"
        ).format(s=sub, x=x, a=alias, q=inner(sql.SQL("{}.e").format(alias)))

    return gen


def _attribute(inner: Gen, name: str) -> Gen:
    return lambda x: inner(sql.SQL("({}).{}").format(x, sql.Identifier(name)))


def _bounds(inner: Gen) -> Gen:
    return lambda x: sql.SQL("{} UNION ALL {}").format(
        inner(sql.SQL("pg_catalog.lower({})").format(x)),
        inner(sql.SQL("pg_catalog.upper({})").format(x)),
    )


def _union(parts: list[Gen]) -> Gen:
    return lambda x: sql.SQL(" UNION ALL ").join(sql.SQL("({})").format(p(x)) for p in parts)
