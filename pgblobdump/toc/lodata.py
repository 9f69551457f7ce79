"""The LO walk of one custom-format BLK_BLOBS block, with runs of same-size LOs.

A block repeats ``Int oid`` + chunks ``[Int length][bytes]`` ended by length 0, until
oid 0 (_LoadLOs / _skipLOs of pg_backup_custom.c). A million empty LOs are a million
identical shapes: nothing (uncompressed) or one 8-byte chunk (gzip's empty stream
``78 9c 03 00 00 00 00 01``). After an LO stored as at most one chunk of ``n`` bytes is
decoded Int by Int, a pattern with the chunk length as a literal matches the run of LOs
of that shape that follows in one ``re.match``; each has the fixed stride ``10 + 5 + n``
(``10`` when no chunk), so the OIDs are sliced out of the run at C speed. The pattern
accepts any OID bytes, so the run is cut before the first OID that reads as 0 (the end
of the block), where the Int by Int loop takes over again.
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass

from pgblobdump.errors import CorruptArchive
from pgblobdump.toc.primitives import INT4, Reader

OID_MASK = 0xFFFFFFFF
"""OIDs >= 2^31 are written through a signed int and come back negative: mask to 32 bits."""

MAX_RUN = 4096
"""LOs per regex call: bounds sre's backtracking stack."""

MAX_CHUNK = 256
"""Only LOs of at most this many stored bytes are matched in runs; bigger ones cost
little per byte in the Int by Int loop."""

_patterns: dict[int, re.Pattern[bytes]] = {}

assert array("I").itemsize == 4  # OIDs are sliced into an array of uint32


@dataclass(frozen=True, slots=True)
class SizeRun:
    """Consecutive LOs of one block, each stored as ``size`` bytes in one chunk (no chunk
    when ``size`` is 0); ``oids`` in data order, none of them 0."""

    oids: array[int]
    size: int
    blobs_id: int


def _pattern(n: int) -> re.Pattern[bytes]:
    pattern = _patterns.get(n)
    if pattern is None:
        chunk = re.escape(b"\x00" + n.to_bytes(4, "little")) + b"(?s:.{%d})" % n if n else b""
        pattern = re.compile(b"(?:(?s:.{5})" + chunk + b"\x00{5}){1,%d}" % MAX_RUN)
        _patterns[n] = pattern
    return pattern


def _match(buf: bytes, pos: int, n: int, blobs_id: int) -> tuple[SizeRun, int] | None:
    """The run of LOs stored as one ``n``-byte chunk at ``buf[pos:]`` and where it ends."""
    m = _pattern(n).match(buf, pos)
    if m is None:
        return None
    end = m.end()
    stride = 15 + n if n else 10
    count = (end - pos) // stride
    raw = bytearray(4 * count)
    for k in range(4):
        raw[k::4] = buf[pos + 1 + k : end : stride]
    oids = array("I")
    oids.frombytes(raw)
    if sys.byteorder == "big":
        oids.byteswap()
    signs = buf[pos:end:stride]
    if signs.count(0) != count:  # ReadInt: any non-zero sign byte is negative
        for i, sign in enumerate(signs):
            if sign:
                oids[i] = -oids[i] & OID_MASK
    if 0 in oids:  # the block ends there
        count = oids.index(0)
        if not count:
            return None
        del oids[count:]
        end = pos + count * stride
    return SizeRun(oids, n, blobs_id), end


def walk_sizes(
    r: Reader, blobs_id: int, keep: int | None = None, runs: bool = False
) -> Iterator[tuple[int, int, int] | bytes | SizeRun]:
    """(oid, stored size, blobs_id) per LO of the block at ``r`` (or, with ``runs``, a
    SizeRun for a run of same-size LOs). For the LO whose oid is ``keep`` also yield
    its raw chunks (bytes) before its tuple; ``keep`` turns runs off.

    Decodes on local variables and touches the Reader only to refill or to seek past a
    chunk that is not buffered, because a million-LO block is four million Ints.
    """
    one = INT4.unpack_from
    what = f"the large objects of entry {blobs_id}"
    runs = runs and keep is None
    cool = misses = 0  # LOs to let pass after a miss (sizes that vary), and the backoff
    buf, pos, end = r.buf, r.pos, len(r.buf)
    while True:
        if pos + 5 > end:
            r.pos = pos
            r.fill(5, what)
            buf, pos, end = r.buf, r.pos, len(r.buf)
        s, oid = one(buf, pos)
        pos += 5
        if s:
            oid = -oid & OID_MASK
        if oid == 0:
            r.pos = pos
            return
        size = chunks = 0
        while True:
            if pos + 5 > end:
                r.pos = pos
                r.fill(5, what)
                buf, pos, end = r.buf, r.pos, len(r.buf)
            s, n = one(buf, pos)
            pos += 5
            if s:
                raise CorruptArchive(f"{r.name}: negative chunk length at byte {r.base + pos - 5}")
            if n == 0:
                break
            size += n
            chunks += 1
            if oid == keep:
                r.pos = pos
                yield r.read_bytes(n, what)
                buf, pos, end = r.buf, r.pos, len(r.buf)
            elif pos + n <= end:
                pos += n
            else:
                r.pos = pos
                r.skip(n, what)
                buf, pos, end = r.buf, r.pos, len(r.buf)
        yield (oid, size, blobs_id)
        if not runs or chunks > 1 or size > MAX_CHUNK:
            continue
        if cool:
            cool -= 1
            continue
        found = False
        while (hit := _match(buf, pos, size, blobs_id)) is not None:
            run, pos = hit
            found = True
            yield run
        if found:
            misses = 0
        else:
            misses = min(misses + 1, 6)
            cool = (1 << misses) - 1
