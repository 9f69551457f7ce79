"""What a walk over an archive's LO data gives: per LO a LoData (its stored size, and its
bytes when asked for), or a SizeRun for a run of same-size LOs when only sizes are read."""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SizeRun:
    """Consecutive LOs of one block, each stored as ``size`` bytes in one chunk (no chunk
    when ``size`` is 0); ``oids`` in data order, none of them 0."""

    oids: array[int]
    size: int
    blobs_id: int


class LoData:
    """One LO's data as the walk finds it: ``size`` the stored (possibly compressed) byte
    count, ``blobs_id`` the BLOBS entry holding it, ``member`` its data file (directory
    and tar archives). ``pieces()`` gives its bytes, decompressed, as pg_dump read them
    from the server: once, and before the walk moves on to the next LO."""

    __slots__ = ("_read", "blobs_id", "member", "oid", "size")

    def __init__(
        self,
        oid: int,
        size: int,
        blobs_id: int,
        member: str | None,
        read: Callable[[], Iterator[bytes]],
    ) -> None:
        self.oid = oid
        self.size = size
        self.blobs_id = blobs_id
        self.member = member
        self._read = read

    def pieces(self) -> Iterator[bytes]:
        return self._read()

    def __repr__(self) -> str:
        return f"LoData(oid={self.oid}, size={self.size}, blobs_id={self.blobs_id})"


def nothing() -> Iterator[bytes]:
    """The pieces of an LO with no bytes."""
    return iter(())
