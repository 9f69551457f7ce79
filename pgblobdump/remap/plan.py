"""Which LOs of an archive get new OIDs, and which: decided once, before anything is
written, and kept in the run (store.Run.plan) so that a resumed run decides the same.

- ``--remap taken``: the archive's LOs whose OID an LO of the target has; the others keep
  theirs. ``--remap all``: every LO.
- The new OIDs are one consecutive block, reserved for the run (pg/oidspace.py: other
  pgblobdump runs see it), just above every LO of the target and every OID of the archive,
  or from ``--oid-range LO-HI``, which must hold no LO and be large enough.
- The k-th remapped LO (in OID order) gets the block's k-th OID: with ``all``, k is the
  LO's rank in the archive's index; with ``taken``, its rank among the taken OIDs.
"""

from __future__ import annotations

import bisect
import enum
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import psycopg

from pgblobdump.errors import DatabaseError, UsageError
from pgblobdump.packed.format.index import Index
from pgblobdump.pg import catalog, oidspace
from pgblobdump.pg.ledger import to_ranges
from pgblobdump.pg.query import one
from pgblobdump.pgconstants import FIRST_OID, OID_MAX


class Mode(enum.StrEnum):
    TAKEN = "taken"
    ALL = "all"


def parse_range(text: str) -> tuple[int, int]:
    """``--oid-range LO-HI`` -> (LO, HI), FIRST_OID <= LO <= HI <= OID_MAX."""
    lo, sep, hi = text.partition("-")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
        raise UsageError(f"--oid-range {text!r} must be LO-HI (100000-199999)")
    first, last = int(lo), int(hi)
    if not FIRST_OID <= first <= last <= OID_MAX:
        raise UsageError(
            f"--oid-range {text!r} must lie in {FIRST_OID}..{OID_MAX} with LO <= HI"
            " (OIDs below 16384 are the system's)"
        )
    return first, last


class Ranking(Protocol):
    """How many of the LOs to remap have an OID below a given one: over an archive's
    index (``Ranks``) or over the OIDs themselves (``OidRanks``, copy --remap)."""

    count: int

    def rank(self, oid: int) -> int: ...

    def ranks(self, oids: Sequence[int]) -> list[int]: ...

    def in_range(self, first: int, last: int) -> int: ...

    @property
    def highest(self) -> int: ...


class Ranks:
    """How many of the archive's LOs have an OID below a given one, from its index: a
    block's OIDs decoded once (the block table counts their records)."""

    def __init__(self, index: Index) -> None:
        self.index = index
        self.count = index.count
        self._firsts = [b.first for b in index.blocks]
        before = 0
        self._before = []
        for b in index.blocks:
            self._before.append(before)
            before += b.records
        self._at = -1
        self._oids: list[int] = []

    def _load(self, i: int) -> None:
        if i != self._at:
            self._oids = [r.oid for r in self.index._block(self.index.blocks[i])]
            self._at = i

    def rank(self, oid: int) -> int:
        """The archive's LOs with an OID below ``oid``."""
        i = bisect.bisect_right(self._firsts, oid) - 1
        if i < 0:
            return 0
        self._load(i)
        return self._before[i] + bisect.bisect_left(self._oids, oid)

    def ranks(self, oids: Sequence[int]) -> list[int]:
        """``rank`` of each of ``oids`` (ascending): one lookup when they are
        consecutive in the index, as a frame's LOs usually are."""
        r = self.rank(oids[0])
        local = r - self._before[self._at] if self._at >= 0 else 0
        if self._oids[local : local + len(oids)] == list(oids):
            return list(range(r, r + len(oids)))
        return [self.rank(o) for o in oids]

    def in_range(self, first: int, last: int) -> int:
        """The archive's LOs with OIDs in ``first..last``."""
        return (
            self.rank(last + 1) - self.rank(first)
            if last < OID_MAX
            else self.count - self.rank(first)
        )

    @property
    def highest(self) -> int:
        return self.index.blocks[-1].last if self.index.blocks else 0


class OidRanks:
    """``Ranks`` over a sorted array of the OIDs themselves (copy --remap: the source's
    selected OIDs under its snapshot, fetched once): an array of 4-byte unsigned
    integers, 4 bytes an LO (40 MB for ten million). Read only once built, so the
    jobs of one run share it."""

    def __init__(self, oids: array[int]) -> None:
        self.oids = oids
        self.count = len(oids)

    def rank(self, oid: int) -> int:
        """The OIDs below ``oid``."""
        return bisect.bisect_left(self.oids, oid)

    def ranks(self, oids: Sequence[int]) -> list[int]:
        """``rank`` of each of ``oids`` (ascending, each one of the array's): one bisect
        when they are consecutive in the array, as a job's LOs are."""
        r = self.rank(oids[0])
        n = len(oids)
        if r + n <= self.count and self.oids[r + n - 1] == oids[-1]:
            return list(range(r, r + n))
        return [self.rank(o) for o in oids]

    def in_range(self, first: int, last: int) -> int:
        """The OIDs in ``first..last``."""
        return bisect.bisect_right(self.oids, last) - bisect.bisect_left(self.oids, first)

    @property
    def highest(self) -> int:
        return self.oids[-1] if self.count else 0


OIDS = "I"
"""The array typecode OIDs are kept in: 4-byte unsigned integers (an OID's size; "L" is 8
bytes on 64-bit Linux)."""

TAKEN_WINDOW = 50_000
"""OIDs asked about at once (``taken_in``)."""


