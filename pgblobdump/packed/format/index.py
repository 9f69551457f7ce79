"""The index: every LO by OID in compressed blocks of fixed-width records, the metadata
table, and a footer to find a block without reading the others. Its records and metadata,
and the index read (``Index``); packed/format/indexbuild.py writes it (each worker's
records in OID order, so the workers' blocks concatenate in range order).
"""

from __future__ import annotations

import array
import bisect
import json
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import xxhash
import zstandard

from pgblobdump.errors import CorruptArchive, UnsupportedArchive
from pgblobdump.packed.format.indexcheck import DAMAGED
from pgblobdump.packed.format.manifest import IndexTail
from pgblobdump.packed.format.spec import (
    BLOCK_ENTRY,
    CHAIN_VOLUME,
    INDEX_FOOTER,
    INDEX_MAGIC,
    INDEX_RECORD,
    ZSTD_LEVEL,
    version_problem,
)
from pgblobdump.pgconstants import OID_MAX


@dataclass(frozen=True)
class IndexRecord:
    """One LO: where its first piece's frame is, and what it should hash to."""

    oid: int
    meta: int
    size: int
    volume: int
    offset: int
    checksum: int

    @property
    def depth(self) -> int | None:
        """In an incremental archive, the depth in its chain of the base holding this LO's
        bytes (0: the standalone archive the chain starts from); None: this archive holds them."""
        return self.offset if self.volume == CHAIN_VOLUME else None


class Meta(NamedTuple):
    """An LO's owner (role name), ACL (``aclitem[]`` as text items, exactly as the server
    had it, grantors included; None for the default) and comment. A NamedTuple: it is a
    dict key once per LO in a dump, and a tuple hashes in C."""

    owner: str | None
    acl: tuple[str, ...] | None
    comment: str | None

    def to_json(self) -> list[Any]:
        return [self.owner, list(self.acl) if self.acl is not None else None, self.comment]

    @classmethod
    def from_json(cls, v: Any) -> Meta:
        owner, acl, comment = v
        return cls(owner, tuple(acl) if acl is not None else None, comment)


class MetaTable:
    """Distinct metadata values, each stored once; ids are positions. Shared by workers."""

    def __init__(self) -> None:
        self.values: list[Meta] = []
        self._ids: dict[Meta, int] = {}
        self._lock = threading.Lock()

    def id(self, meta: tuple[Any, ...]) -> int:
        """The id of ``meta`` (a Meta, or an equal plain (owner, acl, comment) tuple)."""
        found = self._ids.get(meta)  # type: ignore[call-overload]
        if found is not None:
            return int(found)
        with self._lock:
            found = self._ids.get(meta)  # type: ignore[call-overload]
            if found is None:
                value = meta if isinstance(meta, Meta) else Meta(*meta)
                found = len(self.values)
                self.values.append(value)
                self._ids[value] = found
            return int(found)

    def encode(self) -> bytes:
        data = json.dumps([m.to_json() for m in self.values], ensure_ascii=False)
        # no zstd checksum of its own: the manifest's index_tail covers it (128 bits)
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data.encode())

    @classmethod
    def decode(cls, data: bytes, where: str) -> MetaTable:
        try:
            values = json.loads(zstandard.ZstdDecompressor().decompressobj().decompress(data))
            table = cls()
            for v in values:
                table.id(Meta.from_json(v))
        except (zstandard.ZstdError, ValueError, TypeError) as e:
            raise CorruptArchive(f"{where}: the metadata table is damaged ({e})") from e
        return table


def fixed_records(template: bytes, oids: Sequence[int], metas: Sequence[int]) -> bytearray:
    """``len(oids)`` copies of ``template`` (an INDEX_RECORD or a PIECE_RECORD: both begin
    with oid (I) and metadata id (I)), each with its OID and metadata id set: strided
    slice assignments, at C speed, instead of a ``pack`` per LO."""
    size = len(template)
    out = bytearray(template * len(oids))
    ob, mb = array.array("I", oids), array.array("I", metas)
    if sys.byteorder == "big":
        ob.byteswap()
        mb.byteswap()
    o, m = ob.tobytes(), mb.tobytes()
    for j in range(4):
        out[j::size] = o[j::4]
        out[4 + j :: size] = m[j::4]
    return out


