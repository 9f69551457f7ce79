"""The index: every LO by OID in compressed blocks of fixed-width records, the metadata
table, and a footer to find a block without reading the others.

Writers add records in OID order (each worker covers one OID range, so the workers'
blocks concatenate in range order); blocks are spilled to a temporary file as they fill,
so memory stays one block whatever the LO count. ``pack`` adds them in the order of a
pg_dump archive's data instead (SortingIndexBuilder: sorted runs, merged at the end).
"""

from __future__ import annotations

import array
import bisect
import heapq
import json
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, NamedTuple

import xxhash
import zstandard

from pgblobdump.errors import CorruptArchive, UnsupportedArchive
from pgblobdump.packed.format.indexcheck import DAMAGED, block_compressor
from pgblobdump.packed.format.manifest import IndexTail
from pgblobdump.packed.format.spec import (
    BLOCK_ENTRY,
    CHAIN_VOLUME,
    INDEX_BLOCK_RECORDS,
    INDEX_FOOTER,
    INDEX_MAGIC,
    INDEX_RECORD,
    STANDALONE_VERSION,
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


class IndexBuilder:
    """One worker's index records, in OID order, compressed block by block into a
    temporary file."""

    def __init__(self) -> None:
        self._spill: BinaryIO = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self._pending: list[bytes] = []
        self._n = 0  # records in _pending
        self._first = 0
        self._last = -1
        self.blocks: list[BlockEntry] = []
        self.count = 0
        self._size = 0
        self._cctx = block_compressor()

    def add(self, oid: int, meta: int, size: int, volume: int, offset: int, checksum: int) -> None:
        """One LO's record (the fields of IndexRecord; no object per LO on this hot path)."""
        if oid <= self._last:
            raise ValueError(f"index records out of order: {oid} after {self._last}")
        if not self._pending:
            self._first = oid
        self._last = oid
        self._pending.append(INDEX_RECORD.pack(oid, meta, size, volume, offset, checksum))
        self.count += 1
        self._n += 1
        if self._n >= INDEX_BLOCK_RECORDS:
            self._flush()

    def add_run(self, oids: Sequence[int], metas: Sequence[int], size: int, volume: int,
                offset: int, checksum: int) -> None:  # fmt: skip
        """Records of LOs (ascending OIDs) that share size, frame and checksum: a frame's
        empty LOs, a million of them in a seed-style dump. Built at C speed."""
        if oids and oids[0] <= self._last:
            raise ValueError(f"index records out of order: {oids[0]} after {self._last}")
        template = INDEX_RECORD.pack(0, 0, size, volume, offset, checksum)
        i, n = 0, len(oids)
        while i < n:
            k = min(n - i, INDEX_BLOCK_RECORDS - self._n)
            if not self._n:
                self._first = oids[i]
            self._pending.append(bytes(fixed_records(template, oids[i : i + k], metas[i : i + k])))
            self._n += k
            self.count += k
            i += k
            self._last = oids[i - 1]
            if self._n >= INDEX_BLOCK_RECORDS:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        block = self._cctx.compress(b"".join(self._pending))
        self.blocks.append(BlockEntry(self._first, self._last, self._size, len(block), self._n))
        self._spill.write(block)
        self._size += len(block)
        self._pending = []
        self._n = 0

    def spilled(self) -> BinaryIO:
        """The compressed blocks, from the start (after the last block is flushed)."""
        self._flush()
        self._spill.seek(0)
        return self._spill

    def add_records(self, raw: bytes | bytearray | memoryview) -> None:
        """Whole INDEX_RECORDs as they are stored (ascending OIDs, after those added):
        an incremental dump's carried records, a merge's runs, with no object per LO."""
        size = INDEX_RECORD.size
        n = len(raw) // size
        if not n:
            return
        view = memoryview(raw)
        first = INDEX_RECORD.unpack_from(view, 0)[0]
        if first <= self._last:
            raise ValueError(f"index records out of order: {first} after {self._last}")
        i = 0
        while i < n:
            k = min(n - i, INDEX_BLOCK_RECORDS - self._n)
            if not self._n:
                self._first = INDEX_RECORD.unpack_from(view, i * size)[0]
            self._pending.append(bytes(view[i * size : (i + k) * size]))
            self._n += k
            self.count += k
            i += k
            self._last = INDEX_RECORD.unpack_from(view, (i - 1) * size)[0]
            if self._n >= INDEX_BLOCK_RECORDS:
                self._flush()

    def raw_blocks(self) -> Iterator[bytes]:
        """Every record added, in order, as the blocks' raw bytes, read back from the
        spill file (one block in memory at a time); the builder is then done with."""
        spill = self.spilled()
        dctx = zstandard.ZstdDecompressor()
        for e in self.blocks:
            spill.seek(e.offset)
            yield dctx.decompress(
                spill.read(e.stored), max_output_size=e.records * INDEX_RECORD.size
            )

    def close(self) -> None:
        self._spill.close()


class SortingIndexBuilder(IndexBuilder):
    """Index records added in any OID order (``pack`` of a pg_dump 17 archive, whose LO
    data comes grouped by owner and ACL): sorted in runs of RUN_RECORDS spilled to a
    temporary file, merged when the index is written. Memory: one run (about 10 MB of
    Python objects for its 65,536 records)."""

    RUN_RECORDS = 1 << 16

    def __init__(self) -> None:
        super().__init__()
        self._run: list[tuple[int, bytes]] = []
        self._runs: list[tuple[int, int]] = []  # (offset, records) in _run_file
        self._run_file: BinaryIO = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self._merged = False

    def add_run(self, oids: Sequence[int], metas: Sequence[int], size: int, volume: int,
                offset: int, checksum: int) -> None:  # fmt: skip
        for oid, meta in zip(oids, metas, strict=True):
            self.add(oid, meta, size, volume, offset, checksum)

    def add(self, oid: int, meta: int, size: int, volume: int, offset: int, checksum: int) -> None:
        self._run.append((oid, INDEX_RECORD.pack(oid, meta, size, volume, offset, checksum)))
        if len(self._run) >= self.RUN_RECORDS:
            self._spill_run()

    def _spill_run(self) -> None:
        if not self._run:
            return
        self._run.sort(key=lambda r: r[0])
        self._runs.append((self._run_file.tell(), len(self._run)))
        self._run_file.write(b"".join(r for _, r in self._run))
        self._run = []

    def _read_run(self, offset: int, records: int) -> Iterator[tuple[int, bytes]]:
        size = INDEX_RECORD.size
        done = 0
        while done < records:
            n = min(4096, records - done)
            self._run_file.seek(offset + done * size)
            raw = self._run_file.read(n * size)
            for i in range(n):
                rec = raw[i * size : (i + 1) * size]
                yield INDEX_RECORD.unpack_from(rec)[0], rec
            done += n

    def merged(self) -> Iterator[IndexRecord]:
        """Every record added, in OID order (once)."""
        self._spill_run()
        runs = (self._read_run(o, n) for o, n in self._runs)
        for _oid, rec in heapq.merge(*runs, key=lambda r: r[0]):
            yield IndexRecord(*INDEX_RECORD.unpack(rec))

    def spilled(self) -> BinaryIO:
        if not self._merged:
            self._merged = True
            for r in self.merged():
                super().add(r.oid, r.meta, r.size, r.volume, r.offset, r.checksum)
        return super().spilled()

    def close(self) -> None:
        self._run_file.close()
        super().close()


def write_index(out: BinaryIO, builders: Sequence[IndexBuilder], metas: MetaTable,
                version: int = STANDALONE_VERSION) -> IndexTail:  # fmt: skip
    """The index file: every builder's blocks in order, the block table, the metadata
    table, the footer. Builders must cover ascending, disjoint OID ranges. Returns where
    the tables begin and their checksum, for the manifest."""
    offset = 0
    table: list[BlockEntry] = []
    last = -1
    for b in builders:
        spill = b.spilled()
        for e in b.blocks:
            if e.first <= last:
                raise ValueError("index builders overlap")
            last = e.last
            table.append(BlockEntry(e.first, e.last, offset + e.offset, e.stored, e.records))
        size = 0
        while chunk := spill.read(1 << 20):
            out.write(chunk)
            size += len(chunk)
        offset += size
    table_at = offset
    tail = xxhash.xxh3_128()

    def put(data: bytes) -> None:
        out.write(data)
        tail.update(data)

    put(b"".join(BLOCK_ENTRY.pack(e.first, e.last, e.offset, e.stored, e.records)
                 for e in table))  # fmt: skip
    meta_at = table_at + len(table) * BLOCK_ENTRY.size
    meta = metas.encode()
    put(meta)
    count = sum(e.records for e in table)
    put(INDEX_FOOTER.pack(INDEX_MAGIC, version, 0, len(table), table_at, meta_at, len(meta), count))
    return IndexTail(table_at, tail.hexdigest())


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
