"""An archive's LOs on their way to restore's writer, at the OIDs the run's Assignment
gives them, and the mapping recorded batch by batch in the writer's own transactions
(packed/restore/hooks.py's ``RemapHooks``): a map row commits with its LO, and goes with
it when a failed run's clean-up removes it."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator

import psycopg

from pgblobdump.packed.read.items import Damaged, Item, LoPiece, WholeLos
from pgblobdump.remap import store
from pgblobdump.remap.plan import Assignment, Ranking, skipping


class Remapper:
    """One run's translation (``items``, one call per share, each with its own Ranks:
    an index is read by one thread) and its hooks. ``done``: old OIDs restored already
    (a resumed run), left out."""

    def __init__(self, run: str, assignment: Assignment, done: list[tuple[int, int]]) -> None:
        self.run = run
        self.assignment = assignment
        self.done_of = skipping(done)
        self.left_out = 0
        self._old: dict[int, int] = {}  # new -> old of the LOs on their way, not recorded yet
        self._lock = threading.Lock()

    def items(self, items: Iterator[Item], ranks: Ranking) -> Iterator[Item]:
        """``items`` at their new OIDs, those done already left out."""
        a = self.assignment
        for item in items:
            if isinstance(item, WholeLos):
                oids, metas, datas, sums = item.oids, item.metas, item.datas, item.checksums
                done = self.done_of(oids)
                if done is not None:
                    keep = [i for i, d in enumerate(done) if not d]
                    self.left_out += len(oids) - len(keep)
                    if not keep:
                        continue
                    oids = [oids[i] for i in keep]
                    metas = [metas[i] for i in keep]
                    datas = [datas[i] for i in keep]
                    sums = [sums[i] for i in keep]
                news = a.news(oids, ranks)
                with self._lock:
                    self._old.update(zip(news, oids, strict=True))
                yield WholeLos(news, metas, datas, sums)
            elif isinstance(item, LoPiece):
                if self.done_of([item.oid]) is not None:
                    self.left_out += item.last
                    continue
                new = a.news([item.oid], ranks)[0]
                with self._lock:
                    self._old[new] = item.oid
                yield dataclasses.replace(item, oid=new)
            elif isinstance(item, Damaged):
                yield item  # named by the archive's OIDs

    # -- RemapHooks ---------------------------------------------------------------------
    def record(self, conn: psycopg.Connection, oids: list[int]) -> None:
        with self._lock:
            olds = [self._old.pop(n) for n in oids]
        store.record(conn, self.run, olds, oids)

    def forget(self, conn: psycopg.Connection, ranges: list[tuple[int, int]]) -> None:
        store.forget(conn, self.run, ranges)
