"""What a reader gives restore, cat and verify: LOs whole in runs (``WholeLos``), large
ones piece by piece (``LoPiece``), and, when asked to skip them, the LOs of damaged frames
(``Damaged``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pgblobdump.packed.format.index import Meta


@dataclass(frozen=True)
class LoPiece:
    """An LO's bytes as restore takes them: the whole LO (``offset == 0`` and ``last``),
    or one piece of a large one. ``checksum`` is set on the last piece and was checked."""

    oid: int
    meta: Meta
    size: int
    offset: int
    data: bytes | memoryview
    last: bool
    checksum: int = 0


@dataclass(frozen=True, slots=True)
class WholeLos:
    """Consecutive whole LOs of one DATA frame, checked, as parallel lists: how restore
    takes the many small LOs of an archive without an object per LO."""

    oids: list[int]
    metas: list[Meta]
    datas: list[bytes | memoryview]
    checksums: list[int]

    def pieces(self) -> Iterator[LoPiece]:
        """The same LOs one by one."""
        for oid, meta, data, checksum in zip(
            self.oids, self.metas, self.datas, self.checksums, strict=True
        ):
            yield LoPiece(oid, meta, len(data), 0, data, True, checksum)


@dataclass(frozen=True)
class Damaged:
    """LOs lost to damage, skipped on request (restore --skip-damaged): ``oids`` (from
    the index), ``where`` and ``reason`` as the error would have said them."""

    oids: list[int]
    where: str
    reason: str


Item = LoPiece | WholeLos | Damaged
"""What restore takes from an archive: whole small LOs in runs, large LOs piece by piece
(and, when asked to skip them, the LOs of damaged frames)."""


def each_piece(items: Iterable[Item]) -> Iterator[LoPiece]:
    """``items`` one LoPiece at a time."""
    for item in items:
        if isinstance(item, WholeLos):
            yield from item.pieces()
        elif isinstance(item, LoPiece):
            yield item
