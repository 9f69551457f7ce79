"""The dump's reader (pg/lostream.py) turned into the items restore's writer takes
(packed/read/reader.py's WholeLos and LoPiece), in memory: what copy and sync stream from the
source into the target, by OID range or (sync's scattered changes) by OID list.

Holes stay holes, as through a dump and a restore: the reader gives an LO's holes as
zeros (``lo_get`` and the pages path both do), and runs of whole zero pages are left
out of the pieces handed on (packed/format/holes.py finds them, as the dump's packer does), so
restore's writer leaves those pages missing on the target (packed/restore/sparse.py for an LO
up to 1 MiB, ``Batch.write_at`` range by range for a larger one). An LO over the
reader's 1 MiB comes in 1 MiB ranges, its size known first: none is ever held whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import psycopg

from pgblobdump.packed.format.holes import runs
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.read.items import Item, LoPiece, WholeLos
from pgblobdump.packed.write.packer import SMALL_HOLE_PAGES
from pgblobdump.pg.lostream import WINDOW, LoRun, MetaTuple, Selection, Side, iter_los
from pgblobdump.pgconstants import LOBLKSIZE


class _Metas:
    """One Meta object per distinct (owner, ACL, comment): restore's batches compare and
    hash them, and a million equal ones cost one."""

    def __init__(self) -> None:
        self.known: dict[MetaTuple, Meta] = {}

    def __call__(self, t: MetaTuple) -> Meta:
        m = self.known.get(t)
        if m is None:
            if len(self.known) > 100_000:  # bound memory: all distinct, a cache is no use
                self.known.clear()
            m = self.known[t] = Meta(*t)
        return m


def items(conn: psycopg.Connection, sel: Selection, side: Side | None = None) -> Iterator[Item]:
    """The LOs of ``sel`` as restore's items, read by the dump's reader under the
    transaction open on ``conn`` (``side``: a second connection in the same snapshot, for
    the rest of an LO over the reader's range on the lo_get path). Checksums are 0: no
    archive stands between the two."""
    meta = _Metas()
    for row in iter_los(conn, sel, side):
        if isinstance(row, LoRun):
            yield from _run(row, meta)
        else:
            yield from pieces(row.oid, meta((row.owner, row.acl, row.comment)), row.size,
                              row.chunks, 0)  # fmt: skip


def _run(row: LoRun, meta: _Metas) -> Iterator[Item]:
    """A run of LOs of at most 1 MiB each: the dense ones as WholeLos (views of the run's
    bytes, no copy), each one with holes as pieces of its own."""
    view = memoryview(row.data)
    oids: list[int] = []
    metas: list[Meta] = []
    datas: list[bytes | memoryview] = []
    at = 0
    for oid, t, size in zip(row.oids, row.metas, row.sizes, strict=True):
        data = view[at : at + size]
        at += size
        # a zero page starts with a zero: most LOs are past this test in a few 100 ns
        if size > SMALL_HOLE_PAGES * LOBLKSIZE and 0 in data[::LOBLKSIZE].tobytes():
            keep = runs(data.tobytes(), 0, size, SMALL_HOLE_PAGES)
            if keep != [(0, size)]:
                if oids:
                    yield WholeLos(oids, metas, datas, [0] * len(oids))
                    oids, metas, datas = [], [], []
                yield from _split(oid, meta(t), size, data, 0, keep, True)
                continue
        oids.append(oid)
        metas.append(meta(t))
        datas.append(data)
    if oids:
        yield WholeLos(oids, metas, datas, [0] * len(oids))


def pieces(
    oid: int, m: Meta, size: int, chunks: Iterable[bytes], min_pages: int
) -> Iterator[LoPiece]:
    """LO ``oid`` of ``size`` bytes, given as ``chunks`` from offset 0 (each a multiple of
    LOBLKSIZE long but the last), as restore's pieces: its runs of whole zero pages that
    save ``min_pages`` pages left out (``holes.runs``), each piece a view of its chunk.
    Opened at offset 0 and closed at its size by pieces with no bytes where it starts or
    ends in a hole, as an archive gives them (docs/format.md, "Holes")."""
    offset = 0
    for chunk in chunks:
        start = offset
        offset += len(chunk)
        if offset > size:
            raise psycopg.DataError(f"LO {oid} grew while it was read")
        final = offset == size
        keep = runs(chunk, start, size if final else None, min_pages)
        yield from _split(oid, m, size, memoryview(chunk), start, keep, final)
    if offset != size:
        raise psycopg.DataError(f"LO {oid}: {offset:,} bytes read, {size:,} announced")


def _split(
    oid: int, m: Meta, size: int, data: memoryview, start: int, keep: list[tuple[int, int]],
    final: bool,
) -> Iterator[LoPiece]:  # fmt: skip
    """The ``keep`` ranges of ``data`` (the LO's bytes from ``start``) as pieces: opened
    at 0 when the LO starts in a hole, closed at its size when ``final`` and it ends in
    one."""
    if start == 0 and (not keep or keep[0][0] > 0):
        yield LoPiece(oid, m, size, 0, b"", False)
    for i, (b, e) in enumerate(keep):
        last = final and i == len(keep) - 1 and start + e == size
        yield LoPiece(oid, m, size, start + b, data[b:e], last)
    if final and (not keep or start + keep[-1][1] < size):
        yield LoPiece(oid, m, size, size, b"", True)


LISTED = WINDOW
"""OIDs per selection when LOs are read by OID list (sync's scattered changes)."""


def listed_items(conn: psycopg.Connection, oids: list[int], side: Side | None = None
                 ) -> Iterator[Item]:  # fmt: skip
    """The LOs ``oids`` (ascending) as items: the dump's reader given the OIDs themselves
    (``Selection.only``, as an incremental dump reads its changed LOs), so that a few
    changed LOs scattered among many cost their own bytes only, and one of any size
    comes in ranges. (They were selected already: a --referenced-by selection's rows
    are not read again.)"""
    for i in range(0, len(oids), LISTED):
        chunk = tuple(oids[i : i + LISTED])
        yield from items(conn, Selection(chunk[0], chunk[-1], only=chunk), side)