def taken_in(conn: psycopg.Connection, oids: array[int]) -> array[int]:
    """Which of ``oids`` (ascending) an LO of the target has, ascending: a window whose
    OID range holds no LO of the target costs one cheap statement."""
    out: array[int] = array(OIDS)
    for i in range(0, len(oids), TAKEN_WINDOW):
        window = oids[i : i + TAKEN_WINDOW]
        if catalog.overlapping(conn, [window[0]], [window[-1]]):
            out.extend(sorted(catalog.existing(conn, window)))
    return out


def taken_of(conn: psycopg.Connection, index: Index) -> array[int]:
    """The archive's OIDs that an LO of the target has, ascending: only the index blocks
    whose OID range holds an LO of the target are read (catalog.overlapping)."""
    out: array[int] = array(OIDS)
    firsts = [b.first for b in index.blocks]
    lasts = [b.last for b in index.blocks]
    for first in catalog.overlapping(conn, firsts, lasts):
        last = lasts[firsts.index(first)]
        oids = [r.oid for r in index.range(first, last)]
        out.extend(sorted(catalog.existing(conn, oids)))
    return out


@dataclass(frozen=True)
class Assignment:
    """The new OIDs of a run: ``first``.. (``count`` of them, consecutive); ``taken``,
    in ``taken`` mode, the remapped old OIDs (ascending; None in ``all`` mode)."""

    mode: Mode
    first: int
    count: int
    taken: array[int] | None = None

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def to_plan(self) -> dict[str, Any]:
        plan: dict[str, Any] = {"first": self.first, "count": self.count}
        if self.taken is not None:
            plan["taken"] = to_ranges(self.taken)
        return plan

    @classmethod
    def from_plan(cls, mode: str, plan: dict[str, Any]) -> Assignment:
        taken = None
        if plan.get("taken") is not None:
            taken = array(OIDS)
            for lo, hi in plan["taken"]:
                taken.extend(range(int(lo), int(hi) + 1))
        return cls(Mode(mode), int(plan["first"]), int(plan["count"]), taken)

    def news(self, oids: Sequence[int], ranks: Ranking) -> list[int]:
        """The OIDs ``oids`` (ascending, of the archive or the copy's source) are written
        at."""
        if self.taken is None:
            return [self.first + r for r in ranks.ranks(oids)]
        t = self.taken
        lo = bisect.bisect_left(t, oids[0])
        hi = bisect.bisect_right(t, oids[-1])
        if lo == hi:  # none taken: every one keeps its OID
            return list(oids)
        out = []
        for o in oids:
            i = bisect.bisect_left(t, o, lo, hi)
            out.append(self.first + i if i < hi and t[i] == o else o)
        return out


def choose(
    conn: psycopg.Connection,
    mode: Mode,
    ranks: Ranking,
    taken: array[int] | None,
    oid_range: tuple[int, int] | None,
) -> Assignment:
    """The run's new OIDs, reserved on ``conn`` (it must stay open while they are filled);
    refused, before anything is written, when ``oid_range`` holds an LO, an OID a kept LO
    of the archive will have, or too few OIDs."""
    count = ranks.count if mode is Mode.ALL else len(taken or ())
    if count == 0:
        return Assignment(mode, 0, 0, taken)
    option = "--oid-range"
    if oid_range is not None:
        lo, hi = oid_range
        if count > hi - lo + 1:
            raise UsageError(
                f"--oid-range {lo}-{hi} holds {hi - lo + 1:,} OIDs; this run gives"
                f" {count:,} LOs new OIDs: choose a larger range"
            )
        n, first = one(
            conn,
            "SELECT count(*), min(oid)::int8 FROM pg_catalog.pg_largeobject_metadata"
            " WHERE oid BETWEEN %s::int8::oid AND %s::int8::oid",
            (lo, hi),
        )
        if n:
            raise DatabaseError(
                f"--oid-range {lo}-{hi} holds {n:,} LOs of the target (the first is {first}):"
                " choose a range that holds none"
            )
        if mode is Mode.TAKEN:
            inside = ranks.in_range(lo, hi)
            mine = bisect.bisect_right(taken or (), hi) - bisect.bisect_left(taken or (), lo)
            if inside > mine:
                raise UsageError(
                    f"--oid-range {lo}-{hi} holds {inside - mine:,} OIDs that LOs to come"
                    " keep (their OIDs are free on the target): choose a range outside the"
                    " OIDs of the LOs to come, or --remap all"
                )
        r = oidspace.reserve(conn, count, lo, option=option)
    else:
        r = oidspace.reserve(conn, count, None, above=ranks.highest, option=option)
    return Assignment(mode, r.first, count, taken)


def claim(conn: psycopg.Connection, a: Assignment) -> None:
    """A resumed run's block announced again (no other run may choose it meanwhile)."""
    if a.count:
        oidspace.claim(conn, oidspace.Reservation(a.first, a.last), "--oid-range")


def skipping(done: list[tuple[int, int]]) -> Callable[[Sequence[int]], list[bool] | None]:
    """Which of some OIDs (ascending) are in ``done`` (ranges, ascending): None when none
    is (the common case, one bisect), else a flag each."""
    firsts = [lo for lo, _ in done]

    def of(oids: Sequence[int]) -> list[bool] | None:
        i = bisect.bisect_right(firsts, oids[0]) - 1
        j = bisect.bisect_right(firsts, oids[-1])
        near = done[max(i, 0) : j]
        if not any(lo <= oids[-1] and oids[0] <= hi for lo, hi in near):
            return None
        return [any(lo <= o <= hi for lo, hi in near) for o in oids]

    return of
