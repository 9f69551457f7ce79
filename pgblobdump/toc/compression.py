"""Decompress data as pg_dump wrote it: zlib/gzip, LZ4 frames or zstd frames.

Custom format: each LO (and each table's data) is one stream split over data chunks: a
zlib stream for gzip (compress_gzip.c deflates with a zlib header), an LZ4 frame, a zstd
frame. Directory format: each data file is a whole ``.gz`` (gzip), ``.lz4`` or ``.zst``
file.
"""

from __future__ import annotations

import zlib
from typing import Protocol

import zstandard

from pgblobdump.errors import CorruptArchive, UnsupportedArchive

SUFFIXES = {"none": "", "gzip": ".gz", "lz4": ".lz4", "zstd": ".zst"}
"""The suffix pg_dump adds to a directory archive's data files, by compression."""


class Decompressor(Protocol):
    """Feed compressed chunks in order; ``finish`` checks the stream ended properly."""

    def feed(self, chunk: bytes) -> bytes: ...

    def finish(self) -> bytes: ...


class _Plain:
    def feed(self, chunk: bytes) -> bytes:
        return chunk

    def finish(self) -> bytes:
        return b""


class _Zlib:
    def __init__(self, wbits: int) -> None:
        self._d = zlib.decompressobj(wbits)
        self._fed = False

    def feed(self, chunk: bytes) -> bytes:
        self._fed = self._fed or bool(chunk)
        return self._d.decompress(chunk)

    def finish(self) -> bytes:
        out = self._d.flush()
        if self._fed and not self._d.eof:
            raise zlib.error("compressed stream ends early")
        return out


class _Lz4:
    def __init__(self) -> None:
        import lz4.frame

        self._d = lz4.frame.LZ4FrameDecompressor()
        self._fed = False

    def feed(self, chunk: bytes) -> bytes:
        self._fed = self._fed or bool(chunk)
        return bytes(self._d.decompress(chunk))

    def finish(self) -> bytes:
        if self._fed and not self._d.eof:
            raise RuntimeError("LZ4 frame ends early")
        return b""


class _Zstd:
    def __init__(self) -> None:
        self._d = zstandard.ZstdDecompressor().decompressobj()
        self._fed = False

    def feed(self, chunk: bytes) -> bytes:
        self._fed = self._fed or bool(chunk)
        return bytes(self._d.decompress(chunk))

    def finish(self) -> bytes:
        if self._fed and not self._d.eof:
            raise RuntimeError("zstd frame ends early")
        return b""


def decompressor(algorithm: str, whole_file: bool = False) -> Decompressor:
    """A fresh decompressor for one stream; ``whole_file`` for a directory data file."""
    if algorithm == "none":
        return _Plain()
    if algorithm == "gzip":
        # 47 = 32 + 15: accept a gzip or a zlib header, whichever the stream has.
        return _Zlib(47 if whole_file else 15)
    if algorithm == "lz4":
        return _Lz4()
    if algorithm == "zstd":
        return _Zstd()
    raise UnsupportedArchive(f"unknown compression algorithm {algorithm!r}")


DECOMPRESS_ERRORS: tuple[type[BaseException], ...] = (
    zlib.error,
    RuntimeError,
    ValueError,
    zstandard.ZstdError,
)
"""What the decompressors raise on bad input (lz4 and zstandard raise RuntimeError
subclasses or ValueError); callers turn these into CorruptArchive."""


def corrupt(where: str, e: BaseException) -> CorruptArchive:
    return CorruptArchive(f"{where}: compressed data is damaged ({e})")
