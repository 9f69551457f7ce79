"""Small LOs with holes in restore's batches: gathered piece by piece, written set-based.

An LO up to PIECE_MAX bytes with holes comes from the reader as pieces of one frame (its
runs of non-zero pages, opened at offset 0 and closed at its size by pieces with no
bytes where it starts or ends in a hole: docs/format.md, "Holes"). Restore writes it in
the batch being gathered, as one more LO of that batch's transaction and ledger entry:
created with the others (``lo_from_bytea`` of its first run when that starts it, else
``lo_create``), then one ``lo_put`` over arrays for every further run of the batch's LOs
(``Batch.put_many``) and one ``lo_truncate64`` over arrays for those that end in a hole
(``Batch.truncate_many``). Pages no run touches stay missing, as at the source. A larger
LO is written in a transaction of its own, range by range (its pieces may span frames
and exceed a batch's bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.spec import PIECE_MAX
from pgblobdump.packed.read.items import LoPiece, WholeLos
from pgblobdump.pg.lo import Batch

BATCHED_MAX = PIECE_MAX
"""The largest LO with holes written in a batch: the writer puts such an LO's pieces in
one frame, so gathering them holds at most this many bytes."""


@dataclass
class Gathering:
    """One LO with holes whose pieces are coming: its runs, in order."""

    oid: int
    meta: Meta
    size: int
    runs: list[tuple[int, bytes | memoryview]] = field(default_factory=list)

    def add(self, offset: int, data: bytes | memoryview) -> None:
        if len(data):
            self.runs.append((offset, data))

    def first(self) -> bytes | memoryview:
        """The bytes its creation writes: its first run when that starts it, else none."""
        return self.runs[0][1] if self.runs and self.runs[0][0] == 0 else b""

    def whole(self, checksum: int) -> WholeLos:
        """The LO as restore's batches take whole LOs: with its first run's bytes."""
        return WholeLos([self.oid], [self.meta], [self.first()], [checksum])


class Gatherer:
    """The pieces of restore's LOs with holes up to BATCHED_MAX bytes, LO by LO."""

    def __init__(self) -> None:
        self.lo: Gathering | None = None
        self.done: Gathering | None = None
        """The LO whose last piece was just taken."""

    def take(self, p: LoPiece) -> bool:
        """Whether ``p`` is a piece of such an LO (else: of a larger one)."""
        self.done = None
        if p.offset == 0:
            self.lo = Gathering(p.oid, p.meta, p.size) if p.size <= BATCHED_MAX else None
        lo = self.lo
        if lo is None or lo.oid != p.oid:
            return False
        lo.add(p.offset, p.data)
        if p.last:
            self.lo, self.done = None, lo
        return True

    def drop(self) -> None:
        """Damage cut the LO being gathered short: it is not written."""
        self.lo = self.done = None


@dataclass
class Further:
    """A batch's writing beyond its creations: the further runs of its LOs with holes,
    and the lengths of those that end in a hole, as parallel lists."""

    uncounted: dict[int, int] = field(default_factory=dict)
    """The batch's LOs with holes: the bytes of each one's size that its creation does
    not write (holes and further runs), counted as restored with the batch."""
    put_oids: list[int] = field(default_factory=list)
    put_offsets: list[int] = field(default_factory=list)
    put_datas: list[bytes | memoryview] = field(default_factory=list)
    tail_oids: list[int] = field(default_factory=list)
    tail_sizes: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.uncounted)

    def add(self, lo: Gathering) -> int:
        """The LO's runs after its first, and its length when it ends in a hole; returns
        the bytes of those runs (what the batch sends beyond the creations)."""
        first = len(lo.first())
        self.uncounted[lo.oid] = lo.size - first
        sent = 0
        end = first
        for offset, data in lo.runs[1:] if first else lo.runs:
            self.put_oids.append(lo.oid)
            self.put_offsets.append(offset)
            self.put_datas.append(data)
            sent += len(data)
            end = offset + len(data)
        if lo.size > end:
            self.tail_oids.append(lo.oid)
            self.tail_sizes.append(lo.size)
        return sent

    def without(self, gone: set[int]) -> Further:
        """The same without the LOs ``gone`` (they exist: restore --on-conflict skip,
        --resume)."""
        if gone.isdisjoint(self.uncounted):
            return self
        out = Further({o: n for o, n in self.uncounted.items() if o not in gone})
        keep = [i for i, o in enumerate(self.put_oids) if o not in gone]
        out.put_oids = [self.put_oids[i] for i in keep]
        out.put_offsets = [self.put_offsets[i] for i in keep]
        out.put_datas = [self.put_datas[i] for i in keep]
        tails = [i for i, o in enumerate(self.tail_oids) if o not in gone]
        out.tail_oids = [self.tail_oids[i] for i in tails]
        out.tail_sizes = [self.tail_sizes[i] for i in tails]
        return out

    def write(self, b: Batch) -> None:
        """After the batch's creations, in its transaction."""
        b.put_many(self.put_oids, self.put_offsets, self.put_datas)
        b.truncate_many(self.tail_oids, self.tail_sizes)
