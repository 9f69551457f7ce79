"""Holes: runs of all-zero pages an LO's bytes are written without, and given back.

PostgreSQL keeps an LO as LOBLKSIZE pages in ``pg_largeobject``; a page never written is
missing, and reads as zeros (``lo_put`` at 1 GB into an empty LO writes one page, not
488,282). An archive that stored those zeros would restore them as pages. So the writer
looks for whole zero pages in the bytes it is given, whatever read them (``lo_get``,
``pg_largeobject``'s pages, a pg_dump archive, which holds the zeros), and records the
runs of non-zero pages only (since format version 2, docs/format.md "Holes"). The readers give
those runs to restore, which leaves the holes missing again, and zeros to everyone who
wants an LO's bytes (``cat``, ``verify``, ``unpack``).

The test looks at each page's first byte first (``data[::LOBLKSIZE]`` and a ``find`` of a
zero in it, C speed, a few bytes per MiB): bytes where no page starts with a zero (text,
most random and compressed pages) cost that and nothing else; a page that does is
compared with a zero page in place (``startswith``), page by page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, TypeVar

from pgblobdump.pgconstants import LOBLKSIZE

ZERO_PAGE = bytes(LOBLKSIZE)
ZEROS = memoryview(bytes(1 << 20))
"""Zeros given for holes to the readers that want an LO's bytes, 1 MiB at a time."""


def runs(data: bytes, start: int, end: int | None, min_pages: int = 1) -> list[tuple[int, int]]:
    """The (begin, end) ranges of ``data`` to keep, in order, leaving out the runs of whole
    zero pages that save at least ``min_pages`` pages. ``data`` holds the LO's bytes from
    offset ``start``, a multiple of LOBLKSIZE; ``end`` is the LO's size when ``data``
    reaches it (its last page, possibly short, is then a hole too when all zero), else
    None. A hole at the LO's end saves one page less than it has: the LO's length ends in
    its last page, which restore writes all the same.

    ``[(0, len(data))]`` when nothing is left out: the usual case, found from the pages'
    first bytes alone (a strided slice and a ``find``, C speed)."""
    assert start % LOBLKSIZE == 0
    n = len(data)
    firsts = data[::LOBLKSIZE]  # each page's first byte: a zero page starts with a zero
    k = firsts.find(0)
    if k < 0:
        return [(0, n)] if n else []
    tail = end is not None and start + n == end
    whole = n // LOBLKSIZE
    holes: list[tuple[int, int]] = []
    while k >= 0:
        at = k * LOBLKSIZE
        # a whole page is compared in place (not copied); a short last page is a hole
        # only where the LO ends
        zero = (data.startswith(ZERO_PAGE, at) if k < whole
                else tail and data.count(0, at) == n - at)  # fmt: skip
        if zero:
            hi = min(at + LOBLKSIZE, n)
            if holes and holes[-1][1] == at:
                holes[-1] = (holes[-1][0], hi)
            else:
                holes.append((at, hi))
        k = firsts.find(0, k + 1)
    keep: list[tuple[int, int]] = []
    at = 0
    for lo, hi in holes:
        saves = -(-(hi - lo) // LOBLKSIZE) - (tail and hi == n)
        if saves < min_pages:
            continue  # kept as bytes
        if lo > at:
            keep.append((at, lo))
        at = hi
    if at < n:
        keep.append((at, n))
    return keep


def hash_zeros(h: Any, n: int) -> None:
    """Feed ``n`` zeros to the hasher ``h``: a hole, in an LO's checksum."""
    while n > 0:
        k = min(n, len(ZEROS))
        h.update(ZEROS[:k])
        n -= k


class _Piece(Protocol):
    @property
    def offset(self) -> int: ...
    @property
    def data(self) -> bytes | memoryview: ...
    @property
    def last(self) -> bool: ...


P = TypeVar("P", bound=_Piece)


def filled(pieces: Iterable[P]) -> Iterator[P]:
    """``pieces`` (the reader's LoPieces, frozen dataclasses) with their holes given back
    as pieces of zeros, so each LO's pieces run from offset 0 to its size without a gap:
    an LO's bytes, for ``cat`` and ``unpack`` (restore takes the pieces as they are, and
    leaves the holes missing)."""
    at = 0
    for p in pieces:
        if p.offset == 0:
            at = 0
            if not len(p.data) and not p.last:
                continue  # opens an LO that starts with a hole: its zeros start it here
        while at < p.offset:
            n = min(p.offset - at, len(ZEROS))
            zeros: P = dataclasses.replace(  # type: ignore[type-var]
                p, offset=at, data=ZEROS[:n], last=False, checksum=0
            )
            yield zeros
            at += n
        yield p
        at = p.offset + len(p.data)
