"""Every LO of an OID range with its metadata and bytes, in OID order, set-based, under
one snapshot: what a dump reads.

Two paths, both one or two binary COPYs per range, never a round trip per LO:
- a role that may read ``pg_largeobject`` (superusers): the metadata COPY merged with
  ``COPY pg_largeobject`` (its 2 KB pages in order), the fastest the server offers and
  with no size limit;
- any other role: one COPY of metadata and ``lo_get(oid)``. An LO over 1 GB cannot pass
  through a bytea ("large object read request is too large"); the range is then read
  again LO by LO, in 64 MiB ranges.
"""

from __future__ import annotations

import itertools
import json
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import psycopg
from psycopg import sql

from pgblobdump.errors import NotFound
from pgblobdump.pg import catalog
from pgblobdump.pg.lo import PUT_CHUNK, read_chunks
from pgblobdump.spool import Gather, Spooled

LOBLKSIZE = 2048
"""Bytes per pg_largeobject page (BLCKSZ / 4 in a default build)."""


@dataclass(frozen=True)
class LoRow:
    """One LO: OID, owner role, ACL items (None: default), comment, and its bytes as
    chunks: a list for LOs up to SPILL bytes, else a Spooled file read once."""

    oid: int
    owner: str | None
    acl: tuple[str, ...] | None
    comment: str | None
    size: int
    chunks: list[bytes] | Spooled


@dataclass(frozen=True)
class Selection:
    """Which LOs: an OID range and/or those referenced by table columns (``(table,
    column)``, the table possibly schema-qualified, as the user wrote it)."""

    first: int = 0
    last: int = 2**32 - 1
    referenced_by: tuple[tuple[str, str], ...] = ()

    def where(self, oid: sql.Composable) -> sql.Composable:
        """A condition on ``oid`` selecting these LOs."""
        cond: sql.Composable = sql.SQL("{} BETWEEN {}::int8::oid AND {}::int8::oid").format(
            oid, sql.Literal(self.first), sql.Literal(self.last)
        )
        if self.referenced_by:
            refs = sql.SQL(" UNION ").join(
                sql.SQL("SELECT {}::oid FROM {}").format(
                    sql.Identifier(col), sql.Identifier(*table.split("."))
                )
                for table, col in self.referenced_by
            )
            cond = sql.SQL("{} AND {} IN ({})").format(cond, oid, refs)
        return cond


def check_references(conn: psycopg.Connection, sel: Selection) -> None:
    """NotFound (``no table X`` / ``no column X.Y``, as migrate says it) for a table or
    column of ``sel.referenced_by`` that does not exist: before the dump starts, rather
    than the server's "relation does not exist" from the middle of its first COPY."""
    for table, col in sel.referenced_by:
        ident = sql.Identifier(*table.split("."))
        row = conn.execute(
            sql.SQL("SELECT c.oid::int8, a.attnum FROM pg_class c LEFT JOIN pg_attribute a"
                    " ON a.attrelid = c.oid AND a.attname = {} AND a.attnum > 0"
                    " AND NOT a.attisdropped WHERE c.oid = to_regclass({})").format(
                sql.Literal(col), sql.Literal(ident.as_string(conn))
            )
        ).fetchone()  # fmt: skip
        if row is None:
            raise NotFound(f"no table {table} (from --referenced-by {table}.{col})")
        if row[1] is None:
            raise NotFound(f"no column {table}.{col} (from --referenced-by {table}.{col})")


MetaTuple = tuple["str | None", "tuple[str, ...] | None", "str | None"]
"""(owner, ACL items, comment) of an LO."""

WINDOW = 20_000
"""LOs whose metadata is read (and held) at once: bounds memory whatever the range."""

_META = """
SELECT m.oid::int8, pg_get_userbyid(m.lomowner), m.lomacl::text[], d.description{data}
FROM pg_catalog.pg_largeobject_metadata m
{comment_join}
WHERE {cond}
ORDER BY m.oid
"""


def _copy_rows(
    conn: psycopg.Connection, query: sql.Composable, types: list[str]
) -> Iterator[tuple[Any, ...]]:
    copy_sql = sql.SQL("COPY ({}) TO STDOUT (FORMAT binary)").format(query)
    with conn.cursor().copy(copy_sql) as copy:
        copy.set_types(types)
        yield from copy.rows()


def _acl(v: Any) -> tuple[str, ...] | None:
    return tuple(v) if v is not None else None


_WINDOW_END = """
SELECT m.oid::int8 FROM pg_catalog.pg_largeobject_metadata m
WHERE {cond} AND m.oid >= {start}::int8::oid
ORDER BY m.oid OFFSET {skip} LIMIT 1
"""
_WINDOW_GROUPS = """
SELECT pg_get_userbyid(w.owner), w.acl, w.comment, array_agg(w.oid ORDER BY w.oid)
FROM (SELECT m.oid::int8 AS oid, m.lomowner AS owner,
             array_to_json(m.lomacl::text[])::text AS acl, d.description AS comment
      FROM pg_catalog.pg_largeobject_metadata m
      {comment_join}
      WHERE {cond} AND m.oid BETWEEN {start}::int8::oid AND {end}::int8::oid) w
GROUP BY w.owner, 2, 3
"""


