"""Deterministic LO sizes and bytes from a seed: zeros, random, text-like or mixed.

Sizes, content kinds and sparse shapes (the plan) come from one random stream and bytes
from another, so how LOs are grouped into batches (which depends on the server's lock
table) never changes what any LO holds: the same seed gives the same LOs everywhere.
Bytes come in pieces of at most STREAM_CHUNK, so an LO of any size needs that much
client memory, not its size."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from pgblobdump.generate.spec import SPARSE_MIN, Content, SizeDist, SizeSpec
from pgblobdump.pgconstants import LOBLKSIZE

STREAM_ABOVE = 4 * 1024 * 1024
"""LOs bigger than this are created empty and written with ``lo_put`` piece by piece,
never built whole in the client."""
STREAM_CHUNK = 4 * 1024 * 1024
"""Bytes per ``lo_put`` (and the most content held at once) for a streamed LO."""
PAGE = LOBLKSIZE
"""pg_largeobject's page (LOBLKSIZE at the default 8 KiB block)."""

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "large",
    "object",
    "postgres",
    "dump",
    "restore",
    "table",
    "index",
    "page",
    "data",
    "toast",
    "oid",
    "bytea",
    "archive",
    "backup",
    "storage",
    "invoice",
    "report",
    "customer",
    "order",
    "image",
    "scan",
    "document",
    "attachment",
    "version",
    "metadata",
    "owner",
    "grant",
    "comment",
]


@dataclass(frozen=True)
class Planned:
    """One LO to make: its length, what its bytes look like, and ``sparse`` 0 (written
    whole) or a hole shape: 1 data only in the last page (a hole at the start), 2 a hole
    in the middle, 3 data only in the first page then a hole to the end, closed by one
    byte in the last page (the LO is mostly hole)."""

    size: int
    kind: Content
    sparse: int = 0

    @property
    def streamed(self) -> bool:
        return self.sparse > 0 or self.size > STREAM_ABOVE

    @property
    def stored(self) -> int:
        """Bytes written, holes left out: what ``ContentSource.pieces`` yields in all."""
        n = self.size
        if self.sparse == 0:
            return n
        if self.sparse == 1:
            return n % PAGE or PAGE
        if self.sparse == 2:
            return 2 * max(PAGE, n // 4 // PAGE * PAGE)
        return PAGE + 1


class ContentSource:
    """Plans LOs and yields their bytes; the same seed gives the same LOs in the same order."""

    def __init__(
        self,
        size: SizeSpec,
        content: Content,
        seed: int,
        dist: SizeDist | None = None,
        sparse_fraction: float = 0.0,
    ) -> None:
        self.size = size
        self.dist = dist
        self.content = content
        self.sparse_fraction = sparse_fraction
        self._plan_rng = random.Random(seed)
        self._rng = random.Random(seed ^ 0x5EED_DA7A)
        self._zeros = b""
        self._text = b""
        self._mixed_acc = 0.0
        self._sparse_acc = 0.0
        self._sparse_no = 0
        if content in (Content.TEXT, Content.MIXED):
            # A pool of text; each LO (or piece) is a slice of it at a random place.
            # Slices overlap, which is fine: compressors see one LO at a time. The pool
            # is at most twice a streamed piece, whatever the sizes.
            top = dist.max if dist else size.high
            words = [self._rng.choice(_WORDS) for _ in range(200_000)]
            self._text = " ".join(words).encode()
            while len(self._text) < 2 * max(min(top, STREAM_CHUNK), 1):
                self._text += self._text

    def next_size(self) -> int:
        if self.dist is not None:
            d = self.dist
            drawn = math.exp(self._plan_rng.gauss(math.log(d.median), d.sigma))
            return min(d.max, int(drawn))
        lo, hi = self.size.low, self.size.high
        if lo == hi:
            return lo
        # log-uniform over [max(lo,1), hi]
        a, b = math.log(max(lo, 1)), math.log(hi + 1)
        return min(hi, max(lo, int(math.exp(self._plan_rng.uniform(a, b)))))

    def plan(self) -> Planned:
        """The next LO's size, kind and sparse shape (shares spread evenly, not drawn)."""
        n = self.next_size()
        kind = self.content
        if kind is Content.MIXED:
            # Half text, half random, alternating: exact shares at any count.
            self._mixed_acc += 0.5
            kind = Content.TEXT if self._mixed_acc >= 1.0 else Content.RANDOM
            if self._mixed_acc >= 1.0:
                self._mixed_acc -= 1.0
        sparse = 0
        if self.sparse_fraction and n >= SPARSE_MIN:
            self._sparse_acc += self.sparse_fraction
            if self._sparse_acc >= 1.0 - 1e-9:
                self._sparse_acc -= 1.0
                sparse = self._sparse_no % 3 + 1
                self._sparse_no += 1
        return Planned(n, kind, sparse)

    def data(self, n: int, kind: Content | None = None) -> bytes:
        kind = kind or self.content
        if n == 0:
            return b""
        if kind is Content.RANDOM:
            return self._rng.randbytes(n)
        if kind is Content.ZEROS:
            if len(self._zeros) < n:
                self._zeros = bytes(n)
            return self._zeros[:n]
        start = self._rng.randrange(0, len(self._text) - n + 1)
        return self._text[start : start + n]

    def _run(self, offset: int, n: int, kind: Content) -> Iterator[tuple[int, bytes]]:
        for start in range(offset, offset + n, STREAM_CHUNK):
            yield start, self.data(min(STREAM_CHUNK, offset + n - start), kind)

    def pieces(self, p: Planned) -> Iterator[tuple[int, bytes]]:
        """(offset, bytes) pieces of a streamed LO, at most STREAM_CHUNK each; for a
        sparse LO the gaps between pieces are holes: pages pg_largeobject never gets."""
        n = p.size
        if p.sparse == 0:
            yield from self._run(0, n, p.kind)
        elif p.sparse == 1:
            tail = n % PAGE or PAGE
            yield from self._run(n - tail, tail, p.kind)
        elif p.sparse == 2:
            # Whole pages at both ends, at least one whole page of hole between them.
            quarter = max(PAGE, n // 4 // PAGE * PAGE)
            yield from self._run(0, quarter, p.kind)
            yield from self._run(n - quarter, quarter, p.kind)
        else:
            yield from self._run(0, PAGE, p.kind)
            yield from self._run(n - 1, 1, p.kind)

    def __iter__(self) -> Iterator[bytes]:
        while True:
            yield self.data(self.next_size())
