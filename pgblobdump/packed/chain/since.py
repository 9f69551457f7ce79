"""``dump --since PREV``: an incremental archive, holding the bytes of the LOs new or
changed since PREV's snapshot, the metadata of every LO, and the OIDs gone since.

Which LOs changed comes from the tuples' transaction ids against PREV's snapshot mark
(``pg/changes.py``, the module ``sync`` reads them with): an LO whose metadata row, pages
and comment are all older than the mark is the one PREV holds. Every LO of the selection
then gets an index record: the LOs it packs point at its own volumes, the others at the
base in the chain that holds their bytes (``CHAIN_VOLUME``, the base's depth), with the
metadata read now (an owner renamed since PREV is the name today).
"""

from __future__ import annotations

import array
import bisect
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import psycopg
import zstandard
from psycopg import sql

from pgblobdump.errors import UsageError
from pgblobdump.packed.format.index import MetaTable
from pgblobdump.packed.format.indexbuild import IndexBuilder
from pgblobdump.packed.format.manifest import ChainLink, DumpSource, PackSource
from pgblobdump.packed.format.rawindex import COLUMNS_OK, RawRecords, oid_column
from pgblobdump.packed.format.spec import CHAIN_VOLUME, INDEX_RECORD
from pgblobdump.pg import changes, lometa
from pgblobdump.pg.changes import Mark
from pgblobdump.pg.lostream import WINDOW, Selection, in_index_order
from pgblobdump.pgconstants import OID_MAX

if TYPE_CHECKING:  # a plain dump takes only Share from here: the chain's reader is --since's
    from pgblobdump.packed.chain.bychecksum import Comparer
    from pgblobdump.packed.read.reader import PackedDirectory


@dataclass(frozen=True)
class Base:
    """PREV, opened and checked: its archive, its snapshot mark, the chain it is the
    last link of (``chain``: its own bases, root first) and how NEW names it."""

    archive: PackedDirectory
    mark: Mark
    chain: tuple[ChainLink, ...]
    link: ChainLink
    """PREV as NEW's chain names it (what NEW takes from it is counted by ``Plan.chain``)."""

    @property
    def depth(self) -> int:
        return len(self.chain)


def open_base(path: str) -> Base:
    """PREV as given to ``--since``: a complete packed archive made by ``dump`` (standalone or
    incremental), its index sound. Refused in one line otherwise."""
    from pgblobdump.packed.chain.archives import Chain, where_of

    archive = Chain.open(path).top  # its own chain checked: no dump on a broken one
    manifest = archive.manifest
    assert manifest is not None  # an archive without one is refused by PackedDirectory
    src = manifest.source
    if not isinstance(src, DumpSource) or src.mark is None:
        what = ("made by pack from a pg_dump archive" if isinstance(src, PackSource)
                else "made by a pgblobdump from before incremental dumps")  # fmt: skip
        raise UsageError(
            f"--since {path}: {what}, it records no snapshot to compare with; take a dump without"
            " --since with this pgblobdump first"
        )
    archive.check_index()  # PREV's index places every LO: trusted only as its manifest says
    chain = archive.incremental.chain if archive.incremental else ()
    link = ChainLink(archive.manifest_sum, where_of(path), manifest.created, src.snapshot, 0, 0)
    return Base(archive, Mark.from_json(json.dumps(src.mark)), chain, link)


def check_source(base: Base, now: Mark, source_now: DumpSource, path: str) -> None:
    """PREV must have been read from this cluster's database (UsageError naming both).
    Clusters named two ways (by system identifier for one role, by start time for
    another that may not read it) are not told apart here: transaction ids are then
    not trusted (``changes.unusable``) and every LO is compared by checksum."""
    known = base.mark.cluster.startswith("system ") and now.cluster.startswith("system ")
    other_cluster = known and base.mark.cluster != now.cluster
    if other_cluster or base.mark.database != now.database:
        prev = base.archive.manifest.source.database if base.archive.manifest else None
        raise UsageError(
            f"--since {path} was dumped from database {prev!r}"
            f" (OID {base.mark.database}, {base.mark.cluster}); this is database"
            f" {source_now.database!r} (OID {now.database}, {now.cluster}): an"
            " incremental dump reads the database its base read"
        )


