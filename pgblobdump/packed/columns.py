"""A DATA frame of whole LOs read as columns of its directory: restore's fast path.

A directory is PIECE_RECORDs, 9 little-endian uint32 each (oid, metadata id, size in
two, offset in two, length, checksum in two), so one ``memoryview.cast("I")`` sliced
``[k::9]`` gives a field of every piece at C speed: no object per LO, and no loop at all
when the LOs are empty (a million empty LOs are read in a few hundredths of a second).
Anything else (a piece of a large LO, an LO out of the kept range, a metadata id out of
range, a bad checksum of an empty LO) is left to the piece-by-piece reading in
reader.py, which says what is wrong.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import xxhash

from pgblobdump.errors import CorruptArchive
from pgblobdump.packed.format import PIECE_RECORD
from pgblobdump.packed.frames import Frame
from pgblobdump.packed.index import Meta

EMPTY = xxhash.xxh3_64_intdigest(b"")
"""The xxh3-64 of an empty LO."""
_EMPTY_LO, _EMPTY_HI = EMPTY & 0xFFFFFFFF, EMPTY >> 32
ENABLED = PIECE_RECORD.format == "<IIQQIQ" and sys.byteorder == "little"
"""Whether a directory reads as the 9 uint32 columns above (else: never used)."""

Run = tuple[list[int], list[Meta], list["bytes | memoryview"], list[int], int]
"""(oids, metas, datas, checksums, total bytes) of a frame's LOs, in frame order."""


def whole_los(
    frame: Frame, values: Sequence[Meta] | None, keep: tuple[int, int] | None, where: str
) -> Run | None:
    """The frame's LOs when all are whole and within ``keep`` (``values``: the metadata
    table, None for none), each LO with bytes checked against its checksum; None when
    the frame is anything else."""
    if not ENABLED or not frame.directory or len(frame.directory) % PIECE_RECORD.size:
        return None
    cols = memoryview(frame.directory).cast("I")
    lengths = cols[6::9]
    if any(cols[4::9]) or any(cols[5::9]) or any(cols[3::9]) or cols[2::9] != lengths:
        return None
    oids = cols[0::9].tolist()
    if keep is not None and not keep[0] <= min(oids) <= max(oids) <= keep[1]:
        return None
    ids = cols[1::9].tolist()
    n = len(oids)
    if values is None:
        metas = [Meta(None, None, None)] * n
    elif max(ids) >= len(values):
        return None
    elif ids.count(ids[0]) == n:
        metas = [values[ids[0]]] * n
    else:
        metas = [*map(values.__getitem__, ids)]
    if not any(lengths):
        if cols[7::9].tolist().count(_EMPTY_LO) != n or cols[8::9].tolist().count(_EMPTY_HI) != n:
            return None
        return oids, metas, [b""] * n, [EMPTY] * n, 0
    view = memoryview(frame.data)
    digest = xxhash.xxh3_64_intdigest
    datas: list[bytes | memoryview] = []
    sums: list[int] = []
    at = 0
    for oid, length, lo, hi in zip(oids, lengths.tolist(), cols[7::9], cols[8::9], strict=True):
        data = view[at : at + length]
        at += length
        checksum = lo | hi << 32
        if (digest(data) if length else EMPTY) != checksum:
            raise CorruptArchive(f"{where}: LO {oid} is damaged (checksum)")
        datas.append(data)
        sums.append(checksum)
    return oids, metas, datas, sums, at
