"""A chain of packed archives: an incremental archive (``dump --since``) and the bases it
names, read as the one archive they make together.

An incremental archive's manifest lists its chain, root first (``incremental.chain``):
each base by the xxh3-128 of its ``manifest.json``, where it was, and how many of the
incremental's LOs it holds the bytes of. Its index has a record for every LO of its
snapshot; a record whose bytes are in a base says which (``CHAIN_VOLUME``, the base's
depth). ``Chain.open`` finds each base that holds something (where the manifest says, or
among ``--base`` paths, by checksum) and checks it before anything is read: present,
its manifest the one named, its own chain the same, its index and volumes as its
manifest lists them. A standalone archive is a chain of one.

Reading (restore, merge, cat) takes each LO from the archive that holds it, with the
incremental's metadata, by merging the incremental's index with each base's volumes in
OID order: memory stays flat whatever the counts.
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from typing import Any

from pgblobdump import storage
from pgblobdump.errors import CorruptArchive, NotFound, PgBlobDumpError, UsageError
from pgblobdump.packed.format.index import Index, IndexRecord, Meta
from pgblobdump.packed.format.manifest import ChainLink
from pgblobdump.packed.format.rawindex import COLUMNS_OK
from pgblobdump.packed.format.spec import CHAIN_VOLUME, INDEX_RECORD
from pgblobdump.packed.read import source
from pgblobdump.packed.read.items import Damaged, Item, LoPiece, WholeLos
from pgblobdump.packed.read.parts import share_items
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.pgconstants import OID_MAX


@dataclass
class Link:
    """Base ``depth`` of a chain: its entry in the incremental's manifest, and the
    archive, opened and checked (None when the incremental takes nothing from it)."""

    depth: int
    entry: ChainLink
    path: str | None
    archive: PackedDirectory | None

    @property
    def where(self) -> str:
        return self.archive.where if self.archive is not None else self.entry.where


def where_of(path: str) -> str:
    """Where an archive is, as a chain records it: a local path made absolute (the
    restore may run from another directory), an ``s3://`` URL as given."""
    local = storage.local_path(path)
    return str(local.resolve()) if local is not None else path


def _name(top: str, depth: int, count: int, entry: ChainLink) -> str:
    return (f"base {depth + 1} of {count} of {top} (dumped {entry.created},"
            f" snapshot {entry.snapshot})")  # fmt: skip


