"""Every LO of an OID range with its metadata and bytes, in OID order, set-based, under
one snapshot: what a dump reads.

The metadata comes a window of WINDOW LOs at a time (one statement each, ``pg/lometa.py``);
a window of empty LOs only (no page in its OID range) is handed on as it is; otherwise the
bytes of the window's LOs then stream past it in one binary COPY, read raw
(``pg/copyout.py``):
- a role that may read ``pg_largeobject`` (superusers): its 2 KB pages in order, the
  fastest the server offers. LOs over BIG bytes (pages past BIG / LOBLKSIZE) are found
  first by an index walk; the window's COPY stops short of each and the big LO is read
  alone in BIG ranges (``lo_get(oid, offset, BIG)``, a row each), its size known before
  its first byte, so it goes to the archive piece by piece: memory stays flat and
  nothing is spooled whatever its size (4 TB).
- any other role: ``lo_get(oid, 0, BIG)`` per LO, and the size (``lo_lseek64``) only of
  an LO that fills those BIG bytes; its remaining bytes are read in BIG ranges on a
  second connection sharing the snapshot (``side``), since this one is busy with the
  window's COPY. No row is larger than BIG, so no LO is ever held whole.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
import struct
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import psycopg
from psycopg import sql

from pgblobdump.pg import catalog, copyout, lometa
from pgblobdump.pgconstants import INV_READ, LOBLKSIZE, OID_MAX

BIG = 1 << 20
"""An LO over this many bytes is read in ranges of this size (a COPY row each), its size
known first: the archive's piece size (``packed.format.PIECE_MAX``), so each row is one
piece. Smaller LOs come whole in the window's COPY."""


@dataclass(frozen=True)
class LoRow:
    """One LO: OID, owner role, ACL items (None: default), comment, and its bytes as
    chunks: a list of one ``bytes`` for an LO up to BIG bytes; else an iterator of BIG
    ranges read from the server as it is consumed, which must be consumed (or dropped)
    before the next LO is asked for."""

    oid: int
    owner: str | None
    acl: tuple[str, ...] | None
    comment: str | None
    size: int
    chunks: list[bytes] | Iterator[bytes]


@dataclass(frozen=True)
class Selection:
    """Which LOs: an OID range and/or those referenced by table columns (``(table,
    column)``, the table possibly schema-qualified, as the user wrote it).

    A column's values are read by its type, in the forms ``refs/values.py`` gives (an
    OID's digits or ``<oid>.<ext>`` in a text, an ``int4`` as ``oid::int4`` stores it,
    ...): ``reads`` holds, per column of ``referenced_by`` in order, that reading as a
    query (SQL text) of the OIDs the column's values name, one row each. It is built
    where the columns are checked (``packed.referenced.resolve``: this layer sits below
    the reference model), and kept by ``part``; ``where`` refuses columns without it."""

    first: int = 0
    last: int = OID_MAX
    referenced_by: tuple[tuple[str, str], ...] = ()
    only: tuple[int, ...] | None = None
    """Only these OIDs of the range (an incremental dump's changed LOs, a window's worth)."""
    reads: tuple[str, ...] = ()

    def part(self, first: int, last: int, only: tuple[int, ...] | None = None) -> Selection:
        """This selection's LOs of ``first..last`` (and of ``only``): a worker's range, a
        window; its columns and their reads kept."""
        return dataclasses.replace(self, first=first, last=last, only=only)

    def where(self, oid: sql.Composable) -> sql.Composable:
        """A condition on ``oid`` selecting these LOs."""
        cond: sql.Composable = sql.SQL("{} BETWEEN {}::int8::oid AND {}::int8::oid").format(
            oid, sql.Literal(self.first), sql.Literal(self.last)
        )
        cond = sql.SQL("{}{}").format(cond, self.only_sql(oid))
        if self.referenced_by:
            if len(self.reads) != len(self.referenced_by):
                # a ``::oid`` cast instead would fail on a text column of file names
                raise ValueError("--referenced-by columns not read by their type (resolve)")
            refs = sql.SQL(" UNION ").join(sql.SQL(r) for r in self.reads)
            cond = sql.SQL("{} AND {} IN ({})").format(cond, oid, refs)
        return cond

    def only_sql(self, oid: sql.Composable) -> sql.Composable:
        """`` AND oid = ANY(...)`` for ``only`` (a literal array), or nothing."""
        if self.only is None:
            return sql.SQL("")
        array = "{" + ",".join(map(str, self.only)) + "}"
        return sql.SQL(" AND {} = ANY({}::int8[]::oid[])").format(oid, sql.Literal(array))