@dataclass(frozen=True)
class BlockEntry:
    first: int
    last: int
    offset: int
    stored: int
    records: int


class Index:
    """A read index: the footer, block table and metadata in memory (24 bytes per 4,096
    LOs), blocks read on demand through ``read(offset, length)``. With ``tail`` (the
    manifest's): the tables are read in one piece and checked against it, and every
    block is checked as it is read (its zstd checksum); without, nothing is checked here
    (an older archive's index is checked whole by its reader, reader.py)."""

    def __init__(self, read: Any, size: int, where: str, tail: IndexTail | None = None) -> None:
        self._read = read
        self.where = where
        self._checked_blocks = tail is not None
        if size < INDEX_FOOTER.size:
            raise CorruptArchive(f"{where}: too short for an index ({size} bytes; truncated?)")
        read_tables = read
        if tail is not None:  # the tables in one read, checked, then read from memory
            tables = self._tables(tail, size)

            def read_tables(offset: int, length: int) -> bytes:
                return tables[offset - tail.offset : offset - tail.offset + length]

        footer = read_tables(size - INDEX_FOOTER.size, INDEX_FOOTER.size)
        magic, version, _r, blocks, table_at, meta_at, meta_len, count = INDEX_FOOTER.unpack(footer)
        if magic != INDEX_MAGIC:
            raise CorruptArchive(f"{where}: not a packed archive index (no footer; truncated?)")
        if (why := version_problem(version)) is not None:
            raise UnsupportedArchive(f"{where}: index {why}")
        if (
            table_at + blocks * BLOCK_ENTRY.size != meta_at
            or meta_at + meta_len + INDEX_FOOTER.size != size
            or (tail is not None and table_at != tail.offset)
        ):
            raise CorruptArchive(f"{where}: the index footer does not match its size (damaged)")
        raw = read_tables(table_at, blocks * BLOCK_ENTRY.size)
        self.blocks = [
            BlockEntry(*BLOCK_ENTRY.unpack_from(raw, i * BLOCK_ENTRY.size)) for i in range(blocks)
        ]
        self.count = count
        if sum(b.records for b in self.blocks) != count:
            raise CorruptArchive(f"{where}: the index's block table is damaged")
        self.metas = MetaTable.decode(read_tables(meta_at, meta_len), where)
        self._firsts = [b.first for b in self.blocks]
        self._dctx = zstandard.ZstdDecompressor()
        self._last: tuple[int, list[IndexRecord]] | None = None

    def _tables(self, tail: IndexTail, size: int) -> bytes:
        """The bytes from the block table to the end, read at once and checked."""
        if not 0 <= tail.offset <= size - INDEX_FOOTER.size:
            raise CorruptArchive(f"{self.where}: {size:,} bytes, too short for its tables at"
                                 f" byte {tail.offset:,} (the manifest's): truncated")  # fmt: skip
        tables = self._read(tail.offset, size - tail.offset)
        if xxhash.xxh3_128_hexdigest(tables) != tail.xxh3_128:
            raise CorruptArchive(f"{self.where}: {DAMAGED}")
        return bytes(tables)

    def _block(self, e: BlockEntry) -> list[IndexRecord]:
        if self._last is not None and self._last[0] == e.offset:  # find() of close OIDs
            return self._last[1]
        records = self._decode_block(e)
        self._last = (e.offset, records)
        return records

    def _decode_block(self, e: BlockEntry) -> list[IndexRecord]:
        raw = self._raw_block(e)
        return [
            IndexRecord(*INDEX_RECORD.unpack_from(raw, i * INDEX_RECORD.size))
            for i in range(e.records)
        ]

    def _raw_block(self, e: BlockEntry) -> bytes:
        """A block's records as stored (decompressed and checked for length)."""
        stored = self._read(e.offset, e.stored)
        want = e.records * INDEX_RECORD.size
        try:
            frame = zstandard.get_frame_parameters(stored)
            # decompress() sizes its buffer by the size a frame says: a damaged one could
            # ask for exabytes (a MemoryError, not a message)
            if frame.content_size not in (want, zstandard.CONTENTSIZE_UNKNOWN):
                raise zstandard.ZstdError(f"it says {frame.content_size:,} bytes, not {want:,}")
            if self._checked_blocks and not frame.has_checksum:
                raise zstandard.ZstdError("no checksum, where every block has one")
            raw = self._dctx.decompress(stored, max_output_size=want)
        except zstandard.ZstdError as ex:
            raise CorruptArchive(
                f"{self.where}: index block at byte {e.offset:,} is damaged ({ex})"
            ) from ex
        if len(raw) != want:
            raise CorruptArchive(f"{self.where}: index block at byte {e.offset:,} is damaged")
        return raw

    def __iter__(self) -> Iterator[IndexRecord]:
        for e in self.blocks:
            yield from self._block(e)

    def raw_blocks(self, first: int = 0, last: int = OID_MAX) -> Iterator[bytes]:
        """The records as stored, block by block in OID order (decompressed, length
        checked), of the blocks that hold OIDs in ``first..last``."""
        start = max(0, bisect.bisect_right(self._firsts, first) - 1)
        for e in self.blocks[start:]:
            if e.first > last:
                return
            if e.last >= first:
                yield self._raw_block(e)

    def range(self, first: int, last: int) -> Iterator[IndexRecord]:
        """Records with OIDs in ``first..last``, reading only the blocks that hold them."""
        start = max(0, bisect.bisect_right(self._firsts, first) - 1)
        for e in self.blocks[start:]:
            if e.first > last:
                return
            if e.last < first:
                continue
            for r in self._block(e):
                if first <= r.oid <= last:
                    yield r

    def volume_starts(self, first: int, last: int) -> dict[int, tuple[int, int]]:
        """Per volume number: the smallest frame offset and the count of the records with
        OIDs in ``first..last`` (a share's reader, ``restore --jobs``): plain tuples
        from each block's bytes, no record objects, as that is all it needs."""
        out: dict[int, tuple[int, int]] = {}
        start = max(0, bisect.bisect_right(self._firsts, first) - 1)
        for e in self.blocks[start:]:
            if e.first > last:
                break
            if e.last < first:
                continue
            raw = self._raw_block(e)
            whole = first <= e.first and e.last <= last
            if whole and _one_volume(raw, out):
                continue
            for oid, _m, _s, volume, offset, _x in INDEX_RECORD.iter_unpack(raw):
                if whole or first <= oid <= last:
                    had = out.get(volume)
                    if had is None:
                        out[volume] = (offset, 1)
                    else:
                        out[volume] = (min(had[0], offset), had[1] + 1)
        out.pop(CHAIN_VOLUME, None)  # an incremental's LOs whose bytes are in its bases
        return out

    def find(self, oid: int) -> IndexRecord | None:
        for r in self.range(oid, oid):
            return r
        return None

    def meta(self, meta_id: int) -> Meta:
        try:
            return self.metas.values[meta_id]
        except IndexError:
            raise CorruptArchive(f"{self.where}: metadata id {meta_id} out of range") from None


