"""One worker's share of a packed archive: LOs in OID order packed into frames (their
directory, bytes and holes), handed to a sink, and the index records they make.

``ArchiveWriter.worker()`` (packed/write/writer.py) gives one ``LoPacker`` per worker."""

from __future__ import annotations

import collections
import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash
import zstandard

from pgblobdump.packed.format.frames import encode
from pgblobdump.packed.format.holes import runs
from pgblobdump.packed.format.index import Meta, MetaTable, fixed_records
from pgblobdump.packed.format.indexbuild import IndexBuilder, SortingIndexBuilder
from pgblobdump.packed.format.spec import (
    FRAME_TARGET,
    PIECE_MAX,
    PIECE_RECORD,
    ZSTD_LEVEL,
    FrameKind,
)
from pgblobdump.packed.write.background import FrameThread
from pgblobdump.packed.write.sink import FrameSink
from pgblobdump.pgconstants import LOBLKSIZE

EMPTY_CHECKSUM = xxhash.xxh3_64_intdigest(b"")
FRAME_RECORDS_MAX = 16384
"""Pieces per frame at most (a frame of empty LOs is all directory: 576 KiB)."""
SMALL_HOLE_PAGES = 1
"""Pages a hole must save for an LO of up to PIECE_MAX bytes to be written with it: 1,
every whole zero page is a hole. Restore writes such an LO in its batches, set-based
(packed/restore/sparse.py), at the cost of a dense one (benchmarks/sparse.py); it was 64 while
each was a transaction of its own (4-10 ms). A larger LO leaves out every hole anyway."""
_EMPTY_PIECE = PIECE_RECORD.pack(0, 0, 0, 0, 0, EMPTY_CHECKSUM)
_RUN = -1
"""The size field of a pending entry that stands for a run of empty LOs."""


@dataclass
class Totals:
    """LOs and bytes packed (by one worker, or summed)."""

    los: int = 0
    bytes: int = 0