class EmptyRun(NamedTuple):
    """Consecutive selected LOs (in OID order) that hold no bytes, with their metadata
    (owner, ACL, comment) tuples: a dump packs them in bulk."""

    oids: list[int]
    metas: list[MetaTuple]


def _windows(conn: psycopg.Connection, sel: Selection) -> Iterator[list[tuple[int, MetaTuple]]]:
    """The selection's (OID, metadata) pairs, WINDOW LOs at a time, in OID order.

    The server groups each window by metadata and sends one array of OIDs per distinct
    value: a few rows instead of one per LO (a row costs psycopg about 10 us to receive,
    an OID in an int8[] a few dozen ns).
    """
    start = sel.first
    cond = sel.where(sql.SQL("m.oid"))
    while start <= sel.last:
        # The window's last OID first (an index scan), then the window by range: with
        # ORDER BY ... LIMIT over the join, a table without statistics (right after a bulk
        # load) was read and sorted whole for every window.
        # Without statistics the planner still picks a bitmap scan and a sort of every
        # OID after ``start``; the index alone gives them in order.
        conn.execute("SET LOCAL enable_bitmapscan = off")
        conn.execute("SET LOCAL enable_sort = off")
        row = conn.execute(
            sql.SQL(_WINDOW_END).format(
                cond=cond, start=sql.Literal(start), skip=sql.Literal(WINDOW - 1)
            )
        ).fetchone()
        conn.execute("SET LOCAL enable_bitmapscan TO DEFAULT")
        conn.execute("SET LOCAL enable_sort TO DEFAULT")
        end = int(row[0]) if row else sel.last
        query = sql.SQL(_WINDOW_GROUPS).format(
            cond=cond, start=sql.Literal(start), end=sql.Literal(end),
            comment_join=sql.SQL(catalog.COMMENT_JOIN),
        )  # fmt: skip
        pairs: list[tuple[int, MetaTuple]] = []
        with conn.cursor(binary=True) as cur:
            for owner, acl, comment, oids in cur.execute(query):
                meta = (owner, tuple(json.loads(acl)) if acl is not None else None, comment)
                pairs.extend(zip(oids, itertools.repeat(meta)))
        if not pairs:
            return
        pairs.sort(key=operator.itemgetter(0))
        yield pairs
        start = end + 1


def iter_los(conn: psycopg.Connection, sel: Selection) -> Iterator[LoRow | EmptyRun]:
    """The selected LOs in OID order (see the module's docstring for how). Run it inside
    the transaction whose snapshot the dump uses."""
    if catalog.pages_readable(conn):
        yield from _by_pages(conn, sel)
        return
    done = sel.first - 1
    query = sql.SQL(
        _META.format(data=", lo_get(m.oid)", cond="{cond}", comment_join=catalog.COMMENT_JOIN)
    ).format(cond=sel.where(sql.SQL("m.oid")))
    try:
        with conn.transaction():  # a savepoint: the error below must not end the snapshot
            for oid, owner, acl, comment, data in _copy_rows(
                conn, query, ["int8", "text", "text[]", "text", "bytea"]
            ):
                blob = bytes(data)
                done = int(oid)
                yield LoRow(done, owner, _acl(acl), comment, len(blob), [blob])
        return
    except psycopg.Error as e:
        if "too large" not in str(e):
            raise
    # An LO over 1 GB: the rest of the range LO by LO, each in ranges.
    for window in _windows(conn, Selection(done + 1, sel.last, sel.referenced_by)):
        for oid, (owner, acl, comment) in window:
            lo = Gather()
            for chunk in read_chunks(conn, oid, PUT_CHUNK):
                lo.add(chunk)
            yield LoRow(oid, owner, acl, comment, lo.size, lo.result())


def _by_pages(conn: psycopg.Connection, sel: Selection) -> Iterator[LoRow | EmptyRun]:
    """A window of metadata, then the pages of that window's OID range streaming past it:
    one connection runs one COPY at a time, so the two cannot be read side by side."""
    for window in _windows(conn, sel):
        pages_sql = sql.SQL(
            "SELECT loid::int8, pageno, data FROM pg_catalog.pg_largeobject"
            " WHERE loid BETWEEN {}::int8::oid AND {}::int8::oid"
            # the column, not the int8 output of the same name: the index gives its order
            " ORDER BY pg_largeobject.loid, pageno"
        ).format(sql.Literal(window[0][0]), sql.Literal(window[-1][0]))
        pages = _copy_rows(conn, pages_sql, ["int8", "int4", "bytea"])
        page = next(pages, None)
        run = EmptyRun([], [])
        for oid, meta in window:
            while page is not None and page[0] < oid:  # a page of an LO not selected
                page = next(pages, None)
            if page is None or page[0] != oid:
                run.oids.append(oid)
                run.metas.append(meta)
                continue
            if run.oids:
                yield run
                run = EmptyRun([], [])
            lo = Gather()
            while page is not None and page[0] == oid:
                at = page[1] * LOBLKSIZE
                if at > lo.size:  # a hole (written past the end)
                    lo.zeros(at - lo.size)
                lo.add(bytes(page[2]))
                page = next(pages, None)
            yield LoRow(oid, *meta, lo.size, lo.result())
        if run.oids:
            yield run
        for _rest in pages:  # drain: the COPY must end before the next statement
            pass
