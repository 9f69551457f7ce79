"""LO data in a directory or tar archive (pg_backup_directory.c, pg_backup_tar.c).

The BLOBS entry names a text file (``blobs.toc``, or ``blobs_<dumpId>.toc`` from 1.16) of
``<oid> blob_<oid>.dat`` lines; the data file carries the compression suffix (``.gz``,
``.lz4``, ``.zst``), and holds one whole compressed stream.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial

from pgblobdump.errors import CorruptArchive, from_os_error
from pgblobdump.toc import streamend
from pgblobdump.toc.compression import SUFFIXES, Stream
from pgblobdump.toc.lo.catalog import BlobsEntry, blobs_entries
from pgblobdump.toc.lo.data import LoData
from pgblobdump.toc.reader import Archive


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
    number = 0
    for block in _line_blocks(archive, name):
        for line in block.splitlines():
            number += 1
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


LIST_BLOCK = 1 << 18
"""How much of an LO list file is split into lines at a time."""


def _line_blocks(archive: Archive, name: str) -> Iterator[bytes]:
    """Member ``name`` in blocks of whole lines, each cut after a newline: pg_dump 16's
    blobs.toc lists every LO (20 MB for a million), and a walk holds no OID. A cut after
    b"\n" splits no b"\r\n", so the blocks' splitlines() are the whole file's."""
    with archive.open_member(name) as f:
        rest = b""
        while chunk := f.read(LIST_BLOCK):
            rest += chunk
            cut = rest.rfind(b"\n") + 1
            if cut:
                yield rest[:cut]
                rest = rest[cut:]
        if rest:
            yield rest


def data(
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