MetaTuple = lometa.MetaTuple

WINDOW = 20_000
"""LOs whose metadata is read (and held) at once: bounds memory whatever the range. (50,000
was tried: no faster here, and peak RSS grew by 10-20 MB.)"""


class LoRun(NamedTuple):
    """Consecutive selected LOs (in OID order) of at most BIG bytes each: their OIDs,
    metadata (owner, ACL, comment) tuples and sizes, and their bytes one after the other
    in ``data`` (an empty LO has size 0). A dump packs them in bulk, with no object and
    no copy per LO."""

    oids: list[int]
    metas: list[MetaTuple]
    sizes: list[int]
    data: bytes | bytearray


RUN_BYTES = 4 << 20
"""A run is handed on once its bytes pass this (memory stays flat)."""


Side = Callable[[], psycopg.Connection]
"""Gives a second connection in a transaction with the same snapshot (opened when first
needed: the lo_get path reads the rest of a big LO there while the window's COPY waits)."""


def iter_los(
    conn: psycopg.Connection, sel: Selection, side: Side | None = None
) -> Generator[LoRow | LoRun, None, None]:
    """The selected LOs in OID order (see the module's docstring for how). Run it inside
    the transaction whose snapshot the dump uses; ``side`` (needed only by a role that may
    not read ``pg_largeobject``, and only if an LO is over BIG bytes) shares it."""
    by_pages = catalog.pages_readable(conn)
    cond = sel.where(sql.SQL("m.oid"))
    # Without statistics the planner picks a bitmap scan and a sort of every OID after
    # the window's start; the index alone gives them in order. (The window's COPYs want
    # the same plans: they stay set for them, one statement.)
    in_index_order(conn)
    only = sel.only_sql(sql.SQL("d.objoid"))
    for oids, metas, paged in lometa.windows(conn, cond, sel.first, sel.last, WINDOW, by_pages,
                                             only):  # fmt: skip
        if paged is False:  # no page from the window's first OID to its last: all empty
            yield LoRun(oids, metas, [0] * len(oids), b"")
            continue
        in_index_order(conn)
        if by_pages:
            yield from _window_by_pages(conn, list(zip(oids, metas, strict=True)), sel)
        else:
            yield from _window_by_lo_get(conn, sel, oids, metas, side)


def read_ranges(conn: psycopg.Connection, oid: int, start: int, size: int) -> Iterator[bytes]:
    """Bytes ``start..size`` of LO ``oid`` in BIG ranges, one COPY row each (holes read
    as zeros, as ``lo_get`` gives them)."""
    if start >= size:
        return
    query = sql.SQL(
        "SELECT pg_catalog.lo_get({o}::int8::oid, r, {big}) FROM"
        " pg_catalog.generate_series({s}::int8, {end}::int8, {big}::int8) r"
    ).format(o=sql.Literal(oid), s=sql.Literal(start), end=sql.Literal(size - 1),
             big=sql.Literal(BIG))  # fmt: skip
    got = start
    for row in copyout.rows(conn, query):
        (n,) = _LEN.unpack_from(row, 2)
        got += n
        if n != min(BIG, size - (got - n)) or got > size:
            raise psycopg.DataError(f"LO {oid} changed size while it was read")
        yield bytes(row[6:])


