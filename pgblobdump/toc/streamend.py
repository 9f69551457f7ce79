"""Whether a compressed data file of a directory archive holds its whole stream, cheaply.

A directory archive stores each LO in a file of its own, and a file cut short (a copy
that stopped, a full disk) keeps a plausible size: only its content can tell. `toc
summary` and `toc los` check every LO file of a compressed archive this way:

- gzip (``.gz``): deflate has no framing to walk, so the file is inflated to its end
  marker by zlib (in C), the output dropped in pieces of OUT_PIECE bytes. gzclose writes
  a header and trailer even for an empty LO, so a 0-byte ``.gz`` file is damage.
- LZ4 (``.lz4``) and zstd (``.zst``): the frame's headers are walked (an LZ4 block size
  or a zstd block header each, data blocks skipped unread) to the LZ4 end mark or the
  zstd block flagged last. pg_dump writes an empty LO as a 0-byte file, no frame at
  all (compress_lz4.c and compress_zstd.c write the frame header with the first
  data), so a 0-byte file is complete.

What is not checked here: the content of LZ4 and zstd blocks (`toc extract` decompresses
them), and uncompressed files, which have no framing: a truncated ``blob_N.dat`` of an
uncompressed archive cannot be told from a shorter LO.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

from pgblobdump.toc.compression import DECOMPRESS_ERRORS

PRead = Callable[[int, int], bytes]
"""``pread(offset, n)``: up to ``n`` bytes of the file from ``offset`` (fewer at its end)."""

WINDOW = 1 << 16
"""Bytes read at a time: one read covers the whole of a typical LO file."""

OUT_PIECE = 1 << 20
"""Most decompressed bytes held at once while inflating a gzip file."""

U32 = struct.Struct("<I")
"""A little-endian uint32: LZ4 and zstd magic numbers, LZ4 block sizes."""

LZ4_MAGIC = 0x184D2204
"""The LZ4 frame magic number (lz4_Frame_format.md)."""
ZSTD_MAGIC = 0xFD2FB528
"""The zstd frame magic number (RFC 8878, 3.1.1)."""
SKIPPABLE_MAGIC = 0x184D2A50
"""A skippable frame (LZ4 and zstd alike): magic & 0xFFFFFFF0, then a uint32 size."""

_ZSTD_DICT_ID_BYTES = (0, 1, 2, 4)
"""zstd Dictionary_ID field size by the descriptor's Dictionary_ID_flag."""
_ZSTD_FCS_BYTES = (0, 2, 4, 8)
"""zstd Frame_Content_Size field size by FCS_flag (flag 0 with Single_Segment: 1 byte)."""


class _Window:
    """The file's bytes by offset, WINDOW bytes read at a time; ``size`` is the file's."""

    def __init__(self, head: bytes, size: int, pread: PRead) -> None:
        self._pread = pread
        self.size = size
        self._base = 0
        self._buf = head

    def get(self, at: int, n: int) -> bytes | None:
        """The ``n`` bytes at ``at``, or None when the file ends first."""
        if at + n > self.size:
            return None
        start = at - self._base
        if start < 0 or start + n > len(self._buf):
            self._base, self._buf = at, self._pread(at, max(n, WINDOW))
            start = 0
        piece = self._buf[start : start + n]
        return piece if len(piece) == n else None

    def u32(self, at: int) -> int | None:
        raw = self.get(at, 4)
        return None if raw is None else U32.unpack(raw)[0]


def _skippable(w: _Window, at: int) -> int | None:
    """Where the skippable frame at ``at`` ends, or None when the file ends first."""
    n = w.u32(at + 4)
    return None if n is None else at + 8 + n


def _frames_end(
    w: _Window,
    name: str,
    article: str,
    magic_number: int,
    frame: Callable[[_Window, int], int | str],
) -> str | None:
    """Walk a file of ``name`` frames (``article``: "an" or "a", as English says it),
    skippable frames passed over, to its end: each frame's magic number is checked, then
    ``frame(w, at)`` walks the frame that starts at ``at``, giving where it ends or what
    is wrong with it. None when every frame is whole."""
    at = 0
    while at < w.size:
        magic = w.u32(at)
        if magic is None:
            return f"the file ends at byte {w.size} inside {article} {name} frame's magic number"
        if magic & 0xFFFFFFF0 == SKIPPABLE_MAGIC:
            end = _skippable(w, at)
            if end is None or end > w.size:
                return f"the file ends at byte {w.size} inside a skippable frame"
            at = end
            continue
        if magic != magic_number:
            return f"no {name} frame at byte {at} (magic number {magic:#010x})"
        walked = frame(w, at)
        if isinstance(walked, str):
            return walked
        at = walked
    return None


