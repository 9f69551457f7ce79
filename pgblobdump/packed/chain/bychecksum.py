"""An incremental dump's fallback when transaction ids cannot tell what changed since the
base (a role that may not read ``pg_largeobject``, a base older than the xid horizon):
every LO of the base is read and compared with the base's record (size and xxh3-64); an
equal one is carried (an index record pointing at the base that holds it, with the
metadata read now), the others are packed. The archive is as small as with transaction
ids; the dump reads every byte, as a dump without --since does.

An LO over 1 MiB is hashed as it is read (a range at a time, nothing held), and read
again from the start on the worker's second connection if it differs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import xxhash

from pgblobdump.packed.format.index import IndexRecord, Meta, MetaTable
from pgblobdump.packed.format.indexbuild import IndexBuilder
from pgblobdump.packed.format.spec import CHAIN_VOLUME
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.write.packer import LoPacker
from pgblobdump.pg import lostream
from pgblobdump.pg.lostream import LoRow, LoRun, Side

_EMPTY = xxhash.xxh3_64_intdigest(b"")


class Comparer:
    """One worker's LOs against the base's index, in OID order (the worker's range):
    ``carried`` gets the records of the LOs equal to the base's, the packer the others."""

    def __init__(self, base: PackedDirectory, depth: int, first: int, last: int,
                 metas: MetaTable) -> None:  # fmt: skip
        """``base`` (this worker's own reader), ``depth`` its depth in the chain."""
        self.depth = depth
        self.metas = metas
        self.carried = IndexBuilder()
        self.taken: dict[int, list[int]] = {}
        self.los = 0
        self.bytes = 0
        self._records: Iterator[IndexRecord] = base.index.range(first, last)
        self._r: IndexRecord | None = next(self._records, None)

    def _record(self, oid: int) -> IndexRecord | None:
        while self._r is not None and self._r.oid < oid:
            self._r = next(self._records, None)
        return self._r if self._r is not None and self._r.oid == oid else None

    def _carry(self, r: IndexRecord, meta: tuple[Any, ...]) -> None:
        depth = r.offset if r.volume == CHAIN_VOLUME else self.depth
        self.carried.add(r.oid, self.metas.id(meta), r.size, CHAIN_VOLUME, depth, r.checksum)
        taken = self.taken.setdefault(depth, [0, 0])
        taken[0] += 1
        taken[1] += r.size
        self.los += 1
        self.bytes += r.size

    def run(self, run: LoRun, packer: LoPacker) -> None:
        """A run of whole LOs: the equal ones carried, the rest packed in bulk."""
        view = memoryview(run.data)
        digest = xxhash.xxh3_64_intdigest
        keep_oids: list[int] = []
        keep_metas: list[Any] = []
        keep_sizes: list[int] = []
        keep_data: list[memoryview] = []
        at = 0
        for oid, meta, size in zip(run.oids, run.metas, run.sizes, strict=True):
            data = view[at : at + size]
            at += size
            r = self._record(oid)
            if (
                r is not None
                and r.size == size
                and r.checksum == (digest(data) if size else _EMPTY)
            ):
                self._carry(r, meta)
                continue
            keep_oids.append(oid)
            keep_metas.append(meta)
            keep_sizes.append(size)
            keep_data.append(data)
        if keep_oids:
            packer.add_run(keep_oids, keep_metas, keep_sizes, b"".join(keep_data))

    def row(self, row: LoRow, packer: LoPacker, side: Side) -> None:
        """An LO read in ranges: hashed as it comes; packed from a second reading (on
        ``side``) if it differs from the base's."""
        meta = Meta(row.owner, row.acl, row.comment)
        r = self._record(row.oid)
        if r is None or r.size != row.size:
            packer.add_chunks(row.oid, meta, row.size, row.chunks)
            return
        h = xxhash.xxh3_64()
        for chunk in row.chunks:
            h.update(chunk)
        if h.intdigest() == r.checksum:
            self._carry(r, meta)
            return
        packer.add_chunks(
            row.oid, meta, row.size, lostream.read_ranges(side(), row.oid, 0, row.size)
        )


def merge_taken(into: dict[int, list[int]], more: dict[int, list[int]]) -> None:
    for depth, (los, nbytes) in more.items():
        t = into.setdefault(depth, [0, 0])
        t[0] += los
        t[1] += nbytes
