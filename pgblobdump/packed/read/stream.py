"""Read the single-stream form of a packed archive (``dump -o -``) front to back: its
DATA frames as restore takes them, META frames as they come, the manifest last."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import BinaryIO

from pgblobdump.errors import CorruptArchive, NotAnArchive, UnsupportedArchive
from pgblobdump.packed.format.frames import Frame, FrameReader
from pgblobdump.packed.format.holes import filled
from pgblobdump.packed.format.index import Meta, MetaTable
from pgblobdump.packed.format.manifest import Manifest
from pgblobdump.packed.format.spec import STREAM_HEADER, STREAM_MAGIC, FrameKind, version_problem
from pgblobdump.packed.read.items import Item, LoPiece, each_piece
from pgblobdump.packed.read.reader import _Assembler


def stream_items(f: BinaryIO, where: str = "the stream") -> Iterator[Item]:
    """Every LO of a single-stream archive, front to back, checked; raises CorruptArchive
    if the stream ends before its manifest (an interrupted dump) or disagrees with it."""
    head = f.read(STREAM_HEADER.size)
    if len(head) < STREAM_HEADER.size or head[:8] != STREAM_MAGIC:
        raise NotAnArchive(f"{where}: not a pgblobdump packed stream")
    if (why := version_problem(STREAM_HEADER.unpack(head)[1])) is not None:
        raise UnsupportedArchive(f"{where}: stream {why}")
    return _stream_body(f, where)


def stream_pieces(f: BinaryIO, where: str = "the stream") -> Iterator[LoPiece]:
    """stream_items one LoPiece at a time, holes given as zeros (the header is read at
    once, all the same)."""
    return filled(each_piece(stream_items(f, where)))


def _stream_body(f: BinaryIO, where: str) -> Iterator[Item]:
    frames = FrameReader(f, where, STREAM_HEADER.size)
    metas = MetaTable()
    asm = _Assembler(metas, where)
    for frame in frames:
        if frame.kind == FrameKind.DATA:
            yield from asm.items(frame, where)
        elif frame.kind == FrameKind.META:
            _add_metas(metas, frame, where)
        elif frame.kind == FrameKind.MANIFEST:
            manifest = Manifest.parse(frame.data, where)
            asm.end()
            if (asm.los, asm.bytes) != (manifest.los, manifest.bytes):
                raise CorruptArchive(
                    f"{where}: holds {asm.los:,} LOs and {asm.bytes:,} bytes; its manifest"
                    f" says {manifest.los:,} and {manifest.bytes:,}"
                )
            return
    raise CorruptArchive(f"{where}: ends before its manifest: an interrupted dump")


def _add_metas(metas: MetaTable, frame: Frame, where: str) -> None:
    try:
        first, values = json.loads(frame.data)
        if first != len(metas.values):
            raise ValueError(f"values from {first}, expected {len(metas.values)}")
        for v in values:
            metas.id(Meta.from_json(v))
    except (ValueError, TypeError) as e:
        raise CorruptArchive(f"{where}: the metadata frame at byte {frame.offset:,}: {e}") from e
