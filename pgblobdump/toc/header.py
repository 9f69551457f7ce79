"""The archive header (ReadHead in pg_backup_archiver.c) and what a non-archive looks like."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

from pgblobdump.errors import CorruptArchive, NotAnArchive, UnsupportedArchive
from pgblobdump.toc.primitives import Reader

MAGIC = b"PGDMP"
"""The first five bytes of a custom archive and of a directory or tar archive's toc.dat."""


def make_version(major: int, minor: int, rev: int = 0) -> int:
    """MAKE_ARCHIVE_VERSION: ``(major*256 + minor)*256 + rev``, so versions compare as ints."""
    return (major * 256 + minor) * 256 + rev


K_VERS_1_12 = make_version(1, 12)
"""PostgreSQL 9.0: one BLOB entry per large object; the oldest version we read."""
K_VERS_1_14 = make_version(1, 14)
"""PostgreSQL 12: table access method (tableam) in each entry."""
K_VERS_1_15 = make_version(1, 15)
"""PostgreSQL 16: a compression algorithm byte replaces the compression level Int."""
K_VERS_1_16 = make_version(1, 16)
"""PostgreSQL 17: BLOB METADATA entries, several BLOBS entries, relkind in each entry."""
K_VERS_MAX = make_version(1, 16, 255)
"""The newest archive version this reader (like pg_restore 17 and 18) understands."""

FORMAT_NAMES = {1: "custom", 3: "tar", 4: "null", 5: "directory"}
"""ArchiveFormat codes of pg_backup.h, as written in the header's format byte."""

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "lz4", 3: "zstd"}
"""pg_compress_algorithm codes, as written in the header from version 1.15."""


@dataclass(frozen=True)
class ArchiveHeader:
    """What ReadHead reads, in order.

    ``version`` is ``make_version(vmaj, vmin, vrev)``, between 1.12 and 1.16.255.
    ``format_code`` is the raw format byte: 1 for a custom file, 3 for a directory's
    toc.dat (pg_dump writes the tar code there) and for a tar archive's toc.dat.
    ``compression`` is one of COMPRESSION_NAMES' values; ``compression_level`` is the
    level before 1.15 (any non-zero level means gzip) and None from 1.15.
    ``created`` is the struct tm fields (sec, min, hour, mday, mon, year, isdst) as stored.
    ``toc_count`` is the number of TOC entries that follow; ``toc_offset`` where they start.
    """

    vmaj: int
    vmin: int
    vrev: int
    int_size: int
    off_size: int
    format_code: int
    compression: str
    compression_level: int | None
    created: tuple[int, int, int, int, int, int, int]
    dbname: str | None
    server_version: str | None
    pg_dump_version: str | None
    toc_count: int
    toc_offset: int

    @property
    def version(self) -> int:
        return make_version(self.vmaj, self.vmin, self.vrev)

    @property
    def version_text(self) -> str:
        """As pg_restore -l prints it: ``1.16-0``."""
        return f"{self.vmaj}.{self.vmin}-{self.vrev}"

    @property
    def created_text(self) -> str:
        """The creation time as pg_restore -l prints it (local time, PGDUMP_STRFTIME_FMT)."""
        sec, mi, hour, mday, mon, year, isdst = self.created
        try:
            stamp = time.mktime((year + 1900, mon + 1, mday, hour, mi, sec, 0, 0, isdst))
            return time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(stamp))
        except (OverflowError, ValueError):
            return "[unknown]"


def describe(head: bytes) -> str:
    """A few words on what a file that is not a pg_dump archive looks like."""
    if not head:
        return "an empty file"
    if head.startswith(b"PGBDSTR1"):  # packed.format.STREAM_MAGIC (toc/ does not import packed/)
        return "a pgblobdump packed stream (`pgblobdump restore` reads it)"
    if head[:2] == b"\x1f\x8b":
        return "a gzip-compressed file (gunzip it first?)"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "a zstd-compressed file"
    if head[:4] == b"\x04\x22\x4d\x18":
        return "an lz4-compressed file"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "a tar archive (pg_dump -Ft)"
    text = head[:4096]
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError:
        decoded = ""
    if decoded and all(c.isprintable() or c in "\r\n\t" for c in decoded):
        if "PostgreSQL database dump" in decoded or decoded.lstrip().startswith(("--", "SET ")):
            return "a plain-text SQL dump (pg_dump -Fp): feed it to psql, not pg_restore"
        return "a text file"
    return "binary data of unknown kind"


def read_header(r: Reader) -> ArchiveHeader:
    """ReadHead: magic, version, sizes, format, compression, date, names, entry count."""
    name = r.name
    with contextlib.suppress(CorruptArchive):  # a short file fails the check below
        r.fill(5, "the magic")
    if r.buf[r.pos : r.pos + 5] != MAGIC:
        head = r.buf[r.pos :]
        if len(head) < 4096:
            with contextlib.suppress(CorruptArchive):
                r.fill(min(4096, (r.size or 4096) - r.offset), "the start of the file")
            head = r.buf[r.pos :]
        raise NotAnArchive(f"{name}: not a pg_dump archive; it looks like {describe(head)}")
    r.pos += 5
    vmaj = r.read_byte("the version")
    vmin = r.read_byte("the version")
    vrev = r.read_byte("the version")
    version = make_version(vmaj, vmin, vrev)
    if version > K_VERS_MAX:
        raise UnsupportedArchive(
            f"{name}: archive version {vmaj}.{vmin}-{vrev} is newer than this reader knows"
            " (1.12 to 1.16, PostgreSQL 9.0 to 18)"
        )
    if version < K_VERS_1_12:
        raise UnsupportedArchive(
            f"{name}: archive version {vmaj}.{vmin}-{vrev} is older than this reader knows"
            " (1.12 to 1.16, PostgreSQL 9.0 to 18)"
        )
    int_size = r.read_byte("the integer size")
    off_size = r.read_byte("the offset size")
    r.set_sizes(int_size, off_size)
    fmt = r.read_byte("the format")
    if fmt not in (1, 3, 5):
        raise CorruptArchive(f"{name}: unknown archive format code {fmt} in the header")
    if version >= K_VERS_1_15:
        code = r.read_byte("the compression algorithm")
        if code not in COMPRESSION_NAMES:
            raise UnsupportedArchive(f"{name}: unknown compression algorithm code {code}")
        compression, level = COMPRESSION_NAMES[code], None
    else:
        level = r.read_int("the compression level")
        compression = "none" if level == 0 else "gzip"
    fields = tuple(r.read_int("the creation date") for _ in range(7))
    created: tuple[int, int, int, int, int, int, int] = fields  # type: ignore[assignment]
    dbname = r.read_str("the database name")
    server_version = r.read_str("the server version")
    pg_dump_version = r.read_str("the pg_dump version")
    toc_count = r.read_int("the TOC entry count")
    if toc_count < 0:
        raise CorruptArchive(f"{name}: negative TOC entry count {toc_count}")
    return ArchiveHeader(
        vmaj, vmin, vrev, int_size, off_size, fmt, compression, level, created,
        dbname, server_version, pg_dump_version, toc_count, r.offset,
    )  # fmt: skip
