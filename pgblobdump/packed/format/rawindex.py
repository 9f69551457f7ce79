"""Index records as they are stored (raw INDEX_RECORD bytes), read as columns: what an
incremental dump and a chain's readers handle a block at a time with no object per LO,
and the merge of index builders run by run."""

from __future__ import annotations

import bisect
import sys
from collections.abc import Iterator, Sequence

from pgblobdump.errors import CorruptArchive
from pgblobdump.packed.format.indexbuild import IndexBuilder
from pgblobdump.packed.format.spec import INDEX_RECORD
from pgblobdump.pgconstants import OID_MAX


def merged_builder(builders: Sequence[IndexBuilder]) -> IndexBuilder:
    """One builder with the records of ``builders``, each in OID order, merged into one
    OID order (an incremental dump: the LOs it packed and those its bases hold): run by
    run, each run of one builder's records copied whole up to the next builder's OID."""
    out = IndexBuilder()
    cursors = [RawRecords(b.raw_blocks()) for b in builders]
    try:
        while True:
            heads = sorted((oid, k) for k, c in enumerate(cursors)
                           if (oid := c.peek()) is not None)  # fmt: skip
            if not heads:
                return out
            if len(heads) > 1 and heads[1][0] == heads[0][0]:
                raise CorruptArchive(f"LO {heads[0][0]} is in two parts of one index")
            limit = heads[1][0] - 1 if len(heads) > 1 else OID_MAX
            out.add_records(cursors[heads[0][1]].run(limit))
    except BaseException:
        out.close()
        raise


COLUMNS_OK = INDEX_RECORD.format == "<IIQIQQ" and sys.byteorder == "little"


def oid_column(raw: bytes | bytearray | memoryview) -> list[int]:
    """The OIDs of raw INDEX_RECORDs (one strided view, at C speed)."""
    if COLUMNS_OK:
        return memoryview(raw).cast("B").cast("I")[0::9].tolist()
    return [r[0] for r in INDEX_RECORD.iter_unpack(raw)]


class RawRecords:
    """A cursor over raw INDEX_RECORDs coming block by block in OID order: ``peek`` the
    next OID, ``take_through`` every record up to an OID as one bytes (memory: a block)."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self._raw = b""
        self._oids: list[int] = []
        self._pos = 0

    def _fill(self) -> bool:
        while self._pos >= len(self._oids):
            raw = next(self._blocks, None)
            if raw is None:
                return False
            self._raw, self._oids, self._pos = raw, oid_column(raw), 0
        return True

    def peek(self) -> int | None:
        return self._oids[self._pos] if self._fill() else None

    def take_through(self, last: int) -> bytes:
        """The records with OIDs up to ``last`` (those not taken yet), in order: as much
        memory as they take (a window's worth; ``run`` for any count)."""
        parts: list[bytes] = []
        while run := self.run(last):
            parts.append(run)
        return b"".join(parts)

    def run(self, last: int) -> bytes:
        """The next records with OIDs up to ``last``, from the current block only (b""
        when none): a block's worth of memory at most."""
        if not self._fill():
            return b""
        size = INDEX_RECORD.size
        end = bisect.bisect_right(self._oids, last, self._pos)
        out = self._raw[self._pos * size : end * size]
        self._pos = end
        return out
