"""Write a pg_dump custom-format archive (pg_backup_custom.c) from another archive's TOC:
the same header and entries, each entry's data file turned into a data block
(``directory_as_custom``), or a custom archive without its LO data (``without_lo_data``)
and back with it (``rebuild_custom``).

Custom and directory archives share the header and the TOC entry fields; they differ in
the format byte of the header and in what ends each entry (WriteExtraToc): a directory
archive names the entry's data file, a custom archive gives an Offset (flag byte and
8-byte position). Data blocks: ``BLK_DATA`` (1) + dump id, then the entry's data as one
compressed stream cut into ``[Int length][bytes]`` chunks, ended by length 0; for a
``BLOBS`` entry, ``BLK_BLOBS`` (3) + dump id, then per LO ``Int oid`` and its own
stream's chunks ended by 0, the block ended by oid 0. The TOC is written first with
positions unset, then rewritten in place with each block's position (same width).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from pgblobdump.errors import CorruptArchive, UnsupportedArchive
from pgblobdump.toc import blocks
from pgblobdump.toc.blocks import BlockIndex
from pgblobdump.toc.compression import SUFFIXES, decompressor
from pgblobdump.toc.entry import parse_oids
from pgblobdump.toc.fields import F_DEFN, F_DEPENDENCIES, F_DESC, F_FILENAME, RawEntry
from pgblobdump.toc.header import K_VERS_1_14, K_VERS_1_16, read_header
from pgblobdump.toc.lo.catalog import blobs_entry
from pgblobdump.toc.lo.directory import list_oids
from pgblobdump.toc.primitives import (
    K_OFFSET_NO_DATA,
    K_OFFSET_POS_NOT_SET,
    K_OFFSET_POS_SET,
    Reader,
)
from pgblobdump.toc.reader import TOC_FILE, Archive, open_archive

BLK_DATA = blocks.BLK_DATA
BLK_BLOBS = blocks.BLK_BLOBS
FORMAT_CUSTOM = 1
FORMAT_BYTE = 10
"""Where the format code is in the header: after "PGDMP", 3 version bytes and 2 sizes."""
CHUNK = 1 << 16

_OFFSET8 = struct.Struct("<BQ")


def write_int(out: BinaryIO, value: int) -> None:
    """WriteInt with 4-byte ints: a sign byte, then the magnitude little-endian (an OID
    of 2^31 and more goes through a signed int, as pg_dump's does)."""
    if value >= 1 << 31:
        value -= 1 << 32
    out.write(bytes([1 if value < 0 else 0]) + abs(value).to_bytes(4, "little"))


def write_str(out: BinaryIO, value: bytes | None) -> None:
    """WriteStr: length then bytes; -1 for NULL."""
    if value is None:
        write_int(out, -1)
        return
    write_int(out, len(value))
    out.write(value)


class Compressor(Protocol):
    def compress(self, data: bytes) -> bytes: ...

    def flush(self) -> bytes: ...


def compressor(algorithm: str) -> Compressor | None:
    """A stream compressor as a custom archive's data uses: a zlib stream for gzip, an
    LZ4 or zstd frame; None for no compression."""
    if algorithm == "none":
        return None
    if algorithm == "gzip":
        return zlib.compressobj()
    if algorithm == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compressobj()
    if algorithm == "lz4":
        import lz4.frame

        class _Lz4:
            def __init__(self) -> None:
                self.c = lz4.frame.LZ4FrameCompressor()
                self.started = False

            def compress(self, data: bytes) -> bytes:
                head = b"" if self.started else self.c.begin()
                self.started = True
                return head + self.c.compress(data)  # type: ignore[no-any-return]

            def flush(self) -> bytes:
                head = b"" if self.started else self.c.begin()
                self.started = True
                return head + self.c.flush()  # type: ignore[no-any-return]

        return _Lz4()
    raise UnsupportedArchive(f"cannot write {algorithm!r} compressed archives")


def write_stream(out: BinaryIO, pieces: Iterable[bytes], algorithm: str) -> None:
    """One stream of data as chunks, then the 0 length that ends it."""
    c = compressor(algorithm)

    def chunk(data: bytes) -> None:
        if data:
            write_int(out, len(data))
            out.write(data)

    for piece in pieces:
        for at in range(0, len(piece), CHUNK):
            part = piece[at : at + CHUNK]
            chunk(part if c is None else c.compress(part))
    if c is not None:
        chunk(c.flush())
    write_int(out, 0)


def write_entry(
    out: BinaryIO,
    e: RawEntry,
    version: int,
    state: int = K_OFFSET_POS_NOT_SET,
    filename: bytes | None = None,
) -> int:
    """One TOC entry with its Offset flag ``state`` (unset by default: patched later);
    returns where its Offset is. With ``filename`` (a directory archive's toc.dat, b""
    for no data) that string ends the entry instead of an Offset."""
    (dump_id, had_dumper, tableoid, oid, tag, desc, section, defn, drop, copy, nsp, tblspc,
     tableam, relkind, owner, deps, _state, _offset, _filename) = e  # fmt: skip
    write_int(out, dump_id)
    write_int(out, had_dumper)
    for s in (tableoid, oid, tag, desc):
        write_str(out, s)
    write_int(out, section)
    for s in (defn, drop, copy, nsp, tblspc):
        write_str(out, s)
    if version >= K_VERS_1_14:
        write_str(out, tableam)
    if version >= K_VERS_1_16:
        write_int(out, relkind)
    write_str(out, owner)
    write_str(out, b"false")  # with-oids
    for dep in deps:
        write_str(out, str(dep).encode())
    write_str(out, None)
    at = out.tell()
    if filename is not None:
        write_str(out, filename)
    else:
        out.write(_OFFSET8.pack(state, 0))
    return at


def set_offset(out: BinaryIO, at: int, position: int) -> None:
    """Point the Offset written at ``at`` to the data block at ``position``."""
    end = out.tell()
    out.seek(at)
    out.write(_OFFSET8.pack(K_OFFSET_POS_SET, position))
    out.seek(end)


Body = Callable[[BinaryIO], None]
"""Writes a data block's body (after its type byte and dump id)."""


def header_bytes(path: Path) -> bytes:
    """The header of the archive file ``path`` (a custom file or a toc.dat): its bytes
    up to the first TOC entry, as read_header reads them."""
    with path.open("rb") as f:
        r = Reader(f, str(path))
        read_header(r)
        size = r.offset
        f.seek(0)
        return f.read(size)


def write_custom(
    out: BinaryIO,
    header: bytes,
    version: int,
    entries: Iterable[RawEntry],
    block_of: Callable[[RawEntry], tuple[int, Body] | None],
) -> None:
    """A custom archive: ``header`` (a directory archive's or a custom one's: its format
    byte set to custom), ``entries`` as they come, then a data block (type, body) for
    each entry ``block_of`` gives one, in entry order; its Offset is patched to point at
    it, the others say NO_DATA. Only the entries with data are kept meanwhile."""
    head = bytearray(header)
    head[FORMAT_BYTE] = FORMAT_CUSTOM
    out.write(head)
    pending: list[tuple[int, int, int, Body]] = []  # (dump id, Offset at, type, body)
    for e in entries:
        block = block_of(e)
        at = write_entry(out, e, version, K_OFFSET_POS_NOT_SET if block else K_OFFSET_NO_DATA)
        if block is not None:
            pending.append((e[0], at, *block))
    for dump_id, at, kind, body in pending:
        set_offset(out, at, out.tell())
        out.write(bytes([kind]))
        write_int(out, dump_id)
        body(out)


def copy_block(path: Path, start: int, end: int) -> Body:
    """The body of the data block at ``start..end`` of the custom archive ``path`` (its
    type byte and dump id left out: write_custom writes them), copied byte for byte."""
    head = 1 + 5  # the type byte and an Int dump id

    def body(out: BinaryIO) -> None:
        with path.open("rb") as src:
            src.seek(start + head)
            left = end - start - head
            while left:
                chunk = src.read(min(left, 1 << 20))
                if not chunk:
                    raise CorruptArchive(f"{path}: ends inside the data block at byte {start}")
                out.write(chunk)
                left -= len(chunk)

    return body


def without_lo_data(out: BinaryIO, archive: Archive, known: BlockIndex | None = None) -> None:
    """The custom archive ``archive`` without its LO data into ``out`` (seekable): the
    same header and TOC (every entry, the LOs' metadata entries too), the other entries'
    data blocks copied byte for byte, the BLOBS entries without data. pg_restore reads it
    as it is (the LOs then come back empty); rebuild_custom puts the LO data back.
    ``known``: the blocks an LO walk of ``archive`` recorded, not read again."""
    found = {b.dump_id: (b.start, b.end) for b in blocks.block_index(archive, known)
             if b.kind == BLK_DATA}  # fmt: skip
    path = archive.toc_path

    def block_of(e: RawEntry) -> tuple[int, Body] | None:
        where = found.get(e[0])
        return None if where is None else (BLK_DATA, copy_block(path, *where))

    write_custom(out, header_bytes(path), archive.header.version, archive.iter_raw(), block_of)


def rebuild_custom(
    out: BinaryIO,
    rest: Path,
    read_lo: Callable[[int], Iterable[bytes]],
    every_oid: Callable[[], Iterable[int]],
) -> int:
    """The custom archive ``rest`` (written by without_lo_data) with its LO data put back
    into ``out``: its header and TOC, its data blocks copied, and each BLOBS entry's block
    written from ``read_lo(oid)`` (1.16: the OIDs of the BLOB METADATA entry it depends
    on; before: ``every_oid()``). Returns the LOs written."""
    los = 0
    with open_archive(rest) as a:
        algorithm = a.header.compression
        grouped = a.header.version >= K_VERS_1_16
        found = {b.dump_id: (b.start, b.end) for b in blocks.block_index(a) if b.kind == BLK_DATA}
        metadata: dict[int, bytes] = {}  # 1.16: BLOB METADATA dump id -> its OID lines

        def block_of(e: RawEntry) -> tuple[int, Body] | None:
            if e[F_DESC] == b"BLOB METADATA":
                metadata[e[0]] = e[F_DEFN] or b""
            if e[0] in found:
                return BLK_DATA, copy_block(rest, *found[e[0]])
            if e[F_DESC] != b"BLOBS":
                return None
            deps = e[F_DEPENDENCIES]

            def body(out: BinaryIO) -> None:
                nonlocal los
                oids: Iterable[int] = (
                    (o for d in deps if d in metadata for o in parse_oids(metadata[d], a.name))
                    if grouped
                    else every_oid()
                )
                for oid in oids:
                    write_int(out, oid)
                    write_stream(out, read_lo(oid), algorithm)
                    los += 1
                write_int(out, 0)

            return BLK_BLOBS, body

        write_custom(out, header_bytes(rest), a.header.version, a.iter_raw(), block_of)
    return los


def directory_as_custom(out: BinaryIO, directory: Path) -> None:
    """The pg_dump directory archive ``directory`` as one custom file: its header and
    TOC, each data file re-streamed as a data block, each LO list as a BLOBS block."""
    with open_archive(directory) as a:
        algorithm = a.header.compression
        suffix = SUFFIXES.get(algorithm, "")

        def file_pieces(name: str) -> Iterator[bytes]:
            compressed = a.member_size(name + suffix) is not None
            member = name + suffix if compressed else name
            d = decompressor(algorithm if compressed else "none", whole_file=True)
            with a.open_member(member) as fh:
                while chunk := fh.read(1 << 20):
                    if piece := d.feed(chunk):
                        yield piece
            if piece := d.finish():
                yield piece

        def block_of(e: RawEntry) -> tuple[int, Body] | None:
            fname = e[F_FILENAME]
            if not fname:
                return None
            if e[F_DESC] == b"BLOBS":
                entry = blobs_entry(e)

                def los(out: BinaryIO) -> None:
                    for oid, member in list_oids(a, entry):
                        write_int(out, oid)
                        write_stream(out, file_pieces(member), algorithm)
                    write_int(out, 0)

                return BLK_BLOBS, los

            def data(out: BinaryIO, name: str = fname.decode()) -> None:
                write_stream(out, file_pieces(name), algorithm)

            return BLK_DATA, data

        write_custom(out, header_bytes(directory / TOC_FILE), a.header.version, a.iter_raw(),
                     block_of)  # fmt: skip
