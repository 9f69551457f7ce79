"""A DATA frame of whole LOs read as columns of its directory: restore's fast path.

A directory is PIECE_RECORDs, 9 little-endian uint32 each (oid, metadata id, size in
two, offset in two, length, checksum in two), so one ``memoryview.cast("I")`` sliced
``[k::9]`` gives a field of every piece at C speed: no object per LO, and no loop at all
when the LOs are empty (a million empty LOs are read in a few hundredths of a second).
Anything else (a piece of a large LO, a metadata id out of range, a bad checksum of an
empty LO) is left to the piece-by-piece reading in reader.py, which says what is wrong.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import xxhash

from pgblobdump.errors import CorruptArchive
from pgblobdump.packed.format.frames import Frame
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.spec import PIECE_RECORD

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
    """The frame's LOs with OIDs in ``keep`` (None: all) when all its LOs are whole
    (``values``: the metadata table, None for none), each kept LO with bytes checked
    against its checksum; None when the frame is anything else."""
    if not ENABLED or not frame.directory or len(frame.directory) % PIECE_RECORD.size:
        return None
    cols = memoryview(frame.directory).cast("I")
    lengths = cols[6::9]
    if any(cols[4::9]) or any(cols[5::9]) or any(cols[3::9]) or cols[2::9] != lengths:
        return None
    oids = cols[0::9].tolist()
    ids = cols[1::9].tolist()
    kept: list[int] | None = None  # positions of the kept LOs, None: all of them
    if keep is not None and not keep[0] <= min(oids) <= max(oids) <= keep[1]:
        first, last = keep  # a frame across a share's end (restore --part, --jobs)
        kept = [i for i, oid in enumerate(oids) if first <= oid <= last]
    n = len(oids) if kept is None else len(kept)
    if values is None:
        metas = [Meta(None, None, None)] * n
    elif max(ids) >= len(values):
        return None
    elif ids.count(ids[0]) == len(ids):
        metas = [values[ids[0]]] * n
    else:
        metas = [*map(values.__getitem__, ids if kept is None else [ids[i] for i in kept])]
    if not any(lengths):
        every = len(oids)
        if (
            cols[7::9].tolist().count(_EMPTY_LO) != every
            or cols[8::9].tolist().count(_EMPTY_HI) != every
        ):
            return None
        if kept is not None:
            oids = [oids[i] for i in kept]
        return oids, metas, [b""] * n, [EMPTY] * n, 0
    view = memoryview(frame.data)
    digest = xxhash.xxh3_64_intdigest
    mine: list[int] = []
    datas: list[bytes | memoryview] = []
    sums: list[int] = []
    at = total = 0
    first, last = keep or (0, 2**32)
    for oid, length, lo, hi in zip(oids, lengths.tolist(), cols[7::9], cols[8::9], strict=True):
        data = view[at : at + length]
        at += length
        if kept is not None and not first <= oid <= last:
            continue
        checksum = lo | hi << 32
        if (digest(data) if length else EMPTY) != checksum:
            raise CorruptArchive(f"{where}: LO {oid} is damaged (checksum)")
        mine.append(oid)
        datas.append(data)
        sums.append(checksum)
        total += length
    return mine, metas, datas, sums, total