_COLUMNS = INDEX_RECORD.format == "<IIQIQQ" and sys.byteorder == "little"
"""Whether a block reads as 9 little-endian uint32 per INDEX_RECORD: oid, meta id, size
(2), volume, offset (2), checksum (2)."""


def _one_volume(raw: bytes, out: dict[int, tuple[int, int]]) -> bool:
    """``volume_starts`` for a whole block whose records are all in one volume (a
    dump's blocks mostly are), besides an incremental's records of LOs its bases hold,
    read as columns with no loop per record (but to pass over those); False (nothing
    added) when the block is not that."""
    if not _COLUMNS or not raw:
        return False
    cols = memoryview(raw).cast("I")
    volumes = cols[4::9].tolist()
    chained = volumes.count(CHAIN_VOLUME)
    if chained == len(volumes):
        return True  # all in the bases: nothing in this archive's volumes
    if chained:
        keep = [i for i, v in enumerate(volumes) if v != CHAIN_VOLUME]
        volumes = [volumes[i] for i in keep]
        lows, highs = cols[5::9].tolist(), cols[6::9].tolist()
        offsets = [lows[i] for i in keep]
        if any(highs[i] for i in keep):
            return False
    else:
        if any(cols[6::9]):
            return False
        offsets = cols[5::9].tolist()
    volume = volumes[0]
    if volumes.count(volume) != len(volumes):
        return False
    offset, records = min(offsets), len(volumes)
    had = out.get(volume)
    out[volume] = (offset, records) if had is None else (min(had[0], offset), had[1] + records)
    return True