class _Drained:
    """An LO's lazy chunks, drained after the consumer is done: the COPY they come from
    must end before the connection's next statement."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)

    def __iter__(self) -> Iterator[bytes]:
        return self._it

    def __next__(self) -> bytes:
        return next(self._it)

    def drain(self) -> None:
        for _ in self._it:
            pass


# -- the pages path ---------------------------------------------------------------------

_BIG_LOS = """
WITH RECURSIVE big(loid) AS (
  SELECT (SELECT p.loid FROM pg_catalog.pg_largeobject p
          WHERE p.loid BETWEEN {first}::int8::oid AND {last}::int8::oid AND p.pageno >= {pages}
          ORDER BY p.loid LIMIT 1)
  UNION ALL
  SELECT (SELECT p.loid FROM pg_catalog.pg_largeobject p
          WHERE p.loid > big.loid AND p.loid <= {last}::int8::oid AND p.pageno >= {pages}
          ORDER BY p.loid LIMIT 1)
  FROM big WHERE big.loid IS NOT NULL
)
SELECT big.loid::int8, l.pageno::int8 * {blk} + octet_length(l.data)
FROM big, LATERAL (SELECT p.pageno, p.data FROM pg_catalog.pg_largeobject p
                   WHERE p.loid = big.loid ORDER BY p.pageno DESC LIMIT 1) l
"""
"""The LOs of a range over BIG bytes (a page at BIG / LOBLKSIZE or later) and their
sizes, by index probes only: a walk over the range's index entries (each step skips to
the next such LO) and the last page of each; no big LO's pages are read."""

_LEN = struct.Struct(">i")
_SIZE = struct.Struct(">q")


def in_index_order(conn: psycopg.Connection) -> None:
    """Plan the next statements with index scans, not a bitmap scan and a sort: without
    statistics (after a bulk load, autovacuum off) the planner sorted each window's
    40,000 pages on disk (80 MB, half a second) before the COPY's first row, and a bitmap
    scan in ``_BIG_LOS`` would read every page of the range. Local to the transaction;
    ``_windows`` sets them for each window's statements."""
    conn.execute(
        "SELECT pg_catalog.set_config('enable_bitmapscan', 'off', true),"
        " pg_catalog.set_config('enable_sort', 'off', true)"
    )


_LISTED_BIG_LOS = """
SELECT o, l.pageno::int8 * {blk} + octet_length(l.data)
FROM pg_catalog.unnest({oids}::int8[]) o,
     LATERAL (SELECT p.pageno, p.data FROM pg_catalog.pg_largeobject p
              WHERE p.loid = o::oid ORDER BY p.pageno DESC LIMIT 1) l
WHERE l.pageno >= {pages}
"""
"""The same for the LOs of a list (``Selection.only``): the last page of each, one index
probe per LO, where the walk would read the index entries of every LO between them."""


