"""LO data in a custom archive: the BLK_BLOBS data blocks (pg_backup_custom.c).

Each BLOBS entry has one block: ``Int oid`` + chunks per LO until oid 0 (_LoadLOs /
_skipLOs), walked by blockwalk. When the TOC has the blocks' positions (K_OFFSET_POS_SET)
we seek to each; a dump written to a pipe has no positions, so blocks are read one after
another from the end of the TOC. Each LO is its own compression stream.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from functools import partial

from pgblobdump.errors import CorruptArchive
from pgblobdump.toc.blocks import BLK_BLOBS, BLK_DATA, BlockIndex, block_header, skip_data_block
from pgblobdump.toc.compression import Stream
from pgblobdump.toc.lo.blockwalk import read_chunks, walk_data, walk_sizes
from pgblobdump.toc.lo.catalog import BlobsEntry, blobs_entries
from pgblobdump.toc.lo.data import LoData, SizeRun, nothing
from pgblobdump.toc.primitives import K_OFFSET_NO_DATA, K_OFFSET_POS_SET, Reader
from pgblobdump.toc.reader import Archive


def blocks(
    archive: Archive, known: list[BlobsEntry] | None, index: BlockIndex | None = None
) -> Iterator[tuple[Reader, int, int | None]]:
    """(reader, BLOBS dump id, limit) per LO data block, the reader at the block's first
    LO; the caller walks the block (to its end) before asking for the next one. ``limit``
    is where the block must end (the next block's start), None when unknown. Each block
    walked to its end (and each data block skipped) is recorded in ``index``."""
    found = blobs_entries(archive) if known is None else known
    entries = [e for e in found if e.data_state != K_OFFSET_NO_DATA]
    if not entries:
        return
    with archive.toc_path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = archive.header
        r = Reader(f, archive.name, h.int_size, h.off_size, size)
        if all(e.data_state == K_OFFSET_POS_SET for e in entries):
            # A block ends before the next one starts: data running past it is damage.
            starts = sorted({e.data_offset for e in entries if e.data_offset < size})
            for e in entries:
                limit = next((s for s in starts if s > e.data_offset), size)
                r.seek(e.data_offset)
                kind, dump_id = block_header(r)
                if kind != BLK_BLOBS or dump_id != e.dump_id:
                    raise CorruptArchive(
                        f"{archive.name}: found block type {kind} of entry {dump_id} at byte"
                        f" {e.data_offset}, expected the large objects of entry {e.dump_id}"
                    )
                yield r, e.dump_id, limit
                if index is not None:
                    index.record(kind, dump_id, e.data_offset, r.offset)
            return
        # No positions (written to a pipe): read every block in file order.
        r.seek(archive.data_start())
        wanted = {e.dump_id for e in entries}
        while wanted and not r.at_eof():
            start = r.offset
            kind, dump_id = block_header(r)
            if kind == BLK_BLOBS:
                wanted.discard(dump_id)
                yield r, dump_id, None
            elif kind == BLK_DATA:
                skip_data_block(r)
            else:
                raise CorruptArchive(
                    f"{archive.name}: unrecognized data block type {kind} at byte {r.offset - 6}"
                )
            if index is not None:
                index.record(kind, dump_id, start, r.offset)


def size_runs(
    archive: Archive, known: list[BlobsEntry] | None
) -> Iterator[tuple[int, int, int] | SizeRun]:
    """(oid, stored size, BLOBS dump id) per LO, or a SizeRun, without reading LO bytes."""
    for r, blobs_id, limit in blocks(archive, known):
        yield from walk_sizes(r, blobs_id, runs=True, limit=limit)


def data(
    archive: Archive, known: list[BlobsEntry] | None, index: BlockIndex | None = None
) -> Iterator[LoData]:
    """Every LO of the BLOBS blocks with its stored size, its bytes read when asked for."""
    algorithm = archive.header.compression
    name = archive.name
    step = 0  # which LO the walk is at: a LoData reads from the file only while current

    def pieces(r: Reader, oid: int, at: int, mine: int) -> Iterator[bytes]:
        if step != mine:
            raise RuntimeError(f"large object {oid}: data asked for after the walk moved on")
        what = f"large object {oid}"
        r.seek(at)
        d = Stream(algorithm, name, oid)
        for data, offset in read_chunks(r, what):
            if step != mine:
                raise RuntimeError(f"large object {oid}: read after the walk moved on")
            if piece := d.feed(data, offset):
                yield piece
        if piece := d.finish():
            yield piece

    empty = _EmptyStreams(algorithm, name)
    for r, blobs_id, limit in blocks(archive, known, index):
        for oid, size, stored in walk_data(r, blobs_id, limit):
            step += 1
            read: Callable[[], Iterator[bytes]]
            if stored is None:
                read = partial(pieces, r, oid, r.offset, step)
            elif stored in empty:
                read = nothing
            else:
                read = partial(empty.decode, oid, stored, r.offset - len(stored) - 5)
            yield LoData(oid, size, blobs_id, None, read)


class _EmptyStreams:
    """The stored forms that decode to no bytes (no chunk at all; gzip's 8-byte empty
    stream, LZ4's and zstd's empty frames), learnt as they are decoded: a million empty
    LOs then cost no decompressor each."""

    def __init__(self, algorithm: str, name: str) -> None:
        self.algorithm = algorithm
        self.name = name
        self.known: set[bytes] = {b""}

    def __contains__(self, stored: bytes) -> bool:
        return stored in self.known

    def decode(self, oid: int, stored: bytes, at: int) -> Iterator[bytes]:
        """The bytes of one LO stored as the single chunk ``stored`` at byte ``at``."""
        d = Stream(self.algorithm, self.name, oid)
        head = d.feed(stored, at)
        tail = d.finish()
        if not head and not tail and len(stored) <= 64 and len(self.known) < 16:
            self.known.add(stored)
        if head:
            yield head
        if tail:
            yield tail