class Chain:
    """``top`` and its bases (``links``, root first)."""

    def __init__(self, top: PackedDirectory, path: str, links: list[Link]) -> None:
        self.top = top
        self.path = path
        self.links = links

    @property
    def incremental(self) -> bool:
        return bool(self.links)

    @property
    def index(self) -> Index:
        return self.top.index

    @classmethod
    def open(cls, path: str, bases: Sequence[str] = ()) -> Chain:
        """``path`` and the bases it needs, each checked (see the module's docstring);
        ``bases``: where to look first, by manifest checksum. A base that is missing,
        altered or from another chain is an error naming it, before anything is read."""
        top = source.directory(path)
        inc = top.incremental
        if inc is None:
            if bases:
                raise UsageError(
                    f"--base goes with an incremental archive; {path} is a standalone one"
                )
            return cls(top, path, [])
        entries = list(inc.chain)
        given: dict[str, tuple[str, PackedDirectory]] = {}
        for b in bases:
            a = source.directory(b)
            given[a.manifest_sum] = (b, a)
        wanted = {e.manifest for e in entries}
        for digest, (b, _) in given.items():
            if digest not in wanted:
                raise UsageError(f"--base {b} is not a base of {path} (its manifest is not one"
                                 " the chain names)")  # fmt: skip
        links = []
        for depth, entry in enumerate(entries):
            name = _name(path, depth, len(entries), entry)
            if not entry.los:
                links.append(Link(depth, entry, None, None))
                continue
            if entry.manifest in given:
                where, archive = given[entry.manifest]
            else:
                where = entry.where
                archive = _open_base(where, name)
            _check_link(archive, entry, entries[:depth], name, where)
            links.append(Link(depth, entry, where, archive))
        placed = _placed(top.index)
        for depth, entry in enumerate(entries):
            if (n := placed.pop(depth, 0)) != entry.los:
                raise CorruptArchive(
                    f"{path}: its index places {n:,} LOs in base {depth + 1},"
                    f" its manifest says {entry.los}"
                )
        if placed:
            raise CorruptArchive(f"{path}: its index places LOs in a base its manifest lacks")
        return cls(top, path, links)

    def reopened(self) -> Chain:
        """The same chain with its archives opened anew (one per thread: a reader of an
        index or volumes is not shared between threads); checked already."""
        top = source.directory(self.path)
        links = [
            dataclasses.replace(k, archive=None if k.path is None else source.directory(k.path))
            for k in self.links
        ]
        return Chain(top, self.path, links)

    # -- reading -------------------------------------------------------------------------
    def items(self, first: int = 0, last: int = OID_MAX) -> Iterator[Item]:
        """The LOs with OIDs in ``first..last``, each from the archive holding its bytes,
        with the top's metadata: the top's own first, then each base's in turn."""
        yield from share_items(self.top, first, last)
        for link in self.links:
            if link.archive is not None:
                yield from self._from(link, first, last)

    def _from(self, link: Link, first: int, last: int) -> Iterator[Item]:
        """What the top takes from ``link``'s archive in ``first..last``."""
        assert link.archive is not None
        wanted = _Wanted(self.top.index, link.depth, first, last)
        items = share_items(link.archive, first, last)
        return _taken(items, wanted, self.top.index.metas.values, link.archive.where)

    def ordered_items(self, first: int = 0, last: int = OID_MAX) -> Iterator[Item]:
        """The LOs with OIDs in ``first..last`` in OID order (merge): the top's and each
        base's items merged run by run (a run of whole LOs cut where another archive's
        next LO comes)."""
        streams = [_Peek(share_items(self.top, first, last))]
        streams += [_Peek(self._from(k, first, last)) for k in self.links if k.archive is not None]
        while True:
            heads = sorted((h, k) for k, s in enumerate(streams) if (h := s.head()) is not None)
            if not heads:
                return
            if len(heads) > 1 and heads[1][0] == heads[0][0]:
                raise CorruptArchive(f"{self.path}: LO {heads[0][0]} is in two archives of"
                                     " the chain: its index places it in one")  # fmt: skip
            limit = heads[1][0] - 1 if len(heads) > 1 else OID_MAX
            yield from streams[heads[0][1]].through(limit)

    def read_lo(self, oid: int) -> Iterator[bytes | memoryview]:
        """One LO's bytes from the archive that holds them (``cat``), checked against the
        top's record."""
        r = self.top.find(oid)
        if r.volume != CHAIN_VOLUME:
            yield from self.top.read_lo(oid)
            return
        link = self.links[r.offset] if r.offset < len(self.links) else None
        if link is None or link.archive is None:
            raise CorruptArchive(f"{self.top.where}: LO {oid} is placed in a base it does not list")
        held = link.archive.find(oid)
        if (held.size, held.checksum) != (r.size, r.checksum):
            raise CorruptArchive(f"{link.where}: LO {oid} is not the one {self.top.where} names")
        yield from link.archive.read_lo(oid)

    def holder(self, r: IndexRecord) -> str:
        """Where the archive holding ``r``'s bytes is (``ls``), named as a chain names its
        bases: an absolute path, or an ``s3://`` URL."""
        if r.volume != CHAIN_VOLUME:
            return where_of(self.path)
        if r.offset < len(self.links):
            link = self.links[r.offset]
            return where_of(link.path) if link.path is not None else link.where
        return f"base {r.offset + 1} (not in the chain)"

    def totals(self) -> tuple[int, int]:
        """LOs and bytes of the chain's snapshot (the top's manifest)."""
        m = self.top.manifest
        return m.snapshot_totals if m is not None else (0, 0)


def _placed(index: Index) -> Counter[int]:
    """How many records of ``index`` each base depth holds the bytes of (columns of
    the raw blocks)."""
    out: Counter[int] = Counter()
    for raw in index.raw_blocks():
        if COLUMNS_OK:
            cols = memoryview(raw).cast("B").cast("I")
            volumes, depths = cols[4::9].tolist(), cols[5::9].tolist()
        else:
            fields = list(INDEX_RECORD.iter_unpack(raw))
            volumes, depths = [f[3] for f in fields], [f[4] for f in fields]
        n = volumes.count(CHAIN_VOLUME)
        if n == len(volumes):
            out.update(depths)
        elif n:
            out.update(compress(depths, map(operator.eq, volumes, repeat(CHAIN_VOLUME))))
    return out


