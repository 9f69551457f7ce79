"""Decompress data as pg_dump wrote it: zlib/gzip, LZ4 frames or zstd frames.

Custom format: each LO (and each table's data) is one stream split over data chunks: a
zlib stream for gzip (compress_gzip.c deflates with a zlib header), an LZ4 frame, a zstd
frame. Directory format: each data file is a whole ``.gz`` (gzip), ``.lz4`` or ``.zst``
file.
"""

from __future__ import annotations

import zlib
from typing import Any, Protocol

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
    """``empty_ok``: whether no bytes at all are a complete stream. Never for a directory
    archive's ``.gz`` file: gzclose writes a header and trailer even for an empty LO."""

    def __init__(self, wbits: int, empty_ok: bool = True) -> None:
        self._d = zlib.decompressobj(wbits)
        self._empty_ok = empty_ok
        self._fed = False

    def feed(self, chunk: bytes) -> bytes:
        self._fed = self._fed or bool(chunk)
        return self._d.decompress(chunk)

    def finish(self) -> bytes:
        out = self._d.flush()
        if not self._fed and not self._empty_ok:
            raise CorruptArchive("an empty file, where gzip writes at least a header and trailer")
        if self._fed and not self._d.eof:
            raise CorruptArchive("the zlib stream ends before its end marker")
        return out


class _Frame:
    """An LZ4 or zstd frame: both libraries expose ``decompress`` and ``eof`` alike."""

    def __init__(self, name: str, d: Any) -> None:
        self._name = name
        self._d = d
        self._fed = False

    def feed(self, chunk: bytes) -> bytes:
        self._fed = self._fed or bool(chunk)
        return bytes(self._d.decompress(chunk))

    def finish(self) -> bytes:
        if self._fed and not self._d.eof:
            raise CorruptArchive(f"the {self._name} frame ends before its end marker")
        return b""


def decompressor(algorithm: str, whole_file: bool = False) -> Decompressor:
    """A fresh decompressor for one stream; ``whole_file`` for a directory data file."""
    if algorithm == "none":
        return _Plain()
    if algorithm == "gzip":
        # 47 = 32 + 15: accept a gzip or a zlib header, whichever the stream has.
        return _Zlib(47, empty_ok=False) if whole_file else _Zlib(15)
    if algorithm == "lz4":
        import lz4.frame  # only archives written with -Z lz4 need it

        return _Frame("LZ4", lz4.frame.LZ4FrameDecompressor())
    if algorithm == "zstd":
        return _Frame("zstd", zstandard.ZstdDecompressor().decompressobj())
    raise UnsupportedArchive(f"unknown compression algorithm {algorithm!r}")


DECOMPRESS_ERRORS: tuple[type[BaseException], ...] = (
    zlib.error,
    RuntimeError,
    ValueError,
    zstandard.ZstdError,
)
"""What the decompression libraries raise on bad input (python-lz4 raises RuntimeError,
zstandard ZstdError or ValueError); Stream turns these into CorruptArchive."""

_FAILURES: tuple[type[BaseException], ...] = (*DECOMPRESS_ERRORS, CorruptArchive)


class Stream:
    """One LO's compressed stream, fed chunk by chunk: every failure, of a library or of a
    stream that stops early, is a CorruptArchive naming the archive, the LO (and its file
    in a directory archive) and the byte where the chunk that failed starts."""

    def __init__(
        self, algorithm: str, name: str, oid: int, member: str | None = None
    ) -> None:  # fmt: skip
        self._d = decompressor(algorithm, whole_file=member is not None)
        in_member = f" in {member}" if member else ""
        self._what = f"{name}: damaged {algorithm} data of large object {oid}{in_member}"
        self._at: int | None = None

    def feed(self, chunk: bytes, at: int) -> bytes:
        """Decompress ``chunk``, which starts at byte ``at`` of its file."""
        self._at = at
        try:
            return self._d.feed(chunk)
        except _FAILURES as e:
            raise CorruptArchive(f"{self._what} at byte {at} ({e})") from e

    def finish(self) -> bytes:
        try:
            return self._d.finish()
        except _FAILURES as e:
            at = "" if self._at is None else f" after the chunk at byte {self._at}"
            raise CorruptArchive(f"{self._what}{at} ({e})") from e
