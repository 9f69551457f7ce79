"""One snapshot read by several connections: a transaction begun, its snapshot exported
and imported (``SET TRANSACTION SNAPSHOT``), a worker's second connection sharing it, and
a selection cut into OID ranges of similar counts as that snapshot sees them (dump's
workers; copy's and sync's ``--part K/N`` shares and ``--jobs``).

Every connection reads in a REPEATABLE READ, READ ONLY transaction: a leader exports its
snapshot, the others import it, so all of them see exactly the same LOs whatever other
sessions commit meanwhile.
"""

from __future__ import annotations

import contextlib

import psycopg
from psycopg import sql
from psycopg.pq import TransactionStatus

from pgblobdump.pg.connect import connect
from pgblobdump.pg.lostream import Selection
from pgblobdump.pgconstants import OID_MAX


def begin(conn: psycopg.Connection, snapshot: str | None = None) -> None:
    """A REPEATABLE READ, READ ONLY transaction (with ``snapshot``: that exported one)."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    if snapshot is not None:
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))


def export(conn: psycopg.Connection) -> str:
    """The snapshot of ``conn``'s transaction (begun by ``begin``), for others to import."""
    row = conn.execute("SELECT pg_catalog.pg_export_snapshot()").fetchone()
    assert row is not None
    return str(row[0])


class SideConnection:
    """A second connection of a worker, opened when first needed, in a transaction with
    the worker's snapshot: the lo_get path reads the rest of an LO over BIG bytes there
    while the worker's own connection is in the middle of a window's COPY."""

    def __init__(self, conninfo: str, snapshot: str, doing: str,
                 opened: list[psycopg.Connection]) -> None:  # fmt: skip
        """``opened``: where the connection is entered once open (a failure cancels
        every connection there)."""
        self.conninfo, self.snapshot, self.doing = conninfo, snapshot, doing
        self.opened = opened
        self.conn: psycopg.Connection | None = None
        self._stack = contextlib.ExitStack()

    def __call__(self) -> psycopg.Connection:
        if self.conn is None:
            conn = self._stack.enter_context(
                connect(self.conninfo, autocommit=True, doing=self.doing)
            )
            self.opened.append(conn)
            begin(conn, self.snapshot)
            self.conn = conn
        return self.conn

    def __enter__(self) -> SideConnection:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            conn = self.conn
            open_ = conn is not None and conn.info.transaction_status == TransactionStatus.INTRANS
            if exc is None and open_:
                assert conn is not None
                conn.execute("COMMIT")
        finally:
            self.conn = None
            self._stack.close()


def _tiles(conn: psycopg.Connection, sel: Selection, n: int) -> list[tuple[int, int, int]]:
    """The selected LOs in OID order cut into ``n`` tiles of similar counts (``ntile``):
    (tile, its first OID, its last OID) for each tile holding an LO, in order. Tiles past
    the LO count hold none and are not listed."""
    rows = conn.execute(
        sql.SQL(
            "SELECT t, min(oid)::int8, max(oid)::int8 FROM (SELECT m.oid, ntile({}) OVER"
            " (ORDER BY m.oid) AS t FROM pg_catalog.pg_largeobject_metadata m WHERE {}) s"
            " GROUP BY t ORDER BY t"
        ).format(sql.Literal(n), sel.where(sql.SQL("m.oid")))
    ).fetchall()
    return [(int(t), int(a), int(b)) for t, a, b in rows]


def ranges(conn: psycopg.Connection, sel: Selection, jobs: int) -> list[Selection]:
    """The selection cut into at most ``jobs`` contiguous OID ranges of similar counts,
    each from its first LO to its last (dump's workers: one range each)."""
    if jobs == 1:
        return [sel]
    tiles = _tiles(conn, sel, jobs)
    if not tiles:
        return [sel]
    return [sel.part(a, b) for _, a, b in tiles]


def job_tiles(part: tuple[int, int] | None, jobs: int) -> tuple[range, int]:
    """Which tiles are this run's when share K of N (``part``; None: the whole) is cut
    again into ``jobs``: the whole is cut into N x ``jobs`` tiles and job j of share K
    takes tile (K-1) x ``jobs`` + j, so the N shares' jobs make the very cuts one run of
    N x ``jobs`` would, and tile the whole with no gap and no overlap. Returns (this
    run's tile numbers, 1-based, in order; the number of tiles)."""
    k, n = part or (1, 1)
    return range((k - 1) * jobs + 1, k * jobs + 1), n * jobs


def shares(
    conn: psycopg.Connection, sel: Selection, part: tuple[int, int] | None, jobs: int
) -> list[Selection]:
    """The selection's OID ranges for this run: share K of N (``part``) of the LOs as
    this snapshot counts them, cut again into ``jobs`` ranges of similar counts
    (``job_tiles``). The ranges of all N shares tile the selection's OID range with no
    gap and no overlap."""
    mine, tiles = job_tiles(part, jobs)
    if tiles == 1:
        return [sel]
    last = {t: hi for t, _, hi in _tiles(conn, sel, tiles)}
    bounds = [sel.first - 1]  # bounds[i]: the last OID of tile i (tiles with no LO: empty)
    for t in range(1, tiles):
        bounds.append(max(bounds[-1], last.get(t, bounds[-1])))
    bounds.append(sel.last)
    out = [sel.part(bounds[t - 1] + 1, bounds[t]) for t in mine]
    live = [s for s in out if s.first <= s.last]
    if live:
        return live
    # No LO in this share: an empty range past the selection's, kept inside the OID space
    # (the share after LO 4294967295 would start at 2^32, which no statement accepts).
    first = min(sel.last + 1, OID_MAX)
    return [sel.part(first, first - 1)]
