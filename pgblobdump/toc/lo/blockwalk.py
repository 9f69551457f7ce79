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

import os
import re
import sys
from array import array
from collections.abc import Iterator

from pgblobdump.errors import CorruptArchive
from pgblobdump.toc.lo.data import SizeRun
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


MAX_LO_CHUNK = 1 << 24
"""pg_dump writes LO data in pieces of one lo_read buffer (LOBBUFSIZE, 16 kB) or of one
compressor output buffer (at most a few hundred kB): a longer chunk length is damage."""


class _Bounds:
    """Where a block of LO data must end, and the errors for data that runs past it."""

    def __init__(self, r: Reader, blobs_id: int, limit: int | None) -> None:
        self.r = r
        self.blobs_id = blobs_id
        self.size = r.size
        self.limit = limit if limit is not None else (r.size if r.size is not None else 1 << 62)
        # A block followed by another one cannot legitimately run past the next one.
        self.inner = r.size is not None and self.limit < r.size

    def moved(self, pos: int, n: int, what: str, skip: bool = False) -> tuple[bytes, int, int, int]:
        """Move the reader to ``pos`` in its buffer, then past ``n`` bytes (``skip``) or
        until ``n`` bytes are buffered from there; the walk's locals anew: the buffer, the
        position in it, its end, and the limit as a position in it."""
        r = self.r
        r.pos = pos
        if skip:
            r.skip(n, what)
        else:
            r.fill(n, what)
        return r.buf, r.pos, len(r.buf), self.limit - r.base

    def to_int(self, pos: int, oid: int | None, what: str) -> tuple[bytes, int, int, int]:
        """For an Int at ``pos`` that runs past the buffer or the limit: the ``block``
        error (``oid`` the LO it follows or belongs to) when it passes the limit, else
        the reader refilled (``moved``)."""
        if pos + 5 > self.limit - self.r.base:
            raise self.block(oid, self.r.base + pos)
        return self.moved(pos, 5, what)

    def chunk(self, oid: int, at: int, n: int) -> CorruptArchive:
        """The error for a chunk of ``n`` bytes, its length at byte ``at``, too long."""
        name = self.r.name
        if self.inner:
            return CorruptArchive(
                f"{name}: damaged data of large object {oid} at byte {at}: a chunk of {n:,}"
                f" bytes would run into the next data block, at byte {self.limit}"
            )
        if n > MAX_LO_CHUNK:
            return CorruptArchive(
                f"{name}: damaged data of large object {oid} at byte {at}: a chunk length of"
                f" {n:,} bytes, more than pg_dump writes"
            )
        return CorruptArchive(
            f"{name}: file ends early (truncated?) at byte {self.size} in large object {oid}"
            f" (a chunk of {n:,} bytes at byte {at}), or its data is damaged"
        )

    def block(self, oid: int | None, at: int) -> CorruptArchive:
        """The error for LO data that goes on past ``limit`` (next LO header at ``at``)."""
        after = f" after large object {oid}" if oid is not None else ""
        if self.inner:
            return CorruptArchive(
                f"{self.r.name}: damaged data of the large objects of entry {self.blobs_id}"
                f" at byte {at}{after}: it runs into the next data block, at byte {self.limit}"
            )
        return CorruptArchive(
            f"{self.r.name}: file ends early (truncated?) at byte {self.size} while reading"
            f" the large objects of entry {self.blobs_id}{after}"
        )


def walk_sizes(
    r: Reader,
    blobs_id: int,
    runs: bool = False,
    limit: int | None = None,
) -> Iterator[tuple[int, int, int] | SizeRun]:
    """(oid, stored size, blobs_id) per LO of the block at ``r`` (or, with ``runs``, a
    SizeRun for a run of same-size LOs), without reading the data. ``limit`` is the
    file offset the block cannot pass (the next block's start; default the file's end):
    data that would pass it is damaged, and said to be.

    Decodes on local variables and touches the Reader only to refill or to seek past a
    chunk that is not buffered, because a million-LO block is four million Ints.
    """
    one = INT4.unpack_from
    what = f"the large objects of entry {blobs_id}"
    bounds = _Bounds(r, blobs_id, limit)
    cool = misses = 0  # LOs to let pass after a miss (sizes that vary), and the backoff
    last: int | None = None  # the previous LO's oid, for messages
    buf, pos, end = r.buf, r.pos, len(r.buf)
    lim = bounds.limit - r.base  # the limit, as a position in buf
    while True:
        if pos + 5 > end or pos + 5 > lim:
            buf, pos, end, lim = bounds.to_int(pos, last, what)
        s, oid = one(buf, pos)
        pos += 5
        if s:
            oid = -oid & OID_MASK
        if oid == 0:
            r.pos = pos
            return
        size = chunks = 0
        while True:
            if pos + 5 > end or pos + 5 > lim:
                buf, pos, end, lim = bounds.to_int(pos, oid, what)
            s, n = one(buf, pos)
            pos += 5
            if s:
                raise CorruptArchive(
                    f"{r.name}: damaged data of large object {oid} at byte {r.base + pos - 5}:"
                    " a negative chunk length"
                )
            if n == 0:
                break
            if pos + n > lim:
                raise bounds.chunk(oid, r.base + pos - 5, n)
            size += n
            chunks += 1
            if pos + n <= end:
                pos += n
            else:
                buf, pos, end, lim = bounds.moved(pos, n, what, skip=True)
        last = oid
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
            last = run.oids[-1]
            yield run
        if found:
            misses = 0
        else:
            misses = min(misses + 1, 6)
            cool = (1 << misses) - 1


