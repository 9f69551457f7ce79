"""``verify ARCHIVE -d DB --map``: a ``restore --remap`` checked through its mapping.

The archive's LOs are at new OIDs in the target, so verify -d's merge by OID does not
apply. Instead the archive's index and the run's ``pgblobdump_remap.map`` rows, both in
old-OID order, are merged (the map streamed through a named cursor): an archive LO with
no map row was not restored, a map row whose old OID the archive does not hold belongs
to another archive, and every pair found in both is checked at its new OID, a batch at a
time (size, checksum, owner, ACL and comment: what verify -d compares). Memory holds one
batch's metadata, whatever the LO count. All is read in one snapshot (the map rows and
the LOs they name together).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg

from pgblobdump.errors import DatabaseError, NotFound
from pgblobdump.packed.format.index import IndexRecord
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.verify import STEP, comparing, db_los, lo_diff
from pgblobdump.pg.connect import connect
from pgblobdump.pg.lostream import Selection
from pgblobdump.pg.snapshot import SideConnection
from pgblobdump.remap import store
from pgblobdump.report.reporter import QUIET, Reporter

BATCH = 5000
"""Archive LOs whose new OIDs are read from the database in one selection."""


@dataclass(frozen=True)
class MappedDifference:
    """One LO of a remapped restore that differs from the archive: ``oid`` the archive's
    (the map's old OID), ``new_oid`` where the run restored it (None: no map row)."""

    oid: int
    new_oid: int | None
    what: str  # "missing" (not restored, or gone), "extra" (a map row of no archive LO), "differs"
    detail: str


def mapped_run(conninfo: str, archive: str, source: str, run: str | None) -> store.Run:
    """The run ``verify --map`` checks: ``run``, or the latest finished ``restore
    --remap`` of the archive whose manifest checksum is ``source``; refused when there is
    none or it did not finish."""
    with connect(conninfo, autocommit=True, doing="verify") as conn:
        found = store.find(conn, run, source) if store.exists(conn) else None
        if found is None and run is not None:
            raise NotFound(
                f"no restore --remap run {run} in this database ({store.SCHEMA}.runs):"
                " leave out --map-run for the latest finished run of the archive"
            )
        if found is None:
            left = store.unfinished(conn, source) if store.exists(conn) else []
            if left:
                raise DatabaseError(
                    f"the restore --remap of {archive} into this database (run"
                    f" {left[-1].run}) did not finish: restore --remap --resume finishes it"
                )
            raise NotFound(
                f"no restore --remap of {archive} in this database: restore it with"
                " --remap first, or verify without --map (a restore at the same OIDs)"
            )
    if not found.finished:
        raise DatabaseError(
            f"restore --remap run {found.run} ({found.archive}) did not finish:"
            " restore --remap --resume finishes it"
        )
    return found


def compare_mapped(
    archive: PackedDirectory, conninfo: str, run: str, reporter: Reporter = QUIET
) -> Iterator[MappedDifference]:
    """Differences between the archive's LOs and run ``run``'s restore of them, in
    old-OID order (see the module's docstring). Progress: the archive's LOs compared."""
    index = archive.index
    done = nbytes = 0
    with contextlib.ExitStack() as stack:
        task = "comparing with the database through the mapping"
        conn, side = comparing(stack, archive, conninfo, reporter, task)
        pairs = stack.enter_context(contextlib.closing(store.pairs(conn, run)))  # closed first
        batch: list[tuple[int, IndexRecord | None, int | None]] = []
        for row in _merged(iter(index), pairs):
            batch.append(row)
            if len(batch) >= BATCH:
                yield from _check(conn, side, archive, run, batch)
                for _, r, _ in batch:
                    if r is not None:
                        done, nbytes = done + 1, nbytes + r.size
                        if done % STEP == 0:
                            reporter.progress(done, nbytes)
                batch.clear()
        if batch:
            yield from _check(conn, side, archive, run, batch)
            done += sum(1 for _, r, _ in batch if r is not None)
            nbytes += sum(r.size for _, r, _ in batch if r is not None)
        conn.execute("COMMIT")
    reporter.progress(done, nbytes)


def _merged(
    records: Iterator[IndexRecord], pairs: Iterator[tuple[int, int]]
) -> Iterator[tuple[int, IndexRecord | None, int | None]]:
    """(old OID, the archive's record, the new OID) of two streams by old OID: the
    record None for a map row of no archive LO, the new OID None for an LO unmapped."""
    a = next(records, None)
    p = next(pairs, None)
    while a is not None or p is not None:
        if p is None or (a is not None and a.oid < p[0]):
            assert a is not None
            yield a.oid, a, None
            a = next(records, None)
        elif a is None or p[0] < a.oid:
            yield p[0], None, p[1]
            p = next(pairs, None)
        else:
            yield a.oid, a, p[1]
            a, p = next(records, None), next(pairs, None)


def _check(
    conn: psycopg.Connection, side: SideConnection, archive: PackedDirectory, run: str,
    batch: list[tuple[int, IndexRecord | None, int | None]],
) -> Iterator[MappedDifference]:  # fmt: skip
    """The batch's differences in its order: its mapped LOs read at their new OIDs (only
    those, however far apart) and each compared with its archive record. The LOs are
    read before the first difference is handed on: the connection is free again for the
    map's next rows."""
    news = sorted({new for _, r, new in batch if r is not None and new is not None})
    found = {}
    if news:
        sel = Selection(news[0], news[-1], only=tuple(news))
        found = {
            oid: (size, checksum, meta) for oid, size, checksum, meta in db_los(conn, sel, side)
        }
    for old, r, new in batch:
        if r is None:
            yield MappedDifference(old, new, "extra", f"a map row of run {run}; the archive"
                                   f" holds no LO {old}")  # fmt: skip
        elif new is None:
            yield MappedDifference(old, None, "missing", f"no map row in run {run}: not restored")
        elif (got := found.get(new)) is None:
            yield MappedDifference(old, new, "missing", f"restored at {new}, which holds no LO")
        elif (differs := lo_diff(*got, r, archive.index.meta(r.meta))) is not None:
            yield MappedDifference(old, new, "differs", differs)
