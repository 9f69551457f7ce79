"""An LO's bytes gathered as they are read: in memory while small, in an unlinked
temporary file past SPILL, so an LO of any size (4 TB) costs disk, not memory."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

SPILL = 16 << 20
"""An LO larger than this is spooled to a temporary file as it is read (the COPY must go
on to the next LO), so a 4 TB LO costs disk, not memory."""
ZEROS = bytes(1 << 20)


class Spooled:
    """An LO's bytes in a temporary file, given back in 1 MiB pieces, once."""

    def __init__(self) -> None:
        # closed by __iter__; unlinked from the start, so a run cut short leaves nothing
        self.file = tempfile.TemporaryFile(prefix="pgblobdump-lo-")  # noqa: SIM115

    def write(self, data: bytes) -> None:
        self.file.write(data)

    def __iter__(self) -> Iterator[bytes]:
        with self.file as f:
            f.seek(0)
            while piece := f.read(1 << 20):
                yield piece


class Gather:
    """One LO's bytes as they come: in memory up to SPILL, then in a Spooled file."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.spool: Spooled | None = None
        self.size = 0

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if self.spool is None and self.size > SPILL:
            self.spool = Spooled()
            for c in self.chunks:
                self.spool.write(c)
            self.chunks = []
        if self.spool is not None:
            self.spool.write(data)
        else:
            self.chunks.append(data)

    def zeros(self, n: int) -> None:
        """A hole (pages never written): zeros, as lo_get gives them."""
        while n > 0:
            k = min(n, len(ZEROS))
            self.add(ZEROS[:k] if k < len(ZEROS) else ZEROS)
            n -= k

    def result(self) -> list[bytes] | Spooled:
        return self.chunks if self.spool is None else self.spool