def walk_data(
    r: Reader, blobs_id: int, limit: int | None = None
) -> Iterator[tuple[int, int, bytes | None]]:
    """(oid, stored size, stored bytes) per LO of the block at ``r``. An LO stored as at
    most one chunk that is in the reader's buffer comes with its bytes (``b""`` for no
    chunk); for any other the bytes are None and ``r`` is at its first chunk length:
    between two steps the caller may read its chunks (read_chunks), or not; the walk goes
    on from where the LO ends. Every chunk length is checked (``limit`` as for walk_sizes)
    before the LO is yielded, so its size is known before its bytes."""
    what = f"the large objects of entry {blobs_id}"
    bounds = _Bounds(r, blobs_id, limit)
    one = INT4.unpack_from
    last: int | None = None
    while True:
        if r.offset + 5 > bounds.limit:
            raise bounds.block(last, r.offset)
        if r.pos + 15 > len(r.buf):
            r.fill(5, what)
        buf, pos = r.buf, r.pos
        s, oid = one(buf, pos)
        if s:
            oid = -oid & OID_MASK
        if oid == 0:
            r.pos = pos + 5
            return
        pos += 5
        # the common case at C speed: one chunk (or none) whose bytes are all buffered
        s, n = one(buf, pos) if pos + 5 <= len(buf) else (1, 0)
        if not s and pos + 10 + n <= len(buf) and r.base + pos + 10 + n <= bounds.limit:
            if n == 0:
                r.pos = pos + 5
                yield oid, 0, b""
                last = oid
                continue
            if one(buf, pos + 5 + n) == (0, 0):
                r.pos = pos + 10 + n
                yield oid, n, buf[pos + 5 : pos + 5 + n]
                last = oid
                continue
        r.pos = pos
        start = r.offset
        size, count = _scan(r, oid, bounds)
        yield oid, size, None
        r.seek(start + 5 * count + size + 5)  # past the zero length that ends the LO
        last = oid


def _scan(r: Reader, oid: int, bounds: _Bounds) -> tuple[int, int]:
    """The stored size and chunk count of the LO whose first chunk length is at
    ``r.offset``, from its chunk lengths alone: those in the buffer are decoded in place,
    the others read with pread (5 bytes each), so a large LO's data is not read twice.
    The reader does not move."""
    buf, base, at = r.buf, r.base, r.offset
    lim = bounds.limit
    size = count = 0
    fd: int | None = None
    while True:
        if at + 5 > lim:
            raise bounds.block(oid, at)
        i = at - base
        if i + 5 <= len(buf):
            s, n = INT4.unpack_from(buf, i)
        else:
            if fd is None:
                fd = r.f.fileno()
            head = os.pread(fd, 5, at)
            if len(head) < 5:
                raise bounds.block(oid, at)
            s, n = INT4.unpack(head)
        if s:
            raise CorruptArchive(
                f"{r.name}: damaged data of large object {oid} at byte {at}:"
                " a negative chunk length"
            )
        if n == 0:
            return size, count
        if at + 5 + n > lim:
            raise bounds.chunk(oid, at, n)
        size += n
        count += 1
        at += 5 + n


def read_chunks(r: Reader, what: str) -> Iterator[tuple[bytes, int]]:
    """The chunks of the LO whose first chunk length is at ``r.offset`` (as walk_data left
    it), each with the file offset of its first byte; lengths already checked by _scan."""
    while n := r.read_int(what):
        at = r.offset
        yield r.read_bytes(n, what), at
