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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pgblobdump.errors import ArchiveError, CorruptArchive
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
from pgblobdump.toc.lodata import Chunk, SizeRun, walk_sizes
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


@dataclass(frozen=True)
class StoredLo:
    """One LO's data as stored: ``size`` is the stored (possibly compressed) byte count;
    ``blobs_id`` the dump id of the BLOBS entry holding it; ``member`` the data file of a
    directory archive."""

    oid: int
    size: int
    blobs_id: int
    member: str | None = None


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
def _walk_lo_block(
    r: Reader, blobs_id: int, keep: int | None, limit: int | None
) -> Iterator[StoredLo | Chunk]:
    """Read LOs of one BLK_BLOBS block; yield a StoredLo per LO. For the LO whose oid is
    ``keep`` also yield its raw chunks (Chunk) before its StoredLo."""
    for item in walk_sizes(r, blobs_id, keep, runs=True, limit=limit):
        if isinstance(item, Chunk):
            yield item
        elif isinstance(item, SizeRun):
            for oid in item.oids:
                yield StoredLo(oid, item.size, blobs_id)
        else:
            yield StoredLo(item[0], item[1], blobs_id)


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


def _walk(
    r: Reader, blobs_id: int, keep: int | None, tuples: bool, limit: int | None = None
) -> Iterator[StoredLo | Chunk | tuple[int, int, int] | SizeRun]:
    if tuples:
        return walk_sizes(r, blobs_id, runs=True, limit=limit)
    return _walk_lo_block(r, blobs_id, keep, limit)


def _custom_los(
    archive: Archive,
    keep: int | None,
    tuples: bool = False,
    known: list[BlobsEntry] | None = None,
) -> Iterator[StoredLo | Chunk | tuple[int, int, int] | SizeRun]:
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
                yield from _walk(r, e.dump_id, keep, tuples, limit)
            return
        # No positions (written to a pipe): read every block in file order.
        r.seek(archive.data_start())
        wanted = {e.dump_id for e in entries}
        while wanted and not r.at_eof():
            kind, dump_id = _block_header(r)
            if kind == BLK_BLOBS:
                wanted.discard(dump_id)
                yield from _walk(r, dump_id, keep, tuples)
            elif kind == BLK_DATA:
                _skip_data_block(r)
            else:
                raise CorruptArchive(
                    f"{archive.name}: unrecognized data block type {kind} at byte {r.offset - 6}"
                )


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
) -> Iterator[StoredLo]:
    """The LOs of the list files with their data files' sizes. ``verify``: also check
    that each compressed data file holds a whole stream (streamend), which reads it."""
    algorithm = archive.header.compression
    suffix = SUFFIXES.get(algorithm, "")
    check = verify and algorithm != "none"
    incomplete = streamend.incomplete

    def damage(head: bytes, size: int, pread: streamend.PRead) -> str | None:
        return incomplete(head, size, pread, algorithm)

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
            else:
                size = archive.member_size(member + suffix)
            if size is None:
                size = archive.member_size(member)  # an uncompressed file: no framing
                if size is None:
                    raise CorruptArchive(
                        f"{archive.name}: large object {oid} has no data file:"
                        f" {member}{suffix} is missing (listed in {list_file(archive, e)})"
                    )
            else:
                member += suffix
            yield StoredLo(oid, size, e.dump_id, member)


# -- public ----------------------------------------------------------------------------
def iter_stored(archive: Archive) -> Iterator[StoredLo]:
    """Every LO with data in the archive, in data order, with its stored size."""
    if archive.kind == "custom":
        for item in _custom_los(archive, None):
            assert isinstance(item, StoredLo)
            yield item
    else:
        yield from _directory_los(archive)


def iter_sizes(
    archive: Archive, known: list[BlobsEntry] | None = None, verify: bool = False
) -> Iterator[tuple[int, int, int]]:
    """The fast form of iter_stored: (oid, stored size, BLOBS dump id) per LO.

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
    """iter_sizes with runs of same-size LOs of a custom archive kept as SizeRuns.

    ``verify``: in a directory or tar archive, also check that each compressed data file
    holds a whole stream, which reads every file instead of taking its size (a custom
    archive's walk already checks every chunk length against the file)."""
    if archive.kind == "custom":
        for item in _custom_los(archive, None, tuples=True, known=known):
            assert isinstance(item, tuple | SizeRun)
            yield item
    else:
        for lo in _directory_los(archive, known, verify):
            yield (lo.oid, lo.size, lo.blobs_id)


def read_lo(archive: Archive, oid: int) -> Iterator[bytes]:
    """The bytes of LO ``oid``, decompressed, in pieces; empty iterator if absent (the
    caller checks presence through find_lo)."""
    algorithm = archive.header.compression
    if archive.kind == "custom":
        d = Stream(algorithm, archive.name, oid)
        for item in _custom_los(archive, oid):
            if isinstance(item, Chunk):
                yield d.feed(item.data, item.offset)
            elif isinstance(item, StoredLo) and item.oid == oid:
                yield d.finish()
                return
        return
    for lo in _directory_los(archive):
        if lo.oid != oid:
            continue
        assert lo.member is not None
        whole = lo.member.endswith(SUFFIXES.get(algorithm) or "\0")
        where = f"{archive.name}: large object {oid} in {lo.member}"
        d = Stream(algorithm if whole else "none", archive.name, oid, lo.member)
        with archive.open_member(lo.member) as f:
            at = 0
            while True:
                try:
                    chunk = f.read(1 << 20)
                except OSError as e:
                    raise ArchiveError(f"{where}: cannot read: {e.strerror or e}") from e
                if not chunk:
                    break
                yield d.feed(chunk, at)
                at += len(chunk)
        yield d.finish()
        return


def find_lo(archive: Archive, oid: int) -> StoredLo | None:
    """Where LO ``oid`` is stored, or None."""
    return next((lo for lo in iter_stored(archive) if lo.oid == oid), None)
