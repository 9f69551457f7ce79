"""Write a pg_dump custom-format archive (pg_backup_custom.c) from a directory archive's
TOC: the same header and entries, each entry's data file turned into a data block.

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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO, Protocol

from pgblobdump.errors import CorruptArchive, UnsupportedArchive
from pgblobdump.toc.fields import RawEntry
from pgblobdump.toc.header import K_VERS_1_14, K_VERS_1_16, read_header
from pgblobdump.toc.primitives import (
    K_OFFSET_NO_DATA,
    K_OFFSET_POS_NOT_SET,
    K_OFFSET_POS_SET,
    Reader,
)

BLK_DATA = 1
BLK_BLOBS = 3
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
