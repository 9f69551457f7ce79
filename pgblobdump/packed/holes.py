"""Holes: runs of all-zero pages an LO's bytes are written without, and given back.

PostgreSQL keeps an LO as LOBLKSIZE pages in ``pg_largeobject``; a page never written is
missing, and reads as zeros (``lo_put`` at 1 GB into an empty LO writes one page, not
488,282). An archive that stored those zeros would restore them as pages. So the writer
looks for whole zero pages in the bytes it is given, whatever read them (``lo_get``,
``pg_largeobject``'s pages, a pg_dump archive, which holds the zeros), and records the
runs of non-zero pages only (format version 2, docs/format.md "Holes"). The readers give
those runs to restore, which leaves the holes missing again, and zeros to everyone who
wants an LO's bytes (``cat``, ``verify``, ``unpack``).

The test is ``bytes.find`` of a zero page, C speed, before any per-page work: bytes with
no zero page (random, text, compressed) cost one scan and nothing else.
"""

from __future__ import annotations

from pgblobdump.packed.format import LOBLKSIZE

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

    ``[(0, len(data))]`` when nothing is left out (the usual case: one ``find``)."""
    assert start % LOBLKSIZE == 0
    n = len(data)
    at = data.find(ZERO_PAGE)
    holes: list[tuple[int, int]] = []
    while at >= 0:
        page = -(-at // LOBLKSIZE) * LOBLKSIZE  # an aligned zero page starts here or later
        first = page
        while page + LOBLKSIZE <= n and data[page : page + LOBLKSIZE] == ZERO_PAGE:
            page += LOBLKSIZE
        if page > first:
            holes.append((first, page))
            at = data.find(ZERO_PAGE, page + LOBLKSIZE)
        else:  # the zeros straddle two pages: look on past this one's start
            at = data.find(ZERO_PAGE, page + 1)
    short = n % LOBLKSIZE
    if end is not None and start + n == end and short and data.count(0, n - short) == short:
        if holes and holes[-1][1] == n - short:
            holes[-1] = (holes[-1][0], n)
        else:
            holes.append((n - short, n))
    keep: list[tuple[int, int]] = []
    at = 0
    tail = end is not None and start + n == end
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
