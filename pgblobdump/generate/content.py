"""Deterministic LO sizes and bytes from a seed: zeros, random, or text-like."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

from pgblobdump.generate.spec import Content, SizeSpec

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


class ContentSource:
    """Yields (size, bytes) pairs; the same seed gives the same LOs in the same order."""

    def __init__(self, size: SizeSpec, content: Content, seed: int) -> None:
        self.size = size
        self.content = content
        self._rng = random.Random(seed)
        self._zeros = b""
        self._text = b""
        if content is Content.TEXT:
            # A pool of text; each LO is a slice of it at a random place. Slices overlap,
            # which is fine: compressors see one LO at a time.
            words = [self._rng.choice(_WORDS) for _ in range(200_000)]
            self._text = " ".join(words).encode()
            while len(self._text) < 2 * max(size.high, 1):
                self._text += self._text

    def next_size(self) -> int:
        lo, hi = self.size.low, self.size.high
        if lo == hi:
            return lo
        # log-uniform over [max(lo,1), hi]
        a, b = math.log(max(lo, 1)), math.log(hi + 1)
        return min(hi, max(lo, int(math.exp(self._rng.uniform(a, b)))))

    def data(self, n: int) -> bytes:
        if n == 0:
            return b""
        if self.content is Content.RANDOM:
            return self._rng.randbytes(n)
        if self.content is Content.ZEROS:
            if len(self._zeros) < n:
                self._zeros = bytes(n)
            return self._zeros[:n]
        start = self._rng.randrange(0, len(self._text) - n + 1)
        return self._text[start : start + n]

    def __iter__(self) -> Iterator[bytes]:
        while True:
            yield self.data(self.next_size())