@dataclass
class Plan:
    """What an incremental dump does: ``dump`` the OIDs to read (new or changed, in
    order); the others are carried (index records pointing at the base that holds their
    bytes, written into the writer's ``carried`` builder as they are found)."""

    dump: array.array[int] = field(default_factory=lambda: array.array("I"))
    gone: array.array[int] = field(default_factory=lambda: array.array("I"))
    new: int = 0
    changed: int = 0
    carried: int = 0
    carried_bytes: int = 0
    taken: dict[int, list[int]] = field(default_factory=dict)
    """Per depth in the chain: [LOs, bytes] whose bytes that base supplies."""
    metadata: int = 0
    """LOs whose owner, ACL or comment alone changed: carried (their bytes are the base's)."""
    detection: str = "transaction ids"

    def absorb(self, c: Comparer) -> None:
        """What a worker comparing checksums carried (``changed`` counted every compared
        LO until then)."""
        from pgblobdump.packed.chain.bychecksum import merge_taken

        self.carried += c.los
        self.carried_bytes += c.bytes
        self.changed -= c.los
        merge_taken(self.taken, c.taken)

    def chain(self, base: Base) -> tuple[ChainLink, ...]:
        """NEW's chain: PREV's bases and PREV, each with what NEW takes from it."""
        out = []
        for depth, link in enumerate([*base.chain, base.link]):
            los, nbytes = self.taken.get(depth, [0, 0])
            out.append(replace(link, los=los, bytes=nbytes))
        return tuple(out)

    def gone_file(self) -> bytes:
        data = array.array("I", self.gone)
        if data.itemsize != 4:
            raise RuntimeError("array('I') is not 32 bits here")
        if sys.byteorder == "big":
            data.byteswap()
        return zstandard.ZstdCompressor().compress(data.tobytes())


def plan(conn: psycopg.Connection, sel: Selection, base: Base, metas: MetaTable,
         carried: IndexBuilder, exact: bool = True,
         found: changes.Detection | None = None) -> Plan:  # fmt: skip
    """Under the dump's snapshot (``conn``'s transaction): which selected LOs changed
    since the base's mark, merged with the base's index and every LO's metadata, in OID
    order, a window of LOs at a time (three sorted streams: memory is a window and the
    changed OIDs' list). The carried LOs' records are the base's, rewritten as columns
    (no object per LO). Not ``exact``: every LO the base holds is to be read and
    compared by checksum (``bychecksum``). ``found``: how the LOs with pages written
    since are found (``changes.detect``; None: the full pass)."""
    out = Plan()
    changed = array.array("I")
    if exact:
        out.detection = found.how if found is not None else out.detection
        for s in changes.scan(conn, sel, base.mark, sparse=True, found=found):
            if s.bytes_kept:  # its owner, ACL or comment only: carried, metadata read now
                out.metadata += 1
            elif s.changed:
                changed.append(s.oid)
    else:
        out.detection = "checksums"
    records = RawRecords(base.archive.index.raw_blocks())
    cond = sel.where(sql.SQL("m.oid"))
    in_index_order(conn)  # the metadata windows as a dump reads them (no sort per window)
    size = INDEX_RECORD.size
    for w in lometa.windows(conn, cond, sel.first, sel.last, WINDOW):
        oids, wmetas = w.oids, w.metas
        raw = records.take_through(oids[-1])
        held = oid_column(raw)
        if exact:
            lo, hi = bisect.bisect_left(changed, oids[0]), bisect.bisect_right(changed, oids[-1])
            touched = set(changed[lo:hi])
        else:
            touched = set(held)  # every LO the base holds is compared
        one = wmetas.count(wmetas[0]) == len(wmetas)  # one owner, no ACL, no comment
        if held == oids and not touched:  # the window is the base's, unchanged
            ids = [metas.id(wmetas[0])] * len(oids) if one else list(map(metas.id, wmetas))
        else:
            at = {o: i for i, o in enumerate(held)}
            if held != oids:
                in_window = set(oids)
                out.gone.extend(o for o in held if o not in in_window)
            keep: list[int] = []  # positions in the base's records of the carried LOs
            kept: list[Any] = []  # their metadata
            for o, meta in zip(oids, wmetas, strict=True):
                i = at.get(o)
                if i is not None and o not in touched:
                    keep.append(i)
                    kept.append(meta)
                else:
                    out.dump.append(o)
                    if i is None:
                        out.new += 1
                    else:
                        out.changed += 1
            raw = b"".join(raw[i * size : (i + 1) * size] for i in keep)
            ids = [metas.id(wmetas[0])] * len(kept) if one else list(map(metas.id, kept))
        if ids:
            carried.add_records(_carry(raw, ids, base.depth, out))
    while rest := records.run(OID_MAX):  # a block at a time
        out.gone.extend(oid_column(rest))
    return out


