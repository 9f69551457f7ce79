"""The metadata of a dump's LOs, a window at a time, read in bulk: one statement and one
row per window, its OIDs and owners as two binary ``oid[]`` parsed at C speed, and only
the exceptions (LOs with an ACL, LOs with a comment) as JSON; owners' names are asked
once per owner.

The former window (grouped server-side by owner, ACL and comment, with a comment probe
per LO) cost the server 40-60 ms per 20,000 LOs and the client a sort of per-LO pairs;
this one costs an index range scan of ``pg_largeobject_metadata``, an index range scan of
``pg_description`` over the window's OIDs, and on the client one list per window.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import select
import struct
import sys
from array import array
from collections.abc import Iterator
from typing import NamedTuple

import psycopg
from psycopg import pq, sql

from pgblobdump.pg.copyout import WAIT

MetaTuple = tuple["str | None", "tuple[str, ...] | None", "str | None"]
"""(owner, ACL items, comment) of an LO."""

_WINDOW = """
WITH w AS MATERIALIZED (
  SELECT array_agg(m.oid ORDER BY m.oid) AS oids, array_agg(m.lomowner ORDER BY m.oid) AS owners,
         json_agg(json_build_array(m.oid::int8, pg_catalog.array_to_json(m.lomacl::text[])))
           FILTER (WHERE m.lomacl IS NOT NULL) AS acls,
         max(m.oid) AS last
  FROM (SELECT m.oid, m.lomowner, m.lomacl FROM pg_catalog.pg_largeobject_metadata m
        WHERE {cond} AND m.oid >= {start}::int8::oid AND m.oid <= {last}::int8::oid
        ORDER BY m.oid LIMIT {n}) m)
SELECT w.oids, w.owners, w.acls::text,
       (SELECT json_agg(json_build_array(d.objoid::int8, d.description))::text
        FROM pg_catalog.pg_description d
        WHERE d.classoid = 'pg_catalog.pg_largeobject'::regclass AND d.objsubid = 0
          AND d.objoid >= {start}::int8::oid AND d.objoid <= w.last{only}),
       {paged}
FROM w
"""
"""A window of at most ``n`` selected LOs from ``start``, in one pass of the metadata's
index: OIDs and owner OIDs in OID order (NULL: no LO left), the ACLs that are set; the
comments in the window's OID range (of LOs not selected too: the caller skips those);
and with ``_PAGED``, whether any page of ``pg_largeobject`` lies in that range (one index
probe: the first page at or after ``start``)."""
_PAGED = """COALESCE((SELECT p.loid FROM pg_catalog.pg_largeobject p
                     WHERE p.loid >= {start}::int8::oid ORDER BY p.loid LIMIT 1) <= w.last,
                    false)"""
_NAMES = "SELECT o, pg_catalog.pg_get_userbyid(o::oid) FROM unnest(%s::int8[]) o"
"""The names of owner OIDs (``unknown (OID=n)`` for a dropped role, as everywhere)."""

_LEN = struct.Struct(">i")
_ARRAY_HEAD = 20
"""A one-dimensional binary array's head: dimensions, has-nulls, element type, length,
lower bound (int32 each); then per element its length (4 for an oid) and value."""


def _fields(row: memoryview) -> list[memoryview | None]:
    """A binary COPY row's fields (None: NULL)."""
    out: list[memoryview | None] = []
    at = 2
    for _ in range(int.from_bytes(row[:2], "big")):
        (n,) = _LEN.unpack_from(row, at)
        at += 4
        if n < 0:
            out.append(None)
        else:
            out.append(row[at : at + n])
            at += n
    return out


def _oids(data: memoryview) -> list[int]:
    """A binary ``oid[]`` (no NULLs) as a list, at C speed."""
    a = array("I")
    a.frombytes(data[_ARRAY_HEAD:])
    if sys.byteorder == "little":
        a.byteswap()
    return a[1::2].tolist()


class Window(NamedTuple):
    """Consecutive selected LOs: their OIDs and metadata tuples (LOs with the same
    metadata share one tuple: a packer keys them by identity), and whether a page of
    ``pg_largeobject`` lies between the first and the last (None: not asked)."""

    oids: list[int]
    metas: list[MetaTuple]
    paged: bool | None


def _send(conn: psycopg.Connection, query: sql.Composable) -> None:
    """Send ``query`` (results in binary) without waiting for its result."""
    pg = conn.pgconn
    pg.send_query_params(query.as_bytes(conn), None, result_format=pq.Format.BINARY)
    while pg.flush():  # a non-blocking connection: 1 while some is left to send
        select.select([pg.socket], [pg.socket], [], WAIT)
        pg.consume_input()


