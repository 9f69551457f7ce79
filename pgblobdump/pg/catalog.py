"""Every question about LOs that the server's catalogs answer, asked one way: how many
there are (in all, in OID ranges, or selected), whether one exists, which of a set exist,
whether this role may read one or read the pages of all, and each LO's owner, ACL and
comment.

Names are schema-qualified (``pg_catalog.``) so a user's table or function of the same name
on the search path never answers instead.

- ``pg_largeobject_metadata``: one row per LO (OID, owner, ACL); readable by everyone.
- ``pg_largeobject``: the bytes, in pages of BLCKSZ / 4; readable only by superusers (or
  roles granted SELECT on it), so paths that read it check ``pages_readable`` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgblobdump.pg.query import one, scalar

if TYPE_CHECKING:  # lostream asks its questions here
    from pgblobdump.pg.lostream import Selection

METADATA = "pg_catalog.pg_largeobject_metadata"
PAGES = "pg_catalog.pg_largeobject"

LO_EXISTS = "EXISTS (SELECT 1 FROM pg_catalog.pg_largeobject_metadata m WHERE m.oid = {o})"
"""Whether LO ``{o}`` exists: an SQL template for ``sql.SQL(...).format(o=...)``."""

COMMENT_JOIN = (
    "LEFT JOIN pg_catalog.pg_description d ON d.classoid = 'pg_catalog.pg_largeobject'::regclass"
    " AND d.objoid = m.oid AND d.objsubid = 0"
)
"""Joins an LO's comment (``d.description``) to metadata row ``m``."""

READABLE = sql.SQL(
    "(current_setting('is_superuser') = 'on'"
    " OR current_setting('lo_compat_privileges') = 'on'"
    " OR pg_catalog.pg_has_role(m.lomowner, 'USAGE')"
    " OR EXISTS (SELECT 1 FROM pg_catalog.aclexplode(m.lomacl) x"
    " WHERE x.privilege_type = 'SELECT'"
    " AND (x.grantee = 0 OR pg_catalog.pg_has_role(x.grantee, 'USAGE'))))"
)
"""Whether the connected role may read LO ``m`` (a pg_largeobject_metadata row)."""


def lo_exists(name: str) -> str:
    """``LO_EXISTS`` for a plain name (a PL/pgSQL variable, a CTE column)."""
    return LO_EXISTS.replace("{o}", name)


def count(conn: psycopg.Connection, first: int | None = None, last: int | None = None) -> int:
    """How many LOs exist (with OIDs ``first..last`` when given)."""
    if first is None or last is None:
        return scalar(conn, f"SELECT count(*) FROM {METADATA}")
    return scalar(
        conn,
        f"SELECT count(*) FROM {METADATA} WHERE oid BETWEEN %s::int8::oid AND %s::int8::oid",
        (first, last),
    )


def count_in(conn: psycopg.Connection, ranges: Sequence[tuple[int, int]]) -> int:
    """How many LOs exist with OIDs in ``ranges`` (inclusive, not overlapping)."""
    if not ranges:
        return 0
    return scalar(
        conn,
        f"SELECT count(*) FROM unnest(%s::int8[], %s::int8[]) AS r(f, l) JOIN {METADATA} m"
        " ON m.oid BETWEEN r.f::oid AND r.l::oid",
        ([lo for lo, _ in ranges], [hi for _, hi in ranges]),
    )


def count_selected(conn: psycopg.Connection, sels: Sequence[Selection]) -> int:
    """How many LOs ``sels`` select, as the snapshot of ``conn``'s transaction sees them."""
    query = sql.SQL(f"SELECT count(*) FROM {METADATA} m WHERE {{}}")
    return sum(scalar(conn, query.format(s.where(sql.SQL("m.oid")))) for s in sels)


def overlapping(conn: psycopg.Connection, firsts: Sequence[int], lasts: Sequence[int]) -> list[int]:
    """Of OID ranges ``firsts[i]..lasts[i]``, the firsts of those that hold an LO,
    ascending: one statement, however many LOs."""
    rows = conn.execute(
        "SELECT r.f FROM unnest(%s::int8[], %s::int8[]) AS r(f, l) WHERE EXISTS (SELECT 1"
        f" FROM {METADATA} WHERE oid BETWEEN r.f::oid AND r.l::oid) ORDER BY 1",
        (list(firsts), list(lasts)),
    ).fetchall()
    return [int(r[0]) for r in rows]


def existing(conn: psycopg.Connection, oids: Sequence[int]) -> set[int]:
    """Which of ``oids`` name an LO."""
    rows = conn.execute(
        f"SELECT oid::int8 FROM {METADATA} WHERE oid = ANY(%s::int8[]::oid[])", (list(oids),)
    ).fetchall()
    return {int(r[0]) for r in rows}


def pages_readable(conn: psycopg.Connection) -> bool:
    """Whether this role may read ``pg_largeobject`` (every LO's bytes at once)."""
    row = conn.execute(
        "SELECT pg_catalog.has_table_privilege('pg_catalog.pg_largeobject', 'SELECT')"
    ).fetchone()
    return bool(row and row[0])


UNLINKABLE = sql.SQL(
    "(current_setting('is_superuser') = 'on'"
    " OR current_setting('lo_compat_privileges') = 'on'"
    " OR pg_catalog.pg_has_role(m.lomowner, 'USAGE'))"
)
"""Whether the connected role may unlink LO ``m``: its owner (or a member of the owner
role), a superuser, or anyone while ``lo_compat_privileges`` is on (as ``lo_unlink``
checks it)."""

SIZE_BUCKETS = (0, 1, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30)
"""Lower bounds of the size histogram's buckets: empty, up to 4 KiB, 64 KiB, 1 MiB,
16 MiB, 256 MiB, 1 GiB, and over."""


def lo_sizes_sql(into: str) -> sql.Composed:
    """One pass over ``pg_largeobject`` (superusers, or a role granted SELECT on it):
    ``into`` (a temporary table) gets one row per LO with pages: ``loid``, ``size`` (the
    last page's end: an LO's logical size), ``stored`` (bytes its pages hold) and
    ``pages``; an LO with fewer pages than its size needs is sparse. The page data is
    never detoasted: ``octet_length`` reads the stored length."""
    return sql.SQL(
        "CREATE TEMP TABLE {t} AS SELECT p.loid,"
        " max(p.pageno::int8 * (current_setting('block_size')::int8 / 4)"
        " + octet_length(p.data)) AS size, sum(octet_length(p.data))::int8 AS stored,"
        " count(*)::int8 AS pages, max(p.pageno)::int8 AS last_page"
        " FROM pg_catalog.pg_largeobject p GROUP BY p.loid"
    ).format(t=sql.Identifier(into))


def space(conn: psycopg.Connection) -> tuple[int, int]:
    """(bytes pg_largeobject takes on disk with its index, bytes of pg_largeobject_metadata
    with its index): sizes any role may ask for."""
    row = one(
        conn,
        "SELECT pg_catalog.pg_total_relation_size('pg_catalog.pg_largeobject'),"
        " pg_catalog.pg_total_relation_size('pg_catalog.pg_largeobject_metadata')",
    )
    return int(row[0]), int(row[1])
