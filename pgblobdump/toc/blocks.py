"""The data blocks of a custom-format archive (pg_backup_custom.c), and where they are.

Each block starts with _readBlockHeader's type byte (BLK_DATA 1, BLK_BLOBS 3) and Int
dump id. A BLK_DATA block is chunks of ``[Int length][bytes]`` ended by length 0
(_skipData); a BLK_BLOBS block repeats ``Int oid`` + such chunks until oid 0 (_skipLOs).

``block_index`` lists every block in file order (a pipe-written archive has no positions
to go by, so the list is a walk). A walk over the LO data (toc.lo) already passes every
BLOBS block, the bulk of an LO archive: it records where each one ends in a BlockIndex,
and ``block_index`` given that index seeks past those blocks instead of reading their
million chunk lengths a second time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from pgblobdump.errors import CorruptArchive
from pgblobdump.toc.primitives import Reader
from pgblobdump.toc.reader import Archive

BLK_DATA = 1
"""A table's (or other entry's) data block."""
BLK_BLOBS = 3
"""A BLOBS entry's block: the data of a group of large objects."""


@dataclass(frozen=True, slots=True)
class Block:
    """One data block: its type, its entry's dump id, its first byte and where it ends."""

    kind: int
    dump_id: int
    start: int
    end: int


@dataclass
class BlockIndex:
    """The blocks of one archive met so far, by first byte (recorded by an LO walk), and
    the dump ids of the entries whose TOC Offset says they have a block (None: unknown)."""

    by_start: dict[int, Block] = field(default_factory=dict)
    expected: set[int] | None = None

    def record(self, kind: int, dump_id: int, start: int, end: int) -> None:
        self.by_start[start] = Block(kind, dump_id, start, end)


def block_header(r: Reader) -> tuple[int, int]:
    """_readBlockHeader: (type, dump id)."""
    kind = r.read_byte("a data block header")
    dump_id = r.read_int("a data block header")
    return kind, dump_id


def skip_data_block(r: Reader) -> None:
    """_skipData: chunks until a zero length."""
    while True:
        n = r.read_int("a data chunk length")
        if n == 0:
            return
        if n < 0:
            raise CorruptArchive(f"{r.name}: negative chunk length at byte {r.offset - 5}")
        r.skip(n, "a data chunk")


def _skip_blobs_block(r: Reader) -> None:
    """_skipLOs: per LO an Int oid and its chunks, until oid 0."""
    while r.read_int("a large object's OID") != 0:
        skip_data_block(r)


def block_index(archive: Archive, known: BlockIndex | None = None) -> Iterator[Block]:
    """Every data block of a custom archive, in file order from the end of the TOC; the
    blocks ``known`` holds (an LO walk's) are passed over by their recorded end. When
    ``known`` says which blocks the TOC expects, the listing ends once it has met them:
    what follows is not data (``pg_dump -Fc > FILE`` leaves the TOC it rewrites with the
    blocks' positions after the last block; pg_restore never reads that far)."""
    met = known.by_start if known is not None else {}
    left = set(known.expected) if known is not None and known.expected is not None else None
    with archive.toc_path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = archive.header
        r = Reader(f, archive.name, h.int_size, h.off_size, size)
        r.seek(archive.data_start())
        while not r.at_eof() and (left is None or left):
            start = r.offset
            block = met.get(start)
            if block is not None:
                r.seek(block.end)
                if left is not None:
                    left.discard(block.dump_id)
                yield block
                continue
            kind, dump_id = block_header(r)
            if kind == BLK_DATA:
                skip_data_block(r)
            elif kind == BLK_BLOBS:
                _skip_blobs_block(r)
            else:
                raise CorruptArchive(
                    f"{archive.name}: unrecognized data block type {kind} at byte {start}"
                )
            if left is not None:
                left.discard(dump_id)
            yield Block(kind, dump_id, start, r.offset)