def _open_base(where: str, name: str) -> PackedDirectory:
    try:
        return source.directory(where)
    except NotFound as e:
        raise NotFound(f"{name} is missing at {where}: give it with --base PATH") from e
    except PgBlobDumpError as e:
        raise type(e)(f"{name} at {where}: {e}; give the right one with --base PATH") from e


def _check_link(archive: PackedDirectory, entry: ChainLink, before: list[ChainLink],
                name: str, where: str) -> None:  # fmt: skip
    """``archive`` is the base ``entry`` names, whole: its manifest (by checksum), its own
    chain (``before``), its index and its volumes' sizes as its manifest lists them."""
    if archive.manifest_sum != entry.manifest:
        raise CorruptArchive(
            f"{name} at {where}: its manifest.json is not the one the chain names (xxh3-128"
            f" {archive.manifest_sum}, expected {entry.manifest}): it changed after"
            " the incremental was made, or is another archive; give the right one with --base"
        )
    own = [e.manifest for e in archive.incremental.chain] if archive.incremental else []
    if own != [e.manifest for e in before]:
        raise CorruptArchive(f"{name} at {where}: its own chain differs from the one named")
    archive.check_index()
    assert archive.manifest is not None
    for f in archive.manifest.files:
        n = f.name
        if not archive.storage.exists(n):
            raise CorruptArchive(f"{name} at {where}: {n} is missing (its manifest lists it)")
        if archive.storage.size(n) != f.size:
            raise CorruptArchive(
                f"{name} at {where}: {n} is {archive.storage.size(n):,} bytes, its manifest"
                f" says {f.size:,}"
            )


class _Wanted:
    """The top's records of the LOs one base holds (volume CHAIN_VOLUME, that depth), in
    OID order within ``first..last``, as columns read a block at a time."""

    def __init__(self, index: Index, depth: int, first: int, last: int) -> None:
        self._blocks = index.raw_blocks(first, last)
        self.depth, self.first, self.last = depth, first, last
        self.oids: list[int] = []
        self.metas: list[int] = []
        self.sizes: list[int] = []
        self.sums: list[int] = []
        self.pos = 0

    def _fill(self) -> bool:
        while self.pos >= len(self.oids):
            raw = next(self._blocks, None)
            if raw is None:
                return False
            self.pos = 0
            cols = _columns(raw, self.depth, self.first, self.last)
            self.oids, self.metas, self.sizes, self.sums = cols
        return True

    def peek(self) -> int | None:
        return self.oids[self.pos] if self._fill() else None

    def through(self, last: int) -> tuple[list[int], list[int], list[int], list[int]]:
        """The wanted records with OIDs up to ``last``: oids, metadata ids, sizes, sums."""
        out: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        while self._fill():
            end = bisect.bisect_right(self.oids, last, self.pos)
            for col, src in zip(out, (self.oids, self.metas, self.sizes, self.sums), strict=True):
                col.extend(src[self.pos : end])
            self.pos = end
            if end < len(self.oids):
                break
        return out


def _columns(raw: bytes, depth: int, first: int, last: int
             ) -> tuple[list[int], list[int], list[int], list[int]]:  # fmt: skip
    """Of a block's raw records, those placed in base ``depth`` with OIDs in
    ``first..last``, as columns: oids, metadata ids, sizes, checksums (each step a
    loop in C: map, compress)."""
    if not COLUMNS_OK:
        rows = [r for r in INDEX_RECORD.iter_unpack(raw)
                if r[3] == CHAIN_VOLUME and r[4] == depth and first <= r[0] <= last]  # fmt: skip
        return (
            [r[0] for r in rows],
            [r[1] for r in rows],
            [r[2] for r in rows],
            [r[5] for r in rows],
        )
    cols = memoryview(raw).cast("B").cast("I")
    oids, volumes, depths = cols[0::9].tolist(), cols[4::9].tolist(), cols[5::9].tolist()
    n = len(oids)
    picks = [oids] + [cols[k::9].tolist() for k in (1, 2, 3, 7, 8)]
    in_range = first <= oids[0] and oids[-1] <= last
    if not (in_range and volumes.count(CHAIN_VOLUME) == n and depths.count(depth) == n):
        mask: Iterator[Any] = map(operator.and_, map(operator.eq, volumes, repeat(CHAIN_VOLUME)),
                                  map(operator.eq, depths, repeat(depth)))  # fmt: skip
        if not in_range:
            mask = map(operator.and_, mask, (first <= o <= last for o in oids))
        flags = list(mask)
        picks = [list(compress(col, flags)) for col in picks]
    oids, metas, size_lo, size_hi, sum_lo, sum_hi = picks
    return oids, metas, _wide(size_lo, size_hi), _wide(sum_lo, sum_hi)