def _lz4_frame(w: _Window, at: int) -> int | str:
    """Walk the LZ4 frame at ``at`` (FLG, BD, optional content size and dictionary id,
    header checksum; blocks of ``uint32 size`` (high bit: stored raw) + data + optional
    block checksum; end mark 0; optional content checksum): where it ends, or what is
    wrong with it."""
    desc = w.get(at + 4, 2)
    if desc is None:
        return f"the file ends at byte {w.size} inside the LZ4 frame header at byte {at}"
    flg = desc[0]
    if flg >> 6 != 1:
        return f"an LZ4 frame header of unknown version at byte {at}"
    block_checksum = 4 if flg & 0x10 else 0
    at += 4 + 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0) + 1
    while True:
        n = w.u32(at)
        if n is None:
            return f"the LZ4 frame ends at byte {w.size} before its end mark"
        at += 4
        if n == 0:
            break
        at += (n & 0x7FFFFFFF) + block_checksum
    at += 4 if flg & 0x04 else 0  # content checksum
    if at > w.size:
        return f"the file ends at byte {w.size} inside an LZ4 frame's last field"
    return at


def _zstd_frame(w: _Window, at: int) -> int | str:
    """Walk the zstd frame at ``at`` (RFC 8878: Frame_Header_Descriptor and its optional
    fields; 3-byte block headers (Last_Block bit, Block_Type, Block_Size) + block
    content; optional 4-byte checksum): where it ends, or what is wrong with it."""
    desc = w.get(at + 4, 1)
    if desc is None:
        return f"the file ends at byte {w.size} inside the zstd frame header at byte {at}"
    fhd = desc[0]
    if fhd & 0x08:
        return f"a zstd frame header with its reserved bit set at byte {at}"
    single = fhd >> 5 & 1
    fcs = _ZSTD_FCS_BYTES[fhd >> 6] or single
    at += 4 + 1 + (1 - single) + _ZSTD_DICT_ID_BYTES[fhd & 3] + fcs
    while True:
        raw = w.get(at, 3)
        if raw is None:
            return f"the zstd frame ends at byte {w.size} before its last block"
        header = int.from_bytes(raw, "little")
        kind = header >> 1 & 3
        if kind == 3:
            return f"a zstd block of the reserved type at byte {at}"
        at += 3 + (1 if kind == 1 else header >> 3)  # RLE blocks store one byte
        if header & 1:
            break
    at += 4 if fhd & 0x04 else 0  # Content_Checksum
    if at > w.size:
        return f"the zstd frame ends at byte {w.size}, inside its last block"
    return at


def _gzip_end(head: bytes, size: int, pread: PRead) -> str | None:
    """Inflate the whole file (output dropped) and say whether the stream ended."""
    if size == 0:
        return "an empty file, where gzip writes at least a header and trailer"
    d = zlib.decompressobj(47)  # a gzip header, or a zlib one
    piece, at = head, len(head)
    while True:
        while piece and not d.eof:
            d.decompress(piece, OUT_PIECE)
            piece = d.unconsumed_tail
        if d.eof or at >= size:
            break
        piece = pread(at, WINDOW)
        if not piece:
            break
        at += len(piece)
    if not d.eof:
        d.flush()  # input all taken, output held back by OUT_PIECE: finish it
    if d.eof:
        return None
    return f"the gzip stream ends before its end marker, at byte {size}"


def incomplete(head: bytes, size: int, pread: PRead, algorithm: str) -> str | None:
    """None when a ``size``-byte file holds a complete ``algorithm`` stream (``gzip``,
    ``lz4``, ``zstd``); else what is wrong with it. ``head`` is the file's first
    min(size, WINDOW) bytes, which is all of a typical LO file; ``pread`` reads the rest."""
    try:
        if algorithm == "gzip":
            return _gzip_end(head, size, pread)
        if not size:
            return None  # an empty LO: LZ4 and zstd files hold no frame at all
        if algorithm == "lz4":
            return _frames_end(_Window(head, size, pread), "LZ4", "an", LZ4_MAGIC, _lz4_frame)
        if algorithm == "zstd":
            return _frames_end(_Window(head, size, pread), "zstd", "a", ZSTD_MAGIC, _zstd_frame)
    except DECOMPRESS_ERRORS as e:
        return f"damaged {algorithm} data ({e})"
    return None