def _pieces(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """``chunks`` of any sizes (2 KB pages, 64 MiB ranges) regrouped into PIECE_MAX bytes."""
    buf = bytearray()
    for chunk in chunks:
        view = memoryview(chunk)
        while len(view):
            take = PIECE_MAX - len(buf)
            buf += view[:take]
            view = view[take:]
            if len(buf) == PIECE_MAX:
                yield bytes(buf)
                buf.clear()
    if buf:
        yield bytes(buf)


class LoPacker:
    """One worker's LOs, added in ascending OID order, into frames and index records."""

    def __init__(
        self,
        sink: FrameSink,
        metas: MetaTable,
        level: int = ZSTD_LEVEL,
        ordered: bool = True,
        background: bool = False,
    ) -> None:
        """``ordered`` False: LOs come in any OID order (pack of a pg_dump archive); the
        index sorts its records, and readers of the volumes must not assume OID order.
        ``background``: frames are encoded and written on a thread of their own
        (``packed/write/background.py``); only for a sink no other worker writes to."""
        self.sink = sink
        self.metas = metas
        self.ordered = ordered
        self.index = IndexBuilder() if ordered else SortingIndexBuilder()
        self.totals = Totals()
        self._cctx = zstandard.ZstdCompressor(level=level) if level > 0 else None
        self._dir = bytearray()
        self._records = 0
        self._data: list[bytes | memoryview] = []
        self._bytes = 0
        self._seq = 0  # the open frame's number
        # LOs not yet indexed, in OID order: the frame holding their first piece is not
        # written yet, or (a large LO) their checksum is not known yet (None).
        # [oid, meta, size, checksum, frame number]
        self._pending: collections.deque[list[Any]] = collections.deque()
        self._where: dict[int, tuple[int, int]] = {}
        self._last_oid = -1
        self._thread = FrameThread(sink, metas, self._cctx) if background else None

    def add(self, oid: int, meta: Meta, data: bytes) -> None:
        """An LO whose bytes are at hand (anything up to 1 GB)."""
        if oid <= self._last_oid and self.ordered:
            raise ValueError(f"LOs out of order: {oid} after {self._last_oid}")
        size = len(data)
        if size > PIECE_MAX:
            self.add_chunks(oid, meta, size, (data,))
            return
        self._last_oid = oid
        meta_id = self.metas.id(meta)
        checksum = xxhash.xxh3_64_intdigest(data)
        # a zero page starts with a zero: most LOs are past this test in a few 100 ns
        if size > SMALL_HOLE_PAGES * LOBLKSIZE and 0 in data[::LOBLKSIZE]:
            keep = runs(data, 0, size, SMALL_HOLE_PAGES)
            if keep != [(0, size)]:
                self._add_sparse(oid, meta_id, data, checksum, keep)
                return
        if self._records and (
            self._bytes + size > FRAME_TARGET or self._records >= FRAME_RECORDS_MAX
        ):
            self._flush()
        self._dir += PIECE_RECORD.pack(oid, meta_id, size, 0, size, checksum)
        self._records += 1
        if size:
            self._data.append(data)
            self._bytes += size
        self._pending.append([oid, meta_id, size, checksum, self._seq])
        self.totals.los += 1
        self.totals.bytes += size

    def _add_sparse(
        self, oid: int, meta_id: int, data: bytes, checksum: int, keep: list[tuple[int, int]]
    ) -> None:
        """A small LO with holes, in the open frame (or the next): its ``keep`` ranges
        as pieces, opened at offset 0 and closed at its size by pieces with no bytes
        where it starts or ends in a hole (docs/format.md, "Holes")."""
        size = len(data)
        pack = PIECE_RECORD.pack
        records = len(keep) + (not keep or keep[0][0] > 0) + (not keep or keep[-1][1] < size)
        kept = sum(e - b for b, e in keep)
        if self._records and (
            self._bytes + kept > FRAME_TARGET or self._records + records > FRAME_RECORDS_MAX
        ):
            self._flush()
        if not keep or keep[0][0] > 0:
            self._dir += pack(oid, meta_id, size, 0, 0, 0)
        view = memoryview(data)
        for b, e in keep:
            self._dir += pack(oid, meta_id, size, b, e - b, checksum if e == size else 0)
            self._data.append(view[b:e])
        if not keep or keep[-1][1] < size:
            self._dir += pack(oid, meta_id, size, size, 0, checksum)
        self._records += records
        self._bytes += kept
        self._pending.append([oid, meta_id, size, checksum, self._seq])
        self.totals.los += 1
        self.totals.bytes += size

    def add_empties(self, oids: Sequence[int], metas: Sequence[tuple[Any, ...]]) -> None:
        """Empty LOs in bulk (ascending OIDs; each meta an (owner, acl, comment) tuple):
        the common case of a million seed-style LOs. Their directory and index records
        are built a frame at a time at C speed (``index.fixed_records``), one pending
        entry per frame: no Python work per LO but its metadata id."""
        if not oids:
            return
        if oids[0] <= self._last_oid:
            raise ValueError(f"LOs out of order: {oids[0]} after {self._last_oid}")
        if not all(map(operator.lt, oids, itertools.islice(oids, 1, None))):
            bad = next(i for i in range(1, len(oids)) if oids[i] <= oids[i - 1])
            raise ValueError(f"LOs out of order: {oids[bad]} after {oids[bad - 1]}")
        # a window's metas are a few shared tuples: one id each (in order of first
        # appearance), mapped at C speed
        if metas and metas.count(metas[0]) == len(metas):  # the seed's case: one value
            mids = [self.metas.id(metas[0])] * len(metas)
        else:
            firsts = dict(zip(map(id, metas), metas, strict=True))
            ids = {i: self.metas.id(m) for i, m in firsts.items()}
            mids = list(map(ids.__getitem__, map(id, metas)))
        if len(mids) != len(oids):
            raise ValueError(f"{len(oids)} OIDs, {len(mids)} metadata values")
        i, n = 0, len(oids)
        while i < n:
            if self._records >= FRAME_RECORDS_MAX:
                self._flush()
            k = min(n - i, FRAME_RECORDS_MAX - self._records)
            run_oids, run_mids = oids[i : i + k], mids[i : i + k]
            self._dir += fixed_records(_EMPTY_PIECE, run_oids, run_mids)
            self._records += k
            self._pending.append([run_oids[0], run_mids, _RUN, run_oids, self._seq])
            i += k
        self._last_oid = oids[-1]
        self.totals.los += n

    def add_run(
        self,
        oids: Sequence[int],
        metas: Sequence[tuple[Any, ...]],
        sizes: Sequence[int],
        data: bytes | bytearray,
    ) -> None:
        """LOs of at most PIECE_MAX bytes each (ascending OIDs; each meta an (owner, acl,
        comment) tuple), their bytes one after the other in ``data``: what ``add`` does
        for each, without an object or a copy per LO (a dump reads them so, a window's
        run at a time). ``data`` must not change until the packer is finished with it."""
        if not data:
            self.add_empties(oids, metas)
            return
        if oids and oids[0] <= self._last_oid and self.ordered:
            raise ValueError(f"LOs out of order: {oids[0]} after {self._last_oid}")
        view = memoryview(data)
        meta_id, pack, digest = self.metas.id, PIECE_RECORD.pack, xxhash.xxh3_64_intdigest
        pending = self._pending
        last_meta: object = None
        mid = at = 0
        sparse_los = sparse_bytes = 0
        prev = self._last_oid
        for oid, meta, size in zip(oids, metas, sizes, strict=True):
            if oid <= prev and self.ordered:
                raise ValueError(f"LOs out of order: {oid} after {prev}")
            if size > PIECE_MAX:
                raise ValueError(f"LO {oid}: {size:,} bytes in a run (at most {PIECE_MAX:,})")
            prev = oid
            if meta is not last_meta:
                mid, last_meta = meta_id(meta), meta
            if self._records and (
                self._bytes + size > FRAME_TARGET or self._records >= FRAME_RECORDS_MAX
            ):
                self._flush()
            if size:
                piece = view[at : at + size]
                at += size
                checksum = digest(piece)
                # holes, as ``add`` finds them (a zero page starts with a zero)
                if size > SMALL_HOLE_PAGES * LOBLKSIZE and 0 in piece[::LOBLKSIZE].tobytes():
                    whole = piece.tobytes()
                    keep = runs(whole, 0, size, SMALL_HOLE_PAGES)
                    if keep != [(0, size)]:
                        self._add_sparse(oid, mid, whole, checksum, keep)  # counts it
                        sparse_los += 1
                        sparse_bytes += size
                        continue
                self._data.append(piece)
                self._bytes += size
            else:
                checksum = EMPTY_CHECKSUM
            self._dir += pack(oid, mid, size, 0, size, checksum)
            self._records += 1
            pending.append([oid, mid, size, checksum, self._seq])
        if at != len(data):
            raise ValueError(f"a run of {len(data):,} bytes whose sizes add up to {at:,}")
        self._last_oid = prev
        self.totals.los += len(oids) - sparse_los
        self.totals.bytes += at - sparse_bytes

    def add_chunks(self, oid: int, meta: Meta, size: int, chunks: Iterable[bytes]) -> None:
        """An LO of ``size`` bytes given in chunks of any size: a large LO read in ranges.
        It starts a frame of its own and takes one frame per PIECE_MAX bytes, consecutive
        ones even when workers share a stream."""
        with self.sink.exclusive():
            self._add_chunks(oid, meta, size, chunks)

    def _add_chunks(self, oid: int, meta: Meta, size: int, chunks: Iterable[bytes]) -> None:
        """An LO of ``size`` bytes given in chunks of any size: a large LO read in ranges.
        It starts a frame of its own and takes one frame per PIECE_MAX bytes."""
        if oid <= self._last_oid and self.ordered:
            raise ValueError(f"LOs out of order: {oid} after {self._last_oid}")
        self._last_oid = oid
        meta_id = self.metas.id(meta)
        self._flush()
        entry: list[Any] = [oid, meta_id, size, None, self._seq]
        self._pending.append(entry)
        h = xxhash.xxh3_64()
        pack = PIECE_RECORD.pack
        offset = 0
        for part in _pieces(chunks):
            h.update(part)
            start = offset
            offset += len(part)
            if offset > size:
                raise ValueError(f"LO {oid}: more than the {size:,} bytes announced")
            final = offset == size
            last = h.intdigest() if final else 0
            # Holes (docs/format.md): the part's ranges of non-zero pages only; a frame
            # holds at most FRAME_TARGET bytes of them (one whole part, if none).
            keep = runs(part, start, size if final else None, 0)
            if start == 0 and (not keep or keep[0][0] > 0):
                self._dir += pack(oid, meta_id, size, 0, 0, 0)  # opens it: a hole follows
                self._records += 1
            kept = sum(e - b for b, e in keep)
            if self._records and (
                self._bytes + kept > FRAME_TARGET
                or self._records + len(keep) + 1 > FRAME_RECORDS_MAX
            ):
                self._flush()
            for b, e in keep:
                piece = part if e - b == len(part) else memoryview(part)[b:e]
                end = last if final and start + e == size else 0
                self._dir += pack(oid, meta_id, size, start + b, e - b, end)
                self._data.append(piece)
            self._records += len(keep)
            self._bytes += kept
            if final and (not keep or start + keep[-1][1] < size):
                self._dir += pack(oid, meta_id, size, size, 0, last)  # closes a tail hole
                self._records += 1
        if offset != size:
            raise ValueError(f"LO {oid}: {offset:,} bytes given, {size:,} announced")
        if size == 0:
            self._dir += PIECE_RECORD.pack(oid, meta_id, 0, 0, 0, h.intdigest())
            self._records += 1
        entry[3] = h.intdigest()
        self._flush()
        self._index_ready()
        self.totals.los += 1
        self.totals.bytes += size

    def _flush(self) -> None:
        if not self._records:
            return
        if self._thread is not None:
            self._thread.put(self._seq, self._data, bytes(self._dir), self._records)
            self._where.update(self._thread.done())
        else:
            frame = encode(FrameKind.DATA, b"".join(self._data), bytes(self._dir),
                           self._records, self._cctx)  # fmt: skip
            self.sink.publish(self.metas)
            self._where[self._seq] = self.sink.write(frame)
        self._seq += 1
        self._dir = bytearray()
        self._records = 0
        self._data = []
        self._bytes = 0
        self._index_ready()

    def _index_ready(self) -> None:
        """Index the LOs whose first frame is written; forget positions no longer needed."""
        where, pending, add = self._where, self._pending, self.index.add
        while pending and pending[0][4] in where and pending[0][3] is not None:
            oid, meta, size, checksum, seq = pending.popleft()
            volume, offset = where[seq]
            if size == _RUN:  # a frame's empty LOs: OIDs in [3], metadata ids in [1]
                self.index.add_run(checksum, meta, 0, volume, offset, EMPTY_CHECKSUM)
            else:
                add(oid, meta, size, volume, offset, checksum)
        keep = pending[0][4] if pending else self._seq
        for seq in [s for s in where if s < keep]:
            del where[seq]

    def finish(self) -> None:
        self._flush()
        if self._thread is not None:
            self._thread.close()
            self._where.update(self._thread.done())
            self._index_ready()
        assert not self._pending

    def cancel(self) -> None:
        """Stop writing (a failed dump): frames not written yet are dropped."""
        if self._thread is not None:
            self._thread.cancel()