def _wide(lows: list[int], highs: list[int]) -> list[int]:
    """64-bit values from their low and high 32 bits."""
    if not any(highs):
        return lows
    return list(map(operator.or_, lows, map(operator.lshift, highs, repeat(32))))


class _Peek:
    """Items of one archive in OID order, given up to an OID (``ordered_items``): a run
    of whole LOs is given in slices, from where the last one ended."""

    def __init__(self, items: Iterator[Item]) -> None:
        self._items = items
        self._next: Item | None = None
        self._at = 0  # where the rest of a WholeLos run starts

    def head(self) -> int | None:
        if self._next is None:
            self._next, self._at = next(self._items, None), 0
        item = self._next
        if item is None:
            return None
        if isinstance(item, WholeLos):
            return item.oids[self._at]
        assert isinstance(item, LoPiece)
        return item.oid

    def through(self, last: int) -> Iterator[Item]:
        """Items with OIDs up to ``last`` (a run cut there); an LO's pieces all go."""
        while (h := self.head()) is not None and h <= last:
            item = self._next
            if isinstance(item, WholeLos):
                at = self._at
                cut = bisect.bisect_right(item.oids, last, at)
                if at or cut < len(item.oids):
                    item = WholeLos(item.oids[at:cut], item.metas[at:cut], item.datas[at:cut],
                                    item.checksums[at:cut])  # fmt: skip
                if cut < len(self._next.oids):  # type: ignore[union-attr]
                    self._at = cut
                    yield item
                    return
            self._next = None
            assert item is not None
            yield item


def _taken(items: Iterator[Item], wanted: _Wanted, metas: list[Meta],
           where: str) -> Iterator[Item]:  # fmt: skip
    """Of a base's ``items`` (OID order), the LOs ``wanted`` names, each with the
    metadata the top gives it (``metas``) and checked against its record there (size,
    checksum). A run of whole LOs all wanted passes whole (lists compared at C speed)."""

    def missing(oid: int) -> CorruptArchive:
        return CorruptArchive(f"{where}: does not hold LO {oid}, which its incremental"
                              " places there")  # fmt: skip

    def differs(oid: int) -> CorruptArchive:
        return CorruptArchive(f"{where}: LO {oid} is not the one its incremental names (checksum)")

    keep = False  # the pieces of the LO being read pass
    for item in items:
        if isinstance(item, WholeLos):
            oids, ids, sizes, sums = wanted.through(item.oids[-1])
            if oids == item.oids:
                if sums != item.checksums or sizes != list(map(len, item.datas)):
                    bad = [o for o, a, b in zip(oids, sums, item.checksums, strict=True) if a != b]
                    raise differs(bad[0] if bad else oids[0])
                yield WholeLos(oids, [metas[i] for i in ids], item.datas, item.checksums)
                continue
            at = dict(zip(item.oids, range(len(item.oids)), strict=True))
            try:
                picked = [at[o] for o in oids]
            except KeyError as e:
                raise missing(e.args[0]) from None
            if not picked:
                continue
            datas = [item.datas[k] for k in picked]
            checksums = [item.checksums[k] for k in picked]
            if checksums != sums or list(map(len, datas)) != sizes:
                bad = [o for o, a, b in zip(oids, sums, checksums, strict=True) if a != b]
                raise differs(bad[0] if bad else oids[0])
            yield WholeLos(oids, [metas[i] for i in ids], datas, checksums)
        elif isinstance(item, LoPiece):
            if item.offset == 0:
                oids, ids, sizes, sums = wanted.through(item.oid)
                if (oids and oids[-1] != item.oid) or len(oids) > 1:
                    raise missing(oids[0])
                keep = bool(oids)
                if keep:
                    meta, size, checksum = metas[ids[0]], sizes[0], sums[0]
            if not keep:
                continue
            if item.last and (item.checksum, item.size) != (checksum, size):
                raise differs(item.oid)
            yield dataclasses.replace(item, meta=meta)
        elif isinstance(item, Damaged):  # not asked for (no --skip-damaged on chains)
            raise CorruptArchive(f"{item.where}: {item.reason}")
    rest = wanted.peek()
    if rest is not None:
        raise missing(rest)