def _big_sizes(
    conn: psycopg.Connection, first: int, last: int, listed: list[int] | None = None
) -> dict[int, int]:
    """The LOs over BIG bytes of ``first..last`` (of ``listed`` only, when given) and
    their sizes."""
    query = _BIG_LOS if listed is None else _LISTED_BIG_LOS
    array = "{" + ",".join(map(str, listed or ())) + "}"
    rows = conn.execute(
        sql.SQL(query).format(first=sql.Literal(first), last=sql.Literal(last),
                              oids=sql.Literal(array), pages=sql.Literal(BIG // LOBLKSIZE),
                              blk=sql.Literal(LOBLKSIZE))
    ).fetchall()  # fmt: skip
    return {int(o): int(n) for o, n in rows}


def _window_by_pages(
    conn: psycopg.Connection, window: list[tuple[int, MetaTuple]], sel: Selection
) -> Iterator[LoRow | LoRun]:
    """The window's pages, in COPYs cut at each LO over BIG bytes (read alone in ranges)."""
    listed = [o for o, _ in window] if sel.only is not None else None
    bigs = _big_sizes(conn, window[0][0], window[-1][0], listed)
    at = 0
    selected = {o for o, _ in window} if bigs else set()
    for oid in sorted(o for o in bigs if o in selected):
        end = at
        while window[end][0] != oid:
            end += 1
        if end > at:
            yield from _pages(conn, window[at:end], window[end - 1][0], sel)
        owner, acl, comment = window[end][1]
        chunks = _Drained(read_ranges(conn, oid, 0, bigs[oid]))
        yield LoRow(oid, owner, acl, comment, bigs[oid], chunks)
        chunks.drain()
        at = end + 1
    if at < len(window):
        yield from _pages(conn, window[at:], window[-1][0], sel)


_LO_PAGES = """
SELECT loid, string_agg(data, ''::bytea ORDER BY pageno),
       CASE WHEN count(*) = max(pageno) + 1
             AND count(*) FILTER (WHERE octet_length(data) < {blk}) = 0
            OR count(*) = max(pageno) + 1
             AND count(*) FILTER (WHERE octet_length(data) < {blk}) = 1
             AND max(pageno) FILTER (WHERE octet_length(data) < {blk}) = max(pageno)
       THEN NULL ELSE array_agg(pageno * {shift} + octet_length(data) ORDER BY pageno) END
FROM pg_catalog.pg_largeobject
WHERE loid BETWEEN {first}::int8::oid AND {last}::int8::oid AND pageno < {pages}{only}
GROUP BY loid
ORDER BY loid
"""
"""One row per LO of a range (none over BIG bytes): its pages joined in order, which are
its bytes when it is dense (pages 0..last all there, all full but the last); otherwise
also where each page goes (``pageno * shift + length``, in order), to put the holes
back. Half the rows of a COPY of the pages for 4 KiB LOs, an eighth at 16 KiB."""
_LO_PAGES_HEAD = struct.Struct(">hiIi")
"""An LO row's head: field count, (length, oid) loid, and the joined pages' length."""
_SHIFT = 4096
"""``pageno * _SHIFT + length`` in ``_LO_PAGES``: a page's length is at most LOBLKSIZE."""


def _pages(
    conn: psycopg.Connection, part: list[tuple[int, MetaTuple]], last: int, sel: Selection
) -> Iterator[LoRun]:
    """LOs of ``part`` (none over BIG bytes) merged with their bytes (one row each);
    with ``sel.only``, the pages of those LOs alone are read."""
    query = sql.SQL(_LO_PAGES).format(
        first=sql.Literal(part[0][0]), last=sql.Literal(last), blk=sql.Literal(LOBLKSIZE),
        pages=sql.Literal(BIG // LOBLKSIZE), shift=sql.Literal(_SHIFT),
        only=sel.only_sql(sql.SQL("loid")),
    )  # fmt: skip
    unpack = _LO_PAGES_HEAD.unpack_from
    run = LoRun([], [], [], bytearray())
    buf = run.data
    assert isinstance(buf, bytearray)
    metas = iter(part)
    oid, meta = next(metas)
    for row in itertools.chain.from_iterable(copyout.batches(conn, query)):
        _, _, loid, n = unpack(row)
        if loid != oid:
            if loid < oid:
                continue  # an LO not selected
            while True:  # LOs before ``loid`` have no pages: empty
                run.oids.append(oid)
                run.metas.append(meta)
                run.sizes.append(0)
                nxt = next(metas, None)
                if nxt is None:
                    oid = 2**32  # the rest are LOs not selected
                    break
                oid, meta = nxt
                if oid >= loid:
                    break
            if loid != oid:
                continue
        start = len(buf)
        if row[14 + n : 18 + n] == _NULL:  # dense: the joined pages are its bytes
            buf += row[14 : 14 + n]
        else:
            _holes(buf, row[14 : 14 + n], row[14 + n :])
        run.oids.append(oid)
        run.metas.append(meta)
        run.sizes.append(len(buf) - start)
        if len(buf) >= RUN_BYTES:
            yield run
            run = LoRun([], [], [], bytearray())
            buf = run.data
            assert isinstance(buf, bytearray)
        nxt = next(metas, None)
        oid, meta = nxt if nxt is not None else (2**32, meta)
    if oid < 2**32:
        rest = [(oid, meta), *metas]  # LOs after the last one with pages: empty, in bulk
        run.oids.extend(map(operator.itemgetter(0), rest))
        run.metas.extend(map(operator.itemgetter(1), rest))
        run.sizes.extend(itertools.repeat(0, len(rest)))
    if run.oids:
        yield run


_NULL = b"\xff\xff\xff\xff"
"""A NULL field's length in a binary COPY row."""
_ARRAY_HEAD = struct.Struct(">iiIii")
"""A one-dimensional int4[] in binary: dimensions, has-nulls flag, element type, length,
lower bound; then per element its length (4) and value."""


def _holes(buf: bytearray, joined: memoryview, places: memoryview) -> None:
    """An LO with holes or short pages into ``buf``: each page at ``pageno * LOBLKSIZE``,
    zeros where no page is (as lo_get reads them). ``places`` is the row's array field
    (its length first)."""
    _ndim, _nulls, _type, count, _lb = _ARRAY_HEAD.unpack_from(places, 4)
    values = struct.unpack_from(f">{2 * count}i", places, 4 + _ARRAY_HEAD.size)[1::2]
    start = len(buf)
    at = 0
    for v in values:
        pageno, length = divmod(v, _SHIFT)
        to = start + pageno * LOBLKSIZE
        if to > len(buf):
            buf += bytes(to - len(buf))
        buf += joined[at : at + length]
        at += length


# -- the lo_get path --------------------------------------------------------------------

_LO_GET = """
SELECT s.oid, s.d, CASE WHEN octet_length(s.d) = {big} THEN
  (SELECT pg_catalog.lo_lseek64(f.fd, 0, 2) + 0 * pg_catalog.lo_close(f.fd)
   FROM (SELECT pg_catalog.lo_open(s.oid, {mode}) AS fd OFFSET 0) f) END
FROM (SELECT m.oid, pg_catalog.lo_get(m.oid, 0, {big}) AS d
      FROM pg_catalog.pg_largeobject_metadata m
      WHERE {cond} AND m.oid BETWEEN {first}::int8::oid AND {last}::int8::oid
      ORDER BY m.oid OFFSET 0) s
WHERE octet_length(s.d) > 0
"""
"""Each LO's first BIG bytes, and the size of those that fill them (their descriptor
closed in the same row: ``lo_close`` is evaluated after ``lo_lseek64``); no row for an
empty LO (the window's LOs between two rows are empty, handed on in bulk)."""
_LO_GET_HEAD = struct.Struct(">hiIi")
"""A lo_get row's head: field count, (length, oid) oid, and the bytes' length."""


def _window_by_lo_get(
    conn: psycopg.Connection, sel: Selection, oids: list[int], metas: list[MetaTuple],
    side: Side | None,
) -> Iterator[LoRow | LoRun]:  # fmt: skip
    query = sql.SQL(_LO_GET).format(
        big=sql.Literal(BIG), mode=sql.Literal(INV_READ), cond=sel.where(sql.SQL("m.oid")),
        first=sql.Literal(oids[0]), last=sql.Literal(oids[-1]),
    )  # fmt: skip
    rows = copyout.rows(conn, query)
    unpack = _LO_GET_HEAD.unpack_from
    run = LoRun([], [], [], bytearray())
    buf = run.data
    assert isinstance(buf, bytearray)
    at = 0  # the window's first LO not handed on yet
    try:
        for row in rows:
            _, _, oid, n = unpack(row)
            i = bisect.bisect_left(oids, oid, at)
            if i == len(oids) or oids[i] != oid:
                raise psycopg.DataError(f"LO {oid} from the server is not in the window")
            if i > at:  # empty LOs before it
                run.oids.extend(oids[at:i])
                run.metas.extend(metas[at:i])
                run.sizes.extend(itertools.repeat(0, i - at))
            meta, at = metas[i], i + 1
            (flag,) = _LEN.unpack_from(row, 14 + n)
            size = n if flag < 0 else _SIZE.unpack_from(row, 18 + n)[0]  # NULL: under BIG
            if size == n:
                run.oids.append(oid)
                run.metas.append(meta)
                run.sizes.append(n)
                buf += row[14 : 14 + n]
                if len(buf) >= RUN_BYTES:
                    yield run
                    run = LoRun([], [], [], bytearray())
                    buf = run.data
                    assert isinstance(buf, bytearray)
                continue
            if run.oids:
                yield run
                run = LoRun([], [], [], bytearray())
                buf = run.data
                assert isinstance(buf, bytearray)
            if side is None:
                raise ValueError(f"LO {oid} is over {BIG:,} bytes: needs a side connection")
            first = bytes(row[14 : 14 + n])
            chunks = _Drained(itertools.chain([first], read_ranges(side(), oid, n, size)))
            yield LoRow(oid, *meta, size, chunks)
            chunks.drain()
        if at < len(oids):  # empty LOs after the last one with bytes
            run.oids.extend(oids[at:])
            run.metas.extend(metas[at:])
            run.sizes.extend(itertools.repeat(0, len(oids) - at))
        if run.oids:
            yield run
    finally:
        rows.close()
