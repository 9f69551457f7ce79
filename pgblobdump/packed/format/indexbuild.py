"""The index written: each worker's records, in OID order, compressed block by block into a
temporary file as they fill (memory stays one block whatever the LO count), and the index
file made of every worker's blocks, the block table, the metadata table and the footer.
``pack`` adds records in the order of a pg_dump archive's data instead
(SortingIndexBuilder: sorted runs, merged at the end). packed/format/index.py reads it."""

from __future__ import annotations

import heapq
import tempfile
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import xxhash
import zstandard

from pgblobdump.packed.format.index import BlockEntry, IndexRecord, MetaTable, fixed_records
from pgblobdump.packed.format.indexcheck import block_compressor
from pgblobdump.packed.format.manifest import IndexTail
from pgblobdump.packed.format.spec import (
    BLOCK_ENTRY,
    INDEX_BLOCK_RECORDS,
    INDEX_FOOTER,
    INDEX_MAGIC,
    INDEX_RECORD,
    STANDALONE_VERSION,
)


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
