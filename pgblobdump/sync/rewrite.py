"""sync's rewrites: the target's copy of an LO that changed on the source is removed in
the very transaction that writes the new one (restore's writer asks, batch by batch:
packed/restore/restorer.py's ``Replacing``), so a sync cut short at any point leaves each LO's
old copy or its new one, never none."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import psycopg

from pgblobdump.pg.ledger import to_ranges
from pgblobdump.sync import state


def _has(oids: Sequence[int], oid: int) -> bool:
    i = bisect.bisect_left(oids, oid)
    return i < len(oids) and oids[i] == oid


class Rewrites:
    """The LOs a sync copies again over the target's copy: ``rewrite`` (ours, unchanged
    on the target: replaced only if still so) and ``forced`` (changed on the target,
    --force: replaced if the metadata row is still the one a copy made), each
    ascending. ``pages``: whether the target's role may read pg_largeobject."""

    def __init__(self, rewrite: list[int], forced: list[int], pages: bool) -> None:
        self.rewrite = rewrite
        self.forced = forced
        self.pages = pages

    def __bool__(self) -> bool:
        return bool(self.rewrite or self.forced)

    def __contains__(self, oid: int) -> bool:
        return _has(self.rewrite, oid) or _has(self.forced, oid)

    def remove(self, conn: psycopg.Connection, oids: list[int], xid: str) -> set[int]:
        """The old copies of ``oids`` removed in transaction ``xid`` (those still ours),
        and the new ones entered in the state as made by it (the ledger is not told of
        them: a failed sync's clean-up must not remove what replaced a copy)."""
        forced = [o for o in oids if _has(self.forced, o)]
        again = [o for o in oids if not _has(self.forced, o)]
        removed = state.replace(conn, again, forced, self.pages)
        state.record(conn, to_ranges(removed), xid)
        return set(removed)