def _receive(conn: psycopg.Connection) -> list[bytes | None]:
    """The one row of the statement ``_send`` sent (the server's error raised as
    psycopg raises it)."""
    pg = conn.pgconn
    results = []
    while True:
        pg.consume_input()
        while pg.is_busy():
            select.select([pg.socket], [], [], WAIT)
            pg.consume_input()
        res = pg.get_result()
        if res is None:
            break
        results.append(res)
    if not results:
        raise psycopg.OperationalError("no result from the server")
    res = results[0]
    if res.status != pq.ExecStatus.TUPLES_OK:
        raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
    if res.ntuples != 1:
        raise psycopg.DataError(f"{res.ntuples} rows for a window of LOs")
    return [res.get_value(0, i) for i in range(res.nfields)]


def _learn(conn: psycopg.Connection, owners: list[int], plain: dict[int, MetaTuple]) -> None:
    for o, name in conn.execute(_NAMES, (owners,)).fetchall():
        plain[int(o)] = (name, None, None)


def windows(
    conn: psycopg.Connection, cond: sql.Composable, first: int, last: int, size: int,
    pages: bool = False, only: sql.Composable | None = None,
) -> Iterator[Window]:  # fmt: skip
    """The LOs from ``first`` to ``last`` selected by ``cond`` (on ``m.oid``), ``size``
    at a time, in OID order; ``pages``: ask whether each window has pages (for a role
    that may read ``pg_largeobject``: a window without any is all empty LOs). ``only``
    (`` AND d.objoid = ANY(...)``): the comments of a list's LOs alone are read, not
    those of every LO between them."""
    start = first
    plain: dict[int, MetaTuple] = {}  # owner OID -> (its name, None, None)

    def query(start: int) -> sql.Composable:
        lit = sql.Literal(start)
        return sql.SQL(_WINDOW).format(
            cond=cond, start=lit, last=sql.Literal(last), n=sql.Literal(size),
            only=only if only is not None else sql.SQL(""),
            paged=sql.SQL(_PAGED).format(start=lit) if pages else sql.SQL("NULL::bool"),
        )  # fmt: skip

    sent = False  # the next window's statement is on its way
    try:
        while start <= last:
            if not sent:
                _send(conn, query(start))
            sent = False
            f_oids, f_owners, f_acls, f_comments, f_paged = _receive(conn)
            if f_oids is None or f_owners is None:
                return
            window = _window(conn, f_oids, f_owners, f_acls, f_comments, plain)
            window = window._replace(paged=None if f_paged is None else f_paged != b"\x00")
            start = window.oids[-1] + 1
            if window.paged is False and start <= last:
                # A window of empties needs the connection no more: the server reads
                # the next window while this one is packed.
                _send(conn, query(start))
                sent = True
            yield window
    finally:
        if sent:  # the consumer stopped early: the connection is left idle
            with contextlib.suppress(psycopg.Error):
                _receive(conn)


def _window(
    conn: psycopg.Connection, f_oids: bytes, f_owners: bytes, f_acls: bytes | None,
    f_comments: bytes | None, plain: dict[int, MetaTuple],
) -> Window:  # fmt: skip
    """A window's fields parsed (``plain``: the owners' plain metadata, learnt as met)."""
    oids = _oids(memoryview(f_oids))
    owners = _oids(memoryview(f_owners))
    if len(owners) != len(oids):
        raise psycopg.DataError(f"{len(oids)} OIDs, {len(owners)} owners")
    if owners.count(owners[0]) == len(owners):
        if owners[0] not in plain:
            _learn(conn, [owners[0]], plain)
        metas: list[MetaTuple] = [plain[owners[0]]] * len(oids)
    else:
        new = set(owners).difference(plain)
        if new:
            _learn(conn, sorted(new), plain)
        metas = list(map(plain.__getitem__, owners))
    odd: dict[int, list[object]] = {}
    for oid, acl in json.loads(bytes(f_acls)) if f_acls is not None else ():
        odd[oid] = [tuple(acl), None]
    for oid, comment in json.loads(bytes(f_comments)) if f_comments is not None else ():
        odd.setdefault(oid, [None, None])[1] = comment
    if odd:
        shared: dict[MetaTuple, MetaTuple] = {}
        for oid, (acl, comment) in odd.items():
            i = bisect.bisect_left(oids, oid)
            if i == len(oids) or oids[i] != oid:
                continue  # the comment of an LO in the range but not selected
            t = (metas[i][0], acl, comment)
            metas[i] = shared.setdefault(t, t)  # type: ignore[arg-type]
    return Window(oids, metas, None)
