"""LO data in a directory or tar archive (pg_backup_directory.c, pg_backup_tar.c).

The BLOBS entry names a text file (``blobs.toc``, or ``blobs_<dumpId>.toc`` from 1.16) of
``<oid> blob_<oid>.dat`` lines; the data file carries the compression suffix (``.gz``,
``.lz4``, ``.zst``), and holds one whole compressed stream.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from functools import partial
from itertools import islice
from operator import itemgetter

from pgblobdump.errors import CorruptArchive, PgBlobDumpError, from_os_error
from pgblobdump.toc import streamend
from pgblobdump.toc.compression import SUFFIXES, Stream
from pgblobdump.toc.lo.catalog import BlobsEntry, blobs_entries
from pgblobdump.toc.lo.data import LoData, nothing
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
        # Lines as pg_dump writes them (ASCII, '<digits> <file>', no CR, no blank line)
        # are split by one regex call; any other block line by line (and its errors).
        if block.isascii() and b"\r" not in block:
            text = block.decode("ascii")
            pairs = _PLAIN_LINE.findall(text)
            if len(pairs) == text.count("\n") + (not text.endswith("\n")):
                number += len(pairs)
                oids = map(int, map(itemgetter(0), pairs))
                yield from zip(oids, map(itemgetter(1), pairs), strict=False)
                continue
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


_PLAIN_LINE = re.compile(r"^([0-9]{1,20}) ([^\n]*)(?:\n|\Z)", re.M)
"""A line of an LO list file as pg_dump writes it: OID, one space, the file name."""

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
    # bytes kept for ``pieces``: a million LO files are most of a pack's time. They are
    # read ahead by a few threads (open and read release the GIL): a cold cache then
    # serves several requests at once, and a warm one overlaps them with decoding.
    if archive.kind == "directory" and not check:
        with ThreadPoolExecutor(READERS, thread_name_prefix="pgbd-lo-read") as pool:
            empty = _EmptyFiles(algorithm, archive.name)
            for e in blobs_entries(archive) if known is None else known:
                if e.filename:
                    yield from _read_ahead(archive, e, suffix, algorithm, pool, empty)
        return
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
            yield _from_size(archive, e, oid, member, suffix, algorithm, size)


def _from_size(
    archive: Archive, e: BlobsEntry, oid: int, member: str, suffix: str, algorithm: str,
    size: int | None,
) -> LoData:  # fmt: skip
    """The LoData of a data file read later: ``size`` that of ``member + suffix``, None
    when there is no such file (then an uncompressed ``member``, or CorruptArchive)."""
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
    return LoData(oid, size, e.dump_id, member, partial(_file_pieces, archive, oid, member, how))


READERS = 4
"""Threads reading a directory archive's data files ahead of the walk."""
READ_BATCH = 64
"""Data files one thread reads at a time (a hand-over costs more than a read)."""
READ_AHEAD = 8
"""Batches read ahead at most: 512 files, of up to SMALL_FILE bytes each kept."""

Listed = tuple[int, str] | PgBlobDumpError
"""A line of an LO list file, or the error reading the list met there."""
Read = tuple[bytes | None, int] | None | PgBlobDumpError
"""What _read_small gave for a data file, or the error it raised."""


def _listed(archive: Archive, e: BlobsEntry) -> Iterator[Listed]:
    """list_oids, with an error as the last item (raised when the walk gets there)."""
    try:
        yield from list_oids(archive, e)
    except PgBlobDumpError as ex:
        yield ex


def _read_batch(paths: list[str], name: str) -> list[Read]:
    """_read_small of each path, in a reading thread; an error is kept for its turn."""
    out: list[Read] = []
    buf = bytearray(SMALL_FILE)
    for path in paths:
        try:
            out.append(_read_small(path, name, buf))
        except PgBlobDumpError as ex:
            out.append(ex)
    return out


def _read_ahead(
    archive: Archive, e: BlobsEntry, suffix: str, algorithm: str, pool: Executor,
    empty: _EmptyFiles,
) -> Iterator[LoData]:  # fmt: skip
    """The LOs of ``e``'s list file, their data files read ahead in ``pool``: items and
    errors come in the list's order, as a walk reading each file in turn gives them."""
    prefix = archive.member_path("")
    listed = _listed(archive, e)
    pending: deque[tuple[list[Listed], Future[list[Read]]]] = deque()

    def submit() -> bool:
        batch = list(islice(listed, READ_BATCH))
        if batch:
            paths = [prefix + x[1] + suffix for x in batch if not isinstance(x, BaseException)]
            pending.append((batch, pool.submit(_read_batch, paths, archive.name)))
        return bool(batch)

    while len(pending) < READ_AHEAD and submit():
        pass
    while pending:
        batch, future = pending.popleft()
        submit()
        got = iter(future.result())
        for item in batch:
            if isinstance(item, BaseException):
                raise item
            oid, member = item
            read = next(got)
            if isinstance(read, BaseException):
                raise read
            if read is None:  # no such file: maybe an uncompressed one
                yield _from_size(archive, e, oid, member, suffix, algorithm, None)
                continue
            data, size = read
            member += suffix
            pieces: Callable[[], Iterator[bytes]]
            if data is None:
                pieces = partial(_file_pieces, archive, oid, member, algorithm)
            elif data in empty:
                pieces = nothing
            else:
                pieces = partial(empty.decode, oid, member, data)
            yield LoData(oid, size, e.dump_id, member, pieces)


class _EmptyFiles:
    """The data files' contents that decode to no bytes (gzip's 20-byte empty file, the
    empty LZ4 and zstd frames), learnt as they are decoded: a million empty LOs then
    cost no decompressor each (toc.lo.custom does the same for its chunks)."""

    def __init__(self, algorithm: str, name: str) -> None:
        self.algorithm = algorithm
        self.name = name
        self.known: set[bytes] = set()

    def __contains__(self, data: bytes) -> bool:
        return data in self.known

    def decode(self, oid: int, member: str, data: bytes) -> Iterator[bytes]:
        """The bytes of LO ``oid`` from its data file's bytes, read whole, decompressed."""
        d = Stream(self.algorithm, self.name, oid, member)
        head = d.feed(data, 0)
        tail = d.finish()
        if not head and not tail and len(data) <= 64 and len(self.known) < 16:
            self.known.add(data)
        if head:
            yield head
        if tail:
            yield tail


SMALL_FILE = 1 << 16
"""LO data files up to this size are read whole when the walk meets them."""


def _read_small(path: str, name: str, buf: bytearray) -> tuple[bytes | None, int] | None:
    """(bytes, size) of a data file read whole when small, (None, size) when larger;
    None when it does not exist. ``buf`` (SMALL_FILE bytes) is read into, and the bytes
    read are copied out: a SMALL_FILE bytes object a file, shrunk to its size, leaves
    the reading threads' malloc arenas fragmented (100 MB more at a million files)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, ValueError):  # ValueError: a NUL in a damaged list
        return None
    except OSError as e:  # there but unreadable (EACCES...): 11, not a missing LO file
        raise from_os_error(e, what=f"{name}: cannot read {path}") from e
    try:
        n = os.readv(fd, (buf,))
        if n < SMALL_FILE:
            return bytes(memoryview(buf)[:n]), n
        return None, os.fstat(fd).st_size
    except OSError as e:  # EISDIR (a directory under the name), EIO
        raise from_os_error(e, what=f"{name}: cannot read {path}") from e
    finally:
        os.close(fd)


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