def _carry(raw: bytes, ids: list[int], depth: int, out: Plan) -> bytes:
    """The base's records ``raw`` as carried ones: the new metadata ids, volume
    CHAIN_VOLUME and the depth of the base holding the bytes (the base's own depth for
    the LOs its volumes hold; a carried record of the base keeps its depth)."""
    buf = bytearray(raw)
    size = INDEX_RECORD.size
    n = len(buf) // size
    out.carried += n
    if COLUMNS_OK:
        cols = memoryview(buf).cast("I")
        cols[1::9] = array.array("I", ids)
        if CHAIN_VOLUME not in cols[4::9].tolist():  # all in the base's own volumes
            cols[4::9] = array.array("I", [CHAIN_VOLUME]) * n
            cols[5::9] = array.array("I", [depth]) * n
            cols[6::9] = array.array("I", [0]) * n
            nbytes = sum(cols[2::9]) + (sum(cols[3::9]) << 32)
            taken = out.taken.setdefault(depth, [0, 0])
            taken[0] += n
            taken[1] += nbytes
            out.carried_bytes += nbytes
            return bytes(buf)
    for i in range(n):
        oid, _m, lo_size, volume, offset, checksum = INDEX_RECORD.unpack_from(buf, i * size)
        holder = offset if volume == CHAIN_VOLUME else depth
        INDEX_RECORD.pack_into(buf, i * size, oid, ids[i], lo_size, CHAIN_VOLUME, holder, checksum)
        taken = out.taken.setdefault(holder, [0, 0])
        taken[0] += 1
        taken[1] += lo_size
        out.carried_bytes += lo_size
    return bytes(buf)


@dataclass(frozen=True)
class Share:
    """What one dump worker reads: the selection ``whole`` (a standalone dump's OID range), or
    the OIDs ``oids`` (an incremental's, ascending), given as selections of at most
    WINDOW of them, made as they are read (held as 4 bytes an OID, not as objects)."""

    first: int
    last: int
    whole: Selection | None = None
    oids: array.array[int] | None = None
    sel: Selection = field(default_factory=Selection)
    """The dump's selection: each window of ``oids`` keeps its columns (and their reads)."""

    @classmethod
    def of(cls, sel: Selection) -> Share:
        return cls(sel.first, sel.last, whole=sel)

    def __bool__(self) -> bool:
        return self.whole is not None or bool(self.oids)

    def __iter__(self) -> Iterator[Selection]:
        if self.whole is not None:
            yield self.whole
            return
        oids = self.oids if self.oids is not None else array.array("I")
        for i in range(0, len(oids), WINDOW):
            chunk = tuple(oids[i : i + WINDOW])
            yield self.sel.part(chunk[0], chunk[-1], chunk)


def selections(oids: array.array[int], sel: Selection, jobs: int) -> list[Share]:
    """The OIDs to dump cut into ``jobs`` contiguous shares of as many LOs each (at least
    one share, maybe empty)."""
    jobs = max(1, min(jobs, len(oids)))
    out: list[Share] = []
    for k in range(jobs):
        mine = oids[len(oids) * k // jobs : len(oids) * (k + 1) // jobs]
        first, last = (mine[0], mine[-1]) if mine else (0, -1)
        out.append(Share(first, last, oids=mine, sel=sel))
    return out
