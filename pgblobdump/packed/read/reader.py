"""Read a packed archive: its manifest and index for random access (``ls``, ``cat``), its
frames front to back for restore, from a directory or from a stream."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import xxhash

from pgblobdump.errors import (
    CorruptArchive,
    DamagedData,
    NotAnArchive,
    NotFound,
    UnsupportedArchive,
    UsageError,
)
from pgblobdump.packed.format import columns
from pgblobdump.packed.format.frames import Frame, FrameReader, Piece
from pgblobdump.packed.format.holes import filled, hash_zeros
from pgblobdump.packed.format.index import Index, IndexRecord, Meta, MetaTable
from pgblobdump.packed.format.indexcheck import UNREAD, check_whole
from pgblobdump.packed.format.manifest import Incremental, Manifest
from pgblobdump.packed.format.spec import (
    INDEX_NAME,
    LO_SIZE_MAX,
    MANIFEST_NAME,
    VOLUME_HEADER,
    VOLUME_MAGIC,
    FrameKind,
    version_problem,
    volume_name,
    volume_of,
)
from pgblobdump.packed.read.items import Damaged, Item, LoPiece, WholeLos, each_piece
from pgblobdump.storage import Storage
from pgblobdump.storage.base import CLAIM_NAME

_EMPTY = xxhash.xxh3_64_intdigest(b"")


class _Assembler:
    """Turns frames' pieces into LoPieces, checking each LO's checksum and continuity."""

    def __init__(
        self, metas: MetaTable | None, where: str, keep: tuple[int, int] | None = None
    ) -> None:
        self.metas = metas
        self.where = where
        self.keep = keep
        """Only LOs with OIDs in this range (restore --part); the others are passed over."""
        self._open: tuple[int, int, Any] | None = None  # (oid, next offset, hasher)
        self.los = 0
        self.bytes = 0

    def meta(self, meta_id: int) -> Meta:
        if self.metas is None:
            return Meta(None, None, None)
        try:
            return self.metas.values[meta_id]
        except IndexError:
            raise CorruptArchive(f"{self.where}: metadata id {meta_id} out of range") from None

    def items(self, frame: Frame, name: str) -> list[Item]:
        """The frame's LOs, all checked before any is given: runs of whole ones, and the
        pieces of large ones (a large LO's checksum is checked with its last piece)."""
        where = f"{name} frame at byte {frame.offset:,}"
        if self._open is None:
            run = self._whole(frame, where)
            if run is not None:
                return run
        out: list[Item] = []
        view = memoryview(frame.data)
        values = self.metas.values if self.metas is not None else None
        digest = xxhash.xxh3_64_intdigest
        oids: list[int] = []
        metas: list[Meta] = []
        datas: list[bytes | memoryview] = []
        sums: list[int] = []
        at = total = whole = 0
        keep = self.keep
        for p in frame.pieces:
            oid, meta_id, size, offset, length, checksum = p
            data = view[at : at + length]
            at += length
            if keep is not None and not keep[0] <= oid <= keep[1]:
                continue
            if offset or length != size:  # a piece of a large LO
                if oids:
                    out.append(WholeLos(oids, metas, datas, sums))
                    oids, metas, datas, sums = [], [], [], []
                out.append(self._piece(p, data, where))
                continue
            if self._open is not None:
                raise CorruptArchive(f"{where}: LO {self._open[0]} is cut short")
            if checksum != _EMPTY if not length else digest(data) != checksum:
                raise CorruptArchive(f"{where}: LO {oid} is damaged (checksum)")
            whole += 1
            oids.append(oid)
            metas.append(self.meta(meta_id) if values is None or meta_id >= len(values)
                         else values[meta_id])  # fmt: skip
            datas.append(data)
            sums.append(checksum)
            total += length
        if oids:
            out.append(WholeLos(oids, metas, datas, sums))
        self.los += whole
        self.bytes += total
        return out

    def pieces(self, frame: Frame, name: str) -> Iterator[LoPiece]:
        return each_piece(self.items(frame, name))

    def _whole(self, frame: Frame, where: str) -> list[Item] | None:
        """A frame of whole LOs only, all kept, as one run read from the columns of its
        directory (packed/format/columns.py); None: the piece-by-piece reading takes it."""
        values = self.metas.values if self.metas is not None else None
        run = columns.whole_los(frame, values, self.keep, where)
        if run is None:
            return None
        oids, metas, datas, sums, total = run
        self.los += len(oids)
        self.bytes += total
        return [WholeLos(oids, metas, datas, sums)] if oids else []

    def drop_open(self) -> int | None:
        """Forget the large LO being assembled (damage cut it); its OID, if any."""
        oid = self._open[0] if self._open is not None else None
        self._open = None
        return oid

    def _piece(self, p: Piece, data: memoryview, where: str) -> LoPiece:
        whole = p.offset == 0 and p.length == p.size
        if whole:
            if self._open is not None:
                raise CorruptArchive(f"{where}: LO {self._open[0]} is cut short")
            if xxhash.xxh3_64_intdigest(data) != p.checksum:
                raise CorruptArchive(f"{where}: LO {p.oid} is damaged (checksum)")
            self.los += 1
            self.bytes += p.size
            return LoPiece(p.oid, self.meta(p.meta), p.size, 0, data, True, p.checksum)
        if p.offset == 0:
            if self._open is not None:
                raise CorruptArchive(f"{where}: LO {self._open[0]} is cut short")
            self._open = (p.oid, 0, xxhash.xxh3_64())
        if (
            self._open is None
            or self._open[0] != p.oid
            or self._open[1] > p.offset
            or p.offset + p.length > p.size
            or p.size > LO_SIZE_MAX
        ):
            raise CorruptArchive(f"{where}: a piece of LO {p.oid} is out of place")
        h = self._open[2]
        if p.offset > self._open[1]:
            hash_zeros(h, p.offset - self._open[1])  # a hole: zeros, not stored
        h.update(data)
        self._open = (p.oid, p.offset + p.length, h)
        if p.last:
            if h.intdigest() != p.checksum:
                raise CorruptArchive(f"{where}: LO {p.oid} is damaged (checksum)")
            self._open = None
            self.los += 1
            self.bytes += p.size
        return LoPiece(p.oid, self.meta(p.meta), p.size, p.offset, data, p.last, p.checksum)

    def end(self) -> None:
        if self._open is not None:
            raise CorruptArchive(f"{self.where}: LO {self._open[0]} is cut short at the end")


class PackedDirectory:
    """A packed archive in a storage. Refuses one without a manifest (an interrupted
    dump) unless ``complete_only`` is False (verify reports such an archive instead)."""

    def __init__(self, storage: Storage, complete_only: bool = True) -> None:
        self.storage = storage
        self.where = storage.description
        self.manifest: Manifest | None = None
        self.manifest_sum = ""
        """xxh3-128 of manifest.json: what an incremental archive names its base by."""
        if storage.exists(MANIFEST_NAME):
            with storage.open(MANIFEST_NAME) as f:
                body = f.read()
            self.manifest = Manifest.parse(body, f"{self.where}/{MANIFEST_NAME}")
            self.manifest_sum = xxhash.xxh3_128_hexdigest(body)
        elif complete_only:
            names = storage.names()
            if not names and getattr(storage, "missing_when_empty", False):
                raise NotFound(f"{self.where}: no such archive (nothing under this prefix)")
            if INDEX_NAME in names or any(n.startswith("data-") or n == CLAIM_NAME for n in names):
                # On S3, what is stored yet invisible: the upload a killed dump was sending.
                uploads = getattr(storage, "uploads_left", lambda: None)()
                raise CorruptArchive(
                    f"{self.where}: no {MANIFEST_NAME}: an interrupted dump, not an archive"
                    + (f"; it left {uploads}, to abort (docs/s3.md)" if uploads else "")
                )
            raise NotAnArchive(f"{self.where}: not a packed archive (no {MANIFEST_NAME})")
        self._index: Index | None = None
        self._index_checked = False
        self._frame_starts: dict[str, list[tuple[int, list[int]]]] | None = None

    @property
    def index(self) -> Index:
        """The index, checked against the manifest on opening: its tables against
        ``index_tail`` and each block as it is read (the index of an archive written
        before ``index_tail``: the whole file first, ``check_index``). An archive without
        a manifest (verify of an interrupted dump) has nothing to check it against."""
        if self._index is None:
            name = f"{self.where}/{INDEX_NAME}"
            tail = None
            size = self.storage.size(INDEX_NAME)
            if self.manifest is not None:
                listed = self.manifest.listed_index(self.where)
                if size != listed.size:
                    raise CorruptArchive(
                        f"{name}: {size:,} bytes, the manifest says {listed.size:,}"
                        f" (truncated or damaged): {UNREAD}"
                    )
                tail = self.manifest.index_tail
                if tail is None:
                    self.check_index()
            self._index = Index(lambda off, n: self._exact(INDEX_NAME, off, n), size, name, tail)
        return self._index

    def check_index(self) -> None:
        """``index.pbi`` whole against the manifest (``indexcheck.check_whole``): what
        restore does before it writes anything, what a chain does for each base, and
        every reader of an index older than ``index_tail``. Once per archive opened."""
        if not self._index_checked:
            assert self.manifest is not None
            check_whole(self.storage, self.where, self.manifest.listed_index(self.where))
            self._index_checked = True

    def _exact(self, name: str, offset: int, length: int) -> bytes:
        data = self.storage.read_range(name, offset, length)
        if len(data) != length:
            raise CorruptArchive(
                f"{self.where}/{name}: ends before byte {offset + length:,} (truncated)"
            )
        return data

    def volumes(self) -> list[str]:
        """Volume names in restore order: worker by worker, each in sequence."""
        if self.manifest is not None:
            names = self.manifest.volumes
        else:
            names = [n for n in self.storage.names() if n.startswith("data-")]

        def order(n: str) -> tuple[int, int]:
            _d, w, num = n.split(".")[0].split("-")
            return int(w), int(num)

        return sorted(names, key=order)

    @contextlib.contextmanager
    def _frames(self, name: str, offset: int | None = None) -> Iterator[FrameReader]:
        where = f"{self.where}/{name}"
        if not self.storage.exists(name):
            raise CorruptArchive(f"{where}: missing (the manifest lists it)")
        with self.storage.open(name) as f:
            head = f.read(VOLUME_HEADER.size)
            if len(head) < VOLUME_HEADER.size or head[:8] != VOLUME_MAGIC:
                raise CorruptArchive(f"{where}: not a packed archive volume")
            if (why := version_problem(VOLUME_HEADER.unpack(head)[1])) is not None:
                raise UnsupportedArchive(f"{where}: volume {why}")
            start = VOLUME_HEADER.size
            if offset is not None:
                f.seek(offset)
                start = offset
            yield FrameReader(f, where, start)

    def pieces(self, zeros: bool = True) -> Iterator[LoPiece]:
        """Every LO's bytes, volume by volume, checked, one LoPiece at a time, holes
        given as zeros (unpack) unless ``zeros`` is False (verify, which needs each LO's
        last piece only)."""
        pieces = each_piece(self._items())
        return filled(pieces) if zeros else pieces

    def whole(self) -> PackedDirectory:
        """This archive, refused (UsageError) when it is incremental: its volumes hold
        only what changed, the rest is in its bases (read it through packed/chain/archives.py)."""
        if self.incremental is not None:
            raise UsageError(
                f"{self.where} is an incremental archive: its other LOs are in its bases;"
                " restore it, or merge it into one standalone archive first (pgblobdump merge)"
            )
        return self

    def items(self, skip_damaged: bool = False) -> Iterator[Item]:
        """Every LO's bytes, volume by volume, checked, whole LOs in runs (restore).
        ``skip_damaged``: the LOs of a damaged frame (or volume) are given as a Damaged
        item, named from the index, and reading goes on at the next frame the index
        knows; otherwise the damage raises its CorruptArchive. Not of an incremental
        archive (``whole``)."""
        self.whole()
        return self._items(skip_damaged)

    def _items(self, skip_damaged: bool = False) -> Iterator[Item]:
        """``items`` of this archive's own volumes (an incremental's: what it holds)."""
        asm = _Assembler(self.index.metas, self.where)
        damaged = False
        for name in self.volumes():
            for item in self._volume_items(name, asm, skip_damaged):
                damaged = damaged or isinstance(item, Damaged)
                yield item
        if damaged:
            return  # the counts cannot match the manifest's: the damage was reported
        asm.end()
        m = self.manifest
        if m is not None and (asm.los, asm.bytes) != (m.los, m.bytes):
            raise CorruptArchive(
                f"{self.where}: volumes hold {asm.los:,} LOs and {asm.bytes:,} bytes;"
                f" the manifest says {m.los:,} and {m.bytes:,}"
            )

    def _volume_items(self, name: str, asm: _Assembler, skip: bool) -> Iterator[Item]:
        try:
            with self._frames(name) as frames:
                yield from self._frame_items(frames, name, asm, skip)
        except CorruptArchive as e:  # the volume itself: missing, or no volume header
            if not skip:
                if isinstance(e, DamagedData):  # met further down already
                    raise
                raise DamagedData(str(e)) from e  # restore names --skip-damaged
            cut = asm.drop_open()
            lost = self._lost_after(name, 0)
            yield Damaged(lost if cut is None else [cut, *lost], f"{self.where}/{name}", str(e))

    def _frame_items(
        self, frames: FrameReader, name: str, asm: _Assembler, skip: bool
    ) -> Iterator[Item]:
        while True:
            start = frames.offset
            try:
                frame = frames.next()
                if frame is None:
                    break
                if frame.kind != FrameKind.DATA:
                    raise CorruptArchive(f"{frames.name}: a {frame.kind.name} frame in a volume")
                out = asm.items(frame, frames.name)
            except CorruptArchive as e:
                if not skip:
                    if isinstance(e, DamagedData):  # met further down already
                        raise
                    raise DamagedData(str(e)) from e  # restore names --skip-damaged
                cut = asm.drop_open()
                lost, resume = self._lost(name, start)
                if cut is not None:
                    lost.insert(0, cut)
                if lost:  # (a frame holding only the rest of a large LO already lost: none)
                    yield Damaged(lost, f"{frames.name} at byte {start:,}", str(e))
                if resume is None:
                    return
                frames.seek(resume)
                continue
            yield from out
        if skip:  # frames the index knows past the end: a volume cut at a frame boundary
            lost = self._lost_after(name, frames.offset)
            if lost:
                reason = f"{frames.name}: ends at byte {frames.offset:,} (truncated)"
                yield Damaged(lost, frames.name, reason)

    def _frame_table(self) -> dict[str, list[tuple[int, list[int]]]]:
        """Per volume, the frames the index knows (those where an LO starts) in file order,
        with the OIDs whose first piece each holds: read once, only when damage is met."""
        if self._frame_starts is None:
            starts: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
            for r in self.index:
                starts[volume_name(*volume_of(r.volume))][r.offset].append(r.oid)
            self._frame_starts = {n: sorted(by.items()) for n, by in starts.items()}
        return self._frame_starts

    def _lost(self, name: str, start: int) -> tuple[list[int], int | None]:
        """The LOs whose first piece is in volume ``name``'s damaged frame at ``start``
        (those the index places from ``start`` up to the next frame it knows), and that
        next frame's offset, None when none follows."""
        lost: list[int] = []
        for offset, oids in self._frame_table().get(name, []):
            if offset > start:
                return lost, offset
            if offset == start:
                lost += oids
        return lost, None

    def _lost_after(self, name: str, end: int) -> list[int]:
        """The LOs the index places in frames of volume ``name`` at or after ``end``."""
        return [o for off, oids in self._frame_table().get(name, []) if off >= end for o in oids]

    def find(self, oid: int) -> IndexRecord:
        r = self.index.find(oid)
        if r is None:
            raise NotFound(f"LO {oid} is not in {self.where}")
        return r

    @property
    def incremental(self) -> Incremental | None:
        """An incremental archive's chain and counts (manifest ``incremental``); None for
        a standalone archive."""
        return None if self.manifest is None else self.manifest.incremental

    @property
    def ordered(self) -> bool:
        """Whether the volumes hold LOs in OID order (a dump); False for a pack of a
        pg_dump archive, whose LOs come in the archive's order."""
        return self.manifest is None or self.manifest.ordered

    def read_lo(self, oid: int) -> Iterator[bytes | memoryview]:
        """One LO's bytes, reading its index block and its frames only, checked: the
        frame the index names holds its first piece, and a large LO's other pieces fill
        the frames that follow (into the worker's next volume if need be)."""
        r = self.find(oid)
        if r.size == 0:
            if r.checksum != xxhash.xxh3_64_intdigest(b""):
                raise CorruptArchive(f"{self.where}: LO {oid} is damaged (checksum)")
            return
        for piece in filled(self._lo_pieces(r)):
            yield piece.data

    def _lo_pieces(self, r: IndexRecord) -> Iterator[LoPiece]:
        oid = r.oid
        worker, number = volume_of(r.volume)
        asm = _Assembler(self.index.metas, self.where)
        offset: int | None = r.offset
        while True:
            name = volume_name(worker, number)
            with self._frames(name, offset) as frames:
                for frame in frames:
                    found = False
                    for piece in asm.pieces(frame, frames.name):
                        if piece.oid == oid:
                            found = True
                            if piece.last and (piece.size, piece.checksum) != (r.size, r.checksum):
                                raise CorruptArchive(
                                    f"{self.where}: LO {oid} in the volumes is not the one"
                                    " the index names (size or checksum)"
                                )
                            yield piece
                            if piece.last:
                                return
                    if not found:
                        raise CorruptArchive(
                            f"{self.where}: the index and the volumes disagree about LO {oid}"
                        )
            number += 1
            offset = None
            if not self.storage.exists(volume_name(worker, number)):
                raise CorruptArchive(f"{self.where}: LO {oid} is cut short (missing volume)")
