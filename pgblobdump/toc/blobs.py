"""Walk LO data: custom-format BLOBS data blocks, directory-format blobs TOC files.

Custom format (pg_backup_custom.c): each data block starts with _readBlockHeader's type
byte (BLK_DATA 1, BLK_BLOBS 3) and Int dump id. A BLK_DATA block is chunks of
``[Int length][bytes]`` ended by length 0 (_skipData). A BLK_BLOBS block repeats
``Int oid`` + chunks until oid 0 (_LoadLOs / _skipLOs); OIDs >= 2^31 are written through a
signed int and come back negative, so they are masked to 32 bits. When the TOC has the
block's position (K_OFFSET_POS_SET) we seek there; a dump written to a pipe has no
positions, so blocks are read one after another from the end of the TOC.

Directory format (pg_backup_directory.c): the BLOBS entry names a text file (``blobs.toc``,
or ``blobs_<dumpId>.toc`` from 1.16) of ``<oid> blob_<oid>.dat`` lines; the data file
carries the compression suffix (``.gz``, ``.lz4``, ``.zst``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial

from pgblobdump.errors import CorruptArchive, from_os_error
from pgblobdump.toc import streamend
from pgblobdump.toc.compression import SUFFIXES, Stream
from pgblobdump.toc.fields import (
    F_DATA_OFFSET,
    F_DATA_STATE,
    F_DEPENDENCIES,
    F_DESC,
    F_DUMP_ID,
    F_FILENAME,
    F_OWNER,
    RawEntry,
)
from pgblobdump.toc.lodata import SizeRun, read_chunks, walk_data, walk_sizes
from pgblobdump.toc.primitives import K_OFFSET_NO_DATA, K_OFFSET_POS_SET, Reader
from pgblobdump.toc.reader import Archive

BLK_DATA = 1
"""A table's (or other entry's) data block."""
BLK_BLOBS = 3
"""A BLOBS entry's block: the data of a group of large objects."""


@dataclass(frozen=True)
class BlobsEntry:
    """A BLOBS TOC entry: its dump id, owner, the BLOB METADATA dump ids it depends on,
    and where its data is (custom: Offset flag and position; directory: list file)."""

    dump_id: int
    owner: str | None
    dependencies: tuple[int, ...]
    data_state: int | None
    data_offset: int
    filename: str | None


class LoData:
    """One LO's data as the walk finds it: ``size`` the stored (possibly compressed) byte
    count, ``blobs_id`` the BLOBS entry holding it, ``member`` its data file (directory
    and tar archives). ``pieces()`` gives its bytes, decompressed, as pg_dump read them
    from the server: once, and before the walk moves on to the next LO."""

    __slots__ = ("_read", "blobs_id", "member", "oid", "size")

    def __init__(
        self,
        oid: int,
        size: int,
        blobs_id: int,
        member: str | None,
        read: Callable[[], Iterator[bytes]],
    ) -> None:
        self.oid = oid
        self.size = size
        self.blobs_id = blobs_id
        self.member = member
        self._read = read

    def pieces(self) -> Iterator[bytes]:
        return self._read()

    def __repr__(self) -> str:
        return f"LoData(oid={self.oid}, size={self.size}, blobs_id={self.blobs_id})"


def blobs_entry(raw: RawEntry) -> BlobsEntry:
    """A BLOBS entry from its raw TOC fields."""
    fname, owner = raw[F_FILENAME], raw[F_OWNER]
    return BlobsEntry(
        raw[F_DUMP_ID],
        None if owner is None else owner.decode("utf-8", "replace"),
        raw[F_DEPENDENCIES],
        raw[F_DATA_STATE],
        raw[F_DATA_OFFSET],
        None if fname is None else fname.decode("utf-8", "replace"),
    )


def blobs_entries(archive: Archive) -> list[BlobsEntry]:
    """Every BLOBS entry of the archive, in TOC order (few: one per 1000 LOs at most)."""
    return [
        blobs_entry(raw)
        for raw in archive.iter_items()
        if type(raw) is tuple and raw[F_DESC] == b"BLOBS"  # BlobRuns are BLOB entries
    ]


# -- custom format -------------------------------------------------------------------
def _skip_data_block(r: Reader) -> None:
    """_skipData: chunks until a zero length."""
    while True:
        n = r.read_int("a data chunk length")
        if n == 0:
            return
        if n < 0:
            raise CorruptArchive(f"{r.name}: negative chunk length at byte {r.offset - 5}")
        r.skip(n, "a data chunk")


def _block_header(r: Reader) -> tuple[int, int]:
    """_readBlockHeader: (type, dump id)."""
    kind = r.read_byte("a data block header")
    dump_id = r.read_int("a data block header")
    return kind, dump_id


