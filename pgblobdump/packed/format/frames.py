"""Frames: encode them for the writer, decode and check them for every reader."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from operator import itemgetter
from typing import BinaryIO, NamedTuple

import xxhash
import zstandard

from pgblobdump.errors import CorruptArchive
from pgblobdump.packed.format.spec import (
    FRAME_HEADER,
    FRAME_MAGIC,
    FRAME_PAYLOAD_MAX,
    PIECE_RECORD,
    Codec,
    FrameKind,
)


class Piece(NamedTuple):
    """One LO, or one piece of a large LO, in a DATA frame (see PIECE_RECORD). A
    NamedTuple: a frame's directory is decoded into thousands at C speed."""

    oid: int
    meta: int
    size: int
    offset: int
    length: int
    checksum: int

    @property
    def last(self) -> bool:
        """Whether this piece ends its LO (the checksum is set then)."""
        return self.offset + self.length == self.size


@dataclass(frozen=True)
class Frame:
    """A decoded frame: its kind, where it starts, its pieces (DATA) and its bytes (the
    pieces' bytes, concatenated in piece order, or the INDEX/MANIFEST content).
    ``directory`` is the pieces' PIECE_RECORDs as stored; ``pieces`` decodes them on
    first use (restore reads a frame of small LOs as columns instead, reader.py)."""

    kind: FrameKind
    offset: int
    end: int
    directory: bytes
    data: bytes

    @cached_property
    def pieces(self) -> tuple[Piece, ...]:
        return tuple(map(Piece._make, PIECE_RECORD.iter_unpack(self.directory)))

    def piece_bytes(self) -> Iterator[tuple[Piece, memoryview]]:
        view = memoryview(self.data)
        at = 0
        for p in self.pieces:
            yield p, view[at : at + p.length]
            at += p.length


_LENGTHS = struct.Struct("<24xI8x") if PIECE_RECORD.format == "<IIQQIQ" else None
"""PIECE_RECORD's length field alone: a directory's lengths read at C speed."""


def data_length(directory: bytes) -> int:
    """The sum of the pieces' lengths a directory of PIECE_RECORDs gives (its frame's
    data must be that long), without an object per piece."""
    if _LENGTHS is None:
        return sum(p[4] for p in PIECE_RECORD.iter_unpack(directory))
    return sum(map(itemgetter(0), _LENGTHS.iter_unpack(directory)))


def directory_of(pieces: Sequence[Piece]) -> bytes:
    """The directory bytes of ``pieces`` (PIECE_RECORDs)."""
    return b"".join(
        PIECE_RECORD.pack(p.oid, p.meta, p.size, p.offset, p.length, p.checksum) for p in pieces
    )


SAMPLE = 64 << 10
"""Bytes of a frame's data tried at zstd level 1 before the whole is compressed."""


def _incompressible(data: bytes) -> bool:
    """Whether a frame's data looks incompressible (random, JPEG, already compressed): its
    first SAMPLE bytes do not shrink by 3% at level 1. Compressing such a frame at the
    dump's level costs more time than reading it from the server, for nothing."""
    if len(data) < 2 * SAMPLE:
        return False
    sample = data[:SAMPLE]
    return len(zstandard.ZstdCompressor(level=1).compress(sample)) > 0.97 * SAMPLE


def encode(
    kind: FrameKind,
    data: bytes,
    directory: bytes = b"",
    records: int = 0,
    compressor: zstandard.ZstdCompressor | None = None,
) -> bytes:
    """One frame: a directory of ``records`` PIECE_RECORDs, then ``data`` (compressed
    when a compressor is given and it helps)."""
    raw = directory + data
    codec, stored = Codec.STORED, raw
    if compressor is not None and raw and not _incompressible(data):
        packed = compressor.compress(raw)
        if len(packed) < len(raw):
            codec, stored = Codec.ZSTD, packed
    header = FRAME_HEADER.pack(
        FRAME_MAGIC,
        kind,
        codec,
        0,
        records,
        len(directory),
        len(stored),
        len(raw),
        xxhash.xxh3_64_intdigest(stored),
    )
    return header + stored


class FrameReader:
    """Frames read front to back from ``f`` (a volume after its header, or a stream);
    ``name`` and ``offset`` say where they are, for messages."""

    def __init__(self, f: BinaryIO, name: str, offset: int) -> None:
        self.f = f
        self.name = name
        self.offset = offset
        self._dctx = zstandard.ZstdDecompressor()

    def seek(self, offset: int) -> None:
        """Go on reading at ``offset`` (the next frame after a damaged one)."""
        self.f.seek(offset)
        self.offset = offset

    def _read(self, n: int, what: str) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise CorruptArchive(
                f"{self.name}: ends at byte {self.offset + len(data):,} inside {what} (truncated)"
            )
        return data

    def next(self) -> Frame | None:
        """The next frame, or None at a clean end of the file."""
        start = self.offset
        head = self.f.read(FRAME_HEADER.size)
        if not head:
            return None
        if len(head) < FRAME_HEADER.size:
            raise CorruptArchive(
                f"{self.name}: ends at byte {start + len(head):,} inside a frame header (truncated)"
            )
        magic, kind, codec, _r, records, dir_len, stored, ulen, digest = FRAME_HEADER.unpack(head)
        if magic != FRAME_MAGIC or kind not in FrameKind._value2member_map_:
            raise CorruptArchive(f"{self.name}: no frame at byte {start:,} (damaged)")
        if stored > FRAME_PAYLOAD_MAX or ulen > FRAME_PAYLOAD_MAX or dir_len > ulen:
            raise CorruptArchive(f"{self.name}: impossible frame sizes at byte {start:,}")
        self.offset += FRAME_HEADER.size
        payload = self._read(stored, f"the frame at byte {start:,}")
        self.offset += stored
        if xxhash.xxh3_64_intdigest(payload) != digest:
            raise CorruptArchive(f"{self.name}: the frame at byte {start:,} is damaged (checksum)")
        raw = self._decode(codec, payload, ulen, start)
        if records * PIECE_RECORD.size != dir_len:
            raise CorruptArchive(f"{self.name}: the frame at byte {start:,} has a bad directory")
        directory = raw[:dir_len]
        if kind == FrameKind.DATA and data_length(directory) != ulen - dir_len:
            raise CorruptArchive(f"{self.name}: the frame at byte {start:,} has a bad directory")
        return Frame(FrameKind(kind), start, self.offset, directory, raw[dir_len:])

    def _decode(self, codec: int, payload: bytes, ulen: int, start: int) -> bytes:
        if codec == Codec.STORED:
            raw = payload
        elif codec == Codec.ZSTD:
            try:
                raw = self._dctx.decompress(payload, max_output_size=ulen)
            except zstandard.ZstdError as e:
                raise CorruptArchive(f"{self.name}: the frame at byte {start:,}: {e}") from e
        else:
            raise CorruptArchive(f"{self.name}: unknown codec {codec} at byte {start:,}")
        if len(raw) != ulen:
            raise CorruptArchive(f"{self.name}: the frame at byte {start:,} has a bad length")
        return raw

    def __iter__(self) -> Iterator[Frame]:
        while (frame := self.next()) is not None:
            yield frame