def _custom_blocks(
    archive: Archive, known: list[BlobsEntry] | None
) -> Iterator[tuple[Reader, int, int | None]]:
    """(reader, BLOBS dump id, limit) per LO data block, the reader at the block's first
    LO; the caller walks the block (to its end) before asking for the next one. ``limit``
    is where the block must end (the next block's start), None when unknown."""
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
                kind, dump_id = _block_header(r)
                if kind != BLK_BLOBS or dump_id != e.dump_id:
                    raise CorruptArchive(
                        f"{archive.name}: found block type {kind} of entry {dump_id} at byte"
                        f" {e.data_offset}, expected the large objects of entry {e.dump_id}"
                    )
                yield r, e.dump_id, limit
            return
        # No positions (written to a pipe): read every block in file order.
        r.seek(archive.data_start())
        wanted = {e.dump_id for e in entries}
        while wanted and not r.at_eof():
            kind, dump_id = _block_header(r)
            if kind == BLK_BLOBS:
                wanted.discard(dump_id)
                yield r, dump_id, None
            elif kind == BLK_DATA:
                _skip_data_block(r)
            else:
                raise CorruptArchive(
                    f"{archive.name}: unrecognized data block type {kind} at byte {r.offset - 6}"
                )


def data_blocks(archive: Archive) -> Iterator[tuple[int, int, int, int]]:
    """(block type, dump id, first byte, end) of every data block of a custom archive,
    walked in file order from the end of the TOC (a pipe-written archive has no
    positions to go by)."""
    with archive.toc_path.open("rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = archive.header
        r = Reader(f, archive.name, h.int_size, h.off_size, size)
        r.seek(archive.data_start())
        while not r.at_eof():
            start = r.offset
            kind, dump_id = _block_header(r)
            if kind == BLK_DATA:
                _skip_data_block(r)
            elif kind == BLK_BLOBS:
                for _ in walk_sizes(r, dump_id):
                    pass
            else:
                raise CorruptArchive(
                    f"{archive.name}: unrecognized data block type {kind} at byte {start}"
                )
            yield kind, dump_id, start, r.offset


def _custom_size_runs(
    archive: Archive, known: list[BlobsEntry] | None
) -> Iterator[tuple[int, int, int] | SizeRun]:
    for r, blobs_id, limit in _custom_blocks(archive, known):
        yield from walk_sizes(r, blobs_id, runs=True, limit=limit)


def _custom_data(archive: Archive, known: list[BlobsEntry] | None) -> Iterator[LoData]:
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
    for r, blobs_id, limit in _custom_blocks(archive, known):
        for oid, size, stored in walk_data(r, blobs_id, limit):
            step += 1
            read: Callable[[], Iterator[bytes]]
            if stored is None:
                read = partial(pieces, r, oid, r.offset, step)
            elif stored in empty:
                read = _NOTHING
            else:
                read = partial(empty.decode, oid, stored, r.offset - len(stored) - 5)
            yield LoData(oid, size, blobs_id, None, read)


def _NOTHING() -> Iterator[bytes]:
    return iter(())


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


# -- directory format ----------------------------------------------------------------
def list_file(archive: Archive, e: BlobsEntry) -> str:
    """The member listing the LOs of BLOBS entry ``e`` (directory or tar archive)."""
    assert e.filename
    if archive.kind != "tar":
        return e.filename
    # pg_backup_tar.c names the entry "<id>.dat" but writes the LO list as a member of
    # its own: blobs.toc (1.15) or, by analogy, blobs_<id>.toc.
    return next(
        (n for n in (f"blobs_{e.dump_id}.toc", "blobs.toc") if archive.member_size(n) is not None),
        e.filename,
    )


def list_oids(archive: Archive, e: BlobsEntry) -> Iterator[tuple[int, str]]:
    """(oid, data file name without suffix) per line of ``e``'s LO list file."""
    name = list_file(archive, e)
    with archive.open_member(name) as f:
        listing = f.read()
    for number, line in enumerate(listing.splitlines(), 1):
        if not line.strip():
            continue
        try:
            oid_text, member = line.decode("utf-8").split(" ", 1)
            oid = int(oid_text)
        except (UnicodeDecodeError, ValueError) as ex:
            raise CorruptArchive(
                f"{archive.name}: {name} line {number} is not '<oid> <file>'"
            ) from ex
        yield oid, member


def _directory_los(
    archive: Archive, known: list[BlobsEntry] | None = None, verify: bool = False
) -> Iterator[LoData]:
    """The LOs of the list files with their data files' sizes. ``verify``: also check
    that each compressed data file holds a whole stream (streamend), which reads it."""
    algorithm = archive.header.compression
    suffix = SUFFIXES.get(algorithm, "")
    check = verify and algorithm != "none"
    incomplete = streamend.incomplete

    def damage(head: bytes, size: int, pread: streamend.PRead) -> str | None:
        return incomplete(head, size, pread, algorithm)

    # A directory: one open and one read per small data file (no stat, no Path), the
    # bytes kept for ``pieces``: a million LO files are most of a pack's time.
    fast = archive.kind == "directory" and not check
    prefix = archive.member_path("") if fast else ""
    for e in blobs_entries(archive) if known is None else known:
        if not e.filename:
            continue
        for oid, member in list_oids(archive, e):
            if check:
                found = archive.check_member(member + suffix, damage)
                size, reason = found if found is not None else (None, None)
                if reason is not None:
                    raise CorruptArchive(
                        f"{archive.name}: damaged data file {member}{suffix} of large object"
                        f" {oid}: {reason}"
                    )
            elif fast:
                got = _read_small(prefix + member + suffix, archive.name)
                if got is not None:
                    data, size = got
                    member += suffix
                    read = (
                        partial(_memory_pieces, archive.name, oid, member, algorithm, data)
                        if data is not None
                        else partial(_file_pieces, archive, oid, member, algorithm)
                    )
                    yield LoData(oid, size, e.dump_id, member, read)
                    continue
                size = None
            else:
                size = archive.member_size(member + suffix)
            compressed = size is not None
            if size is None:
                size = archive.member_size(member)  # an uncompressed file: no framing
                if size is None:
                    raise CorruptArchive(
                        f"{archive.name}: large object {oid} has no data file:"
                        f" {member}{suffix} is missing (listed in {list_file(archive, e)})"
                    )
            else:
                member += suffix
            how = algorithm if compressed else "none"
            read = partial(_file_pieces, archive, oid, member, how)
            yield LoData(oid, size, e.dump_id, member, read)


SMALL_FILE = 1 << 16
"""LO data files up to this size are read whole when the walk meets them."""


def _read_small(path: str, name: str) -> tuple[bytes | None, int] | None:
    """(bytes, size) of a data file read whole when small, (None, size) when larger;
    None when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, ValueError):  # ValueError: a NUL in a damaged list
        return None
    except OSError as e:  # there but unreadable (EACCES...): 11, not a missing LO file
        raise from_os_error(e, what=f"{name}: cannot read {path}") from e
    try:
        data = os.read(fd, SMALL_FILE)
        if len(data) < SMALL_FILE:
            return data, len(data)
        return None, os.fstat(fd).st_size
    except OSError as e:  # EISDIR (a directory under the name), EIO
        raise from_os_error(e, what=f"{name}: cannot read {path}") from e
    finally:
        os.close(fd)


def _memory_pieces(
    name: str, oid: int, member: str, algorithm: str, data: bytes
) -> Iterator[bytes]:
    """The bytes of LO ``oid`` from its data file's bytes, read whole, decompressed."""
    d = Stream(algorithm, name, oid, member)
    if piece := d.feed(data, 0):
        yield piece
    if piece := d.finish():
        yield piece


def _file_pieces(archive: Archive, oid: int, member: str, algorithm: str) -> Iterator[bytes]:
    """The bytes of LO ``oid`` from its data file ``member``, decompressed."""
    where = f"{archive.name}: large object {oid} in {member}"
    d = Stream(algorithm, archive.name, oid, member)
    with archive.open_member(member) as f:
        at = 0
        while True:
            try:
                chunk = f.read(1 << 20)
            except OSError as e:
                raise from_os_error(e, what=f"{where}: cannot read") from e
            if not chunk:
                break
            if piece := d.feed(chunk, at):
                yield piece
            at += len(chunk)
    if piece := d.finish():
        yield piece


# -- public ----------------------------------------------------------------------------
def iter_data(archive: Archive, known: list[BlobsEntry] | None = None) -> Iterator[LoData]:
    """Every LO with data in the archive, in data order, in one pass: its stored size is
    known at once, its bytes are read when ``pieces()`` is iterated (at most once, before
    the next LO is asked for) and skipped otherwise. ``known`` as for iter_sizes."""
    if archive.kind == "custom":
        yield from _custom_data(archive, known)
    else:
        yield from _directory_los(archive, known)


def iter_sizes(
    archive: Archive, known: list[BlobsEntry] | None = None, verify: bool = False
) -> Iterator[tuple[int, int, int]]:
    """iter_data's sizes, flat: (oid, stored size, BLOBS dump id) per LO.

    ``known`` are the archive's BLOBS entries when a caller already has them (saves a
    pass over the TOC); ``verify`` as for iter_size_runs."""
    return flat(iter_size_runs(archive, known, verify))


def flat(items: Iterable[tuple[int, int, int] | SizeRun]) -> Iterator[tuple[int, int, int]]:
    """iter_size_runs' items as (oid, stored size, BLOBS dump id), one per LO."""
    for item in items:
        if isinstance(item, SizeRun):
            size, blobs_id = item.size, item.blobs_id
            for oid in item.oids:
                yield (oid, size, blobs_id)
        else:
            yield item


def iter_size_runs(
    archive: Archive, known: list[BlobsEntry] | None = None, verify: bool = False
) -> Iterator[tuple[int, int, int] | SizeRun]:
    """The sizes of iter_data, without reading any LO's bytes: (oid, stored size, BLOBS
    dump id) per LO, or a SizeRun for a run of same-size LOs of a custom archive.

    ``verify``: in a directory or tar archive, also check that each compressed data file
    holds a whole stream, which reads every file instead of taking its size (a custom
    archive's walk already checks every chunk length against the file)."""
    if archive.kind == "custom":
        yield from _custom_size_runs(archive, known)
    else:
        for lo in _directory_los(archive, known, verify):
            yield (lo.oid, lo.size, lo.blobs_id)
