"""Which LOs changed since a snapshot, exactly, from the tuples' transaction ids: what
``sync`` (and incremental dumps) read instead of every byte.

A ``Mark`` is a snapshot of the source (``pg_current_snapshot()``: xmin, xmax and the
transactions in progress, as 64-bit xid8) with the cluster and database it belongs to. A
tuple counts as written after the mark unless its xid is certainly one the mark could
see: below the mark's xmin (or frozen). The mark's in-progress list cannot be used to be
exact: it holds top-level xids only, and a write made in a savepoint carries the
subtransaction's xid, which may lie between xmin and xmax without being listed. So any
xid at or past xmin counts (a tuple committed before the mark but after its xmin is
copied again: more work when a transaction was open at the mark, never a miss).

What the LO API does, and the trace it leaves:
- ``lo_create``/``lo_from_bytea``/``lo_import``, owner, GRANT/REVOKE: a new
  ``pg_largeobject_metadata`` tuple (unlink and create again under the same OID too);
- ``lo_write``/``lo_put`` (in place or appending): new ``pg_largeobject`` page tuples;
- ``lo_truncate``: always rewrites the page at the new end (a zero-length page at a page
  boundary, see inv_truncate), so a truncation leaves a new tuple as well;
- ``COMMENT``: a new ``pg_description`` tuple; removing one leaves none, so comments are
  also compared by value (``Scan.comment``);
- ``lo_unlink``: the OID is gone, which a comparison of OID lists finds.

A tuple's ``xmin`` is a 32-bit xid. Read in a transaction whose next xid is N, a
visible tuple's xid lies in (N - 2^31, N] unless it was frozen long ago; so the 32-bit
value is widened into that window (the server's ``age()`` does it). A tuple counted as
after the mark has a full xid in [mark.xmin, N], widened right whenever N - mark.xmin <
2^31: past that, the mark is unusable
(``unusable``) and the caller compares digests. An old frozen tuple widened wrongly can
only look newer (an LO copied again), never older.
"""

from __future__ import annotations

import array
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import UsageError
from pgblobdump.pg import catalog
from pgblobdump.pg.lostream import Selection
from pgblobdump.pg.query import one, scalar
from pgblobdump.pg.wal import summary as walsummary
from pgblobdump.pgconstants import OID_MAX

log = logging.getLogger(__name__)

HORIZON = 2**31
"""Transactions after which a 32-bit xmin can no longer be placed exactly."""
MARGIN = 2**24
"""Transactions kept clear of HORIZON: ``age()`` counts from a next xid a little past
the snapshot's xmax."""


@dataclass(frozen=True)
class Mark:
    """A snapshot of one database: ``cluster`` (system identifier, or when the postmaster
    started when the role may not read it) and ``database`` (its OID) say whose;
    ``xmin``, ``xmax`` and ``xip`` are the snapshot's (xid8 values); ``timeline`` and
    ``lsn`` where the cluster's history was (None where the role or a standby could not
    tell): a failover, a point-in-time recovery or a restored copy reuses transaction
    ids for other writes, so a mark of another history cannot be compared with.
    ``wal_from``: a WAL position before every write of a transaction the snapshot cannot
    see (``walsummary.start_of``; None where it cannot be known): where the WAL summaries
    that find what changed since this mark must start."""

    cluster: str
    database: int
    xmin: int
    xmax: int
    xip: tuple[int, ...]
    timeline: int | None = None
    lsn: int | None = None
    wal_from: int | None = None

    def to_json(self) -> str:
        tail = [] if self.wal_from is None else [self.wal_from]  # as before when unknown
        return json.dumps([self.cluster, self.database, self.xmin, self.xmax, list(self.xip),
                           self.timeline, self.lsn, *tail])  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> Mark:
        """A mark as ``to_json`` wrote it (or without timeline, LSN or WAL start, as before)."""
        c, d, lo, hi, xip, *rest = json.loads(text)
        timeline, lsn, wal_from = [
            None if x is None else int(x) for x in [*rest, None, None, None][:3]
        ]
        return cls(str(c), int(d), int(lo), int(hi), tuple(int(x) for x in xip),
                   timeline, lsn, wal_from)  # fmt: skip

    def union(self, other: Mark) -> Mark:
        """A mark before which nothing is counted that either one counts as after: what
        changed since any of them (copy --part, a resumed copy: several snapshots)."""
        same = self.timeline == other.timeline
        lsns = [x for x in (self.lsn, other.lsn) if x is not None]
        starts = [x for x in (self.wal_from, other.wal_from) if x is not None]
        return Mark(self.cluster, self.database, min(self.xmin, other.xmin),
                    min(self.xmax, other.xmax),
                    tuple(sorted(set(self.xip) | set(other.xip))),
                    self.timeline if same else None,
                    min(lsns) if same and lsns else None,
                    min(starts) if same and len(starts) == 2 else None)  # fmt: skip


def cluster_of(conn: psycopg.Connection) -> tuple[str, int]:
    """(cluster, database OID) of ``conn``: the cluster by system identifier where the
    role may read it, else by when its postmaster started."""
    row = one(
        conn,
        "SELECT pg_postmaster_start_time()::text, d.oid::int8,"
        " has_function_privilege('pg_control_system()', 'EXECUTE')"
        " FROM pg_database d WHERE d.datname = current_database()",
    )
    cluster = f"started {row[0]}"
    if row[2]:
        r = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
        if r is not None:
            cluster = f"system {r[0]}"
    return cluster, int(row[1])


_HISTORY = """
SELECT CASE WHEN r THEN (SELECT timeline_id FROM pg_catalog.pg_control_checkpoint()
                         WHERE pg_catalog.has_function_privilege(
                                 'pg_catalog.pg_control_checkpoint()', 'EXECUTE'))
            ELSE ('x' || substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()),
                                1, 8))::bit(32)::int END,
       (CASE WHEN r THEN pg_catalog.pg_last_wal_replay_lsn()
             ELSE pg_catalog.pg_current_wal_lsn() END - '0/0'::pg_lsn)::int8
FROM pg_catalog.pg_is_in_recovery() r
"""
"""The cluster's timeline (a primary's from the WAL file it writes; a standby's from
its last restartpoint, where the role may read it) and WAL position."""


def mark(conn: psycopg.Connection) -> Mark:
    """The mark of the snapshot ``conn``'s transaction reads under (REPEATABLE READ)."""
    row = one(
        conn,
        "SELECT pg_snapshot_xmin(s)::text::int8, pg_snapshot_xmax(s)::text::int8,"
        " array(SELECT x::text::int8 FROM pg_snapshot_xip(s) x)"
        " FROM pg_current_snapshot() s",
    )
    history = conn.execute(_HISTORY).fetchone()
    timeline, lsn = history if history is not None else (None, None)
    cluster, database = cluster_of(conn)
    return Mark(cluster, database, int(row[0]), int(row[1]), tuple(int(x) for x in row[2]),
                None if timeline is None else int(timeline),
                None if lsn is None else int(lsn),
                walsummary.start_of(conn, int(row[0])))  # fmt: skip


def unusable(conn: psycopg.Connection, since: Mark | None, now: Mark,
             last: str = "the last sync") -> str | None:  # fmt: skip
    """Why changes since ``since`` cannot be found exactly on ``conn`` (read under
    ``now``), or None when they can. ``last`` names what ``since`` marks, for messages."""
    if since is None:
        return "no earlier copy or sync of this selection is recorded in the target"
    if (since.cluster, since.database) != (now.cluster, now.database):
        if since.database == now.database and not (
            since.cluster.startswith("system ") and now.cluster.startswith("system ")
        ):
            # a cluster named by its start time: a restart, or another cluster
            return (
                f"{last} read a cluster {since.cluster}, this one {now.cluster} (a restart"
                " or another cluster: the role may not run pg_control_system() to tell)"
            )
        return f"{last} read another source ({since.cluster}, database {since.database})"
    if now.xmax - since.xmin >= HORIZON - MARGIN:
        return f"{last} is older than the transaction-id horizon (2^31 transactions)"
    if since.xmax > now.xmax:
        return "the source's transaction ids went back (a restored or different cluster)"
    if None not in (since.timeline, now.timeline) and since.timeline != now.timeline:
        return (f"the source's timeline changed since {last} ({since.timeline} ->"
                f" {now.timeline}: a failover or a point-in-time recovery)")  # fmt: skip
    if since.timeline == now.timeline and None not in (since.lsn, now.lsn):
        assert since.lsn is not None and now.lsn is not None
        if since.lsn > now.lsn:
            return "the source's WAL position went back (a restored copy of the cluster)"
    if not catalog.pages_readable(conn):
        return "this role may not read pg_largeobject (the pages' transaction ids)"
    row = conn.execute(
        "SELECT pg_catalog.age(xmin) <= %s FROM pg_catalog.pg_database"
        " WHERE oid = %s::int8::oid", (distance_to(conn, since), now.database)
    ).fetchone()  # fmt: skip
    if row is not None and row[0]:
        return ("the database was created again or altered since (its pg_database row is"
                f" newer than {last}'s snapshot)")  # fmt: skip
    return None


def after(xmin: str, distance: int) -> sql.Composable:
    """SQL: whether a tuple whose ``xmin`` column is given may have been written after the
    mark: its xid is not certainly below the mark's xmin (see the module's docstring).
    ``distance`` is ``age()`` of the mark's xmin in this transaction (``distance_to``):
    ``age(x)`` counts back from this transaction's next xid, so a tuple at or past the
    mark's xmin is one no older than that (``age`` widens the 32-bit xid in the window
    described above, in C; a frozen or bootstrap xid is INT_MAX old, so never after)."""
    return sql.SQL("(age({x}) <= {d})").format(x=sql.SQL(xmin), d=sql.Literal(distance))


def distance_to(conn: psycopg.Connection, since: Mark) -> int:
    """``age()`` of ``since``'s xmin, in this transaction (see ``after``)."""
    return scalar(conn, "SELECT age(%s::text::xid)", (str(since.xmin % 2**32),))


@dataclass(frozen=True, slots=True)
class Scan:
    """One LO of the source: ``changed`` since the mark (bytes, owner, ACL or a comment
    written), ``comment`` its comment's md5 (None: no comment), ``digest`` the md5 of its
    bytes with owner and ACL (digest scans only; None for an LO over 1 GB).
    ``bytes_kept``: changed, but its bytes are the mark's (see ``scan``)."""

    oid: int
    changed: bool
    comment: str | None
    digest: str | None = None
    bytes_kept: bool = False


_PAGES = """SELECT DISTINCT p.loid FROM pg_catalog.pg_largeobject p
    WHERE {page_range} {page_after}"""
"""The LOs with a page tuple written after the mark: the full pass over pg_largeobject."""

_SCAN = """
COPY (
  WITH pages AS ({pages})
  SELECT * FROM (
  SELECT m.oid::int8,
         {meta_after} OR coalesce({comment_after}, false) OR m.oid IN (SELECT loid FROM pages),
         md5(d.description),
         CASE WHEN ({meta_after} OR coalesce({comment_after}, false))
                   AND m.oid NOT IN (SELECT loid FROM pages)
              THEN EXISTS (SELECT 1 FROM pg_catalog.pg_largeobject q WHERE q.loid = m.oid)
              ELSE false END
  FROM pg_catalog.pg_largeobject_metadata m
  {comment_join}
  WHERE {cond}
) s (oid, changed, comment, bytes_kept) {sparse}
  ORDER BY oid
) TO STDOUT (FORMAT binary)
"""


def scan(
    conn: psycopg.Connection,
    sel: Selection,
    since: Mark,
    sparse: bool = False,
    found: Detection | None = None,
) -> Iterator[Scan]:
    """Every selected LO in OID order and whether it changed since ``since``: two passes
    over tuple headers (pages filtered by their xmin, metadata with comments), one COPY.
    ``sparse``: only the LOs that changed or have a comment (the others are unchanged
    and have none). Only when ``unusable`` said None.
    ``bytes_kept``: an LO whose metadata row or comment is newer than the mark, while
    every page it has now is older (and it has one): its bytes are the mark's, as no
    page was written since (a write, a truncation, an LO created again all write pages;
    an unlink removes them all), only its owner, ACL or comment changed.
    ``found``: how the LOs with pages written since are found (``detect``; None: the
    full pass over pg_largeobject)."""
    d = distance_to(conn, since)
    if found is not None and found.pages is not None:
        listed = "{" + ",".join(map(str, found.pages)) + "}"
        pages: sql.Composable = sql.SQL("SELECT unnest({}::int8[])::oid AS loid").format(
            sql.Literal(listed)
        )
    else:
        pages = sql.SQL(_PAGES).format(
            page_range=page_range("p.loid", sel.first, sel.last), page_after=after("p.xmin", d)
        )
    query = sql.SQL(_SCAN).format(
        pages=pages, meta_after=after("m.xmin", d),
        comment_after=after("d.xmin", d),
        comment_join=sql.SQL(catalog.COMMENT_JOIN), cond=sel.where(sql.SQL("m.oid")),
        sparse=sql.SQL("WHERE changed OR comment IS NOT NULL" if sparse else ""),
    )  # fmt: skip
    with conn.cursor().copy(query) as cp:
        cp.set_types(["int8", "bool", "text", "bool"])
        for oid, changed, comment, kept in cp.rows():
            yield Scan(int(oid), bool(changed), comment, None, bool(kept))


DETECT = ("auto", "wal-summaries", "full-pass")
"""``--detect``: how the LOs whose pages were written since a mark are found."""


@dataclass(frozen=True)
class Detection:
    """How the LOs with a page written since a mark are found: ``pages``, their OIDs
    (ascending) from the blocks the WAL summaries named, or None for the full pass over
    pg_largeobject; ``why`` the summaries were not used; ``blocks`` the blocks named."""

    pages: array.array[int] | None = None
    why: str | None = None
    blocks: int = 0
    quiet: bool = False
    """The server keeps no summaries at all: the full pass as always, said in -v only."""

    @property
    def how(self) -> str:
        """As a manifest's ``detection`` and a sync's record say it."""
        return "transaction ids" if self.pages is None else "wal summaries"

    def note(self) -> str:
        """One line saying which path ran, and why not the summaries."""
        if self.pages is not None:
            return (f"changes found from the WAL summaries ({self.blocks:,} blocks of"
                    " pg_largeobject named): only those pages read")  # fmt: skip
        return f"changes found by a full pass over pg_largeobject ({self.why})"


def detect(conn: psycopg.Connection, sel: Selection, since: Mark, now: Mark,
           mode: str = "auto", wait: float = walsummary.WAIT) -> Detection:  # fmt: skip
    """How to find the LOs whose pages were written since ``since`` (``mode``: one of
    DETECT) under ``conn``'s snapshot (marked ``now``), when ``unusable`` said None:
    from the WAL summaries where they can tell (``walsummary``), else the full pass.
    ``wal-summaries`` that cannot be used raises UsageError naming why."""
    if mode == "full-pass":
        return Detection(why="--detect full-pass")
    blocks = walsummary.changed_blocks(conn, since, now, wait)
    if blocks.why is not None:
        if mode == "wal-summaries":
            raise UsageError(f"--detect wal-summaries: {blocks.why}")
        return Detection(why=blocks.why, quiet=blocks.off)
    where = page_range("p.loid", sel.first, sel.last)
    pages = walsummary.changed_los(conn, blocks, after("p.xmin", distance_to(conn, since)), where)
    log.info("%d LOs with pages written since the mark in %d blocks named by the WAL"
             " summaries", len(pages), blocks.named)  # fmt: skip
    return Detection(pages, None, blocks.named)


def page_range(loid: str, first: int, last: int) -> sql.Composable:
    """SQL: ``loid BETWEEN first AND last AND``, or nothing for every OID: over the whole
    range the planner would walk the index into a lossy bitmap instead of scanning."""
    if first <= 0 and last >= OID_MAX:
        return sql.SQL("")
    return sql.SQL("{} BETWEEN {}::int8::oid AND {}::int8::oid AND").format(
        sql.SQL(loid), sql.Literal(first), sql.Literal(last)
    )


BUCKET_BITS = 12
"""LOs are summed up per bucket of 4,096 OIDs (``buckets``)."""

BUCKETS = """
SELECT m.oid::int8 >> {bits}, count(*), md5(string_agg(m.oid::text, ',' ORDER BY m.oid))
FROM pg_catalog.pg_largeobject_metadata m WHERE {cond} GROUP BY 1
"""


def buckets(conn: psycopg.Connection, cond: sql.Composable) -> dict[int, tuple[int, str]]:
    """The LOs ``cond`` (on ``m.oid``) selects, per bucket of OIDs: how many, and the md5
    of their OID list. Two servers with equal buckets hold the same OIDs there (one pass
    over the metadata, a row per bucket)."""
    rows = conn.execute(
        sql.SQL(BUCKETS).format(bits=sql.Literal(BUCKET_BITS), cond=cond)
    ).fetchall()
    return {int(b): (int(n), str(h)) for b, n, h in rows}


DIGEST = "md5(concat_ws('|', md5(lo_get(m.oid)), pg_get_userbyid(m.lomowner), m.lomacl::text))"
"""SQL: an LO's digest, computed on its server (bytes, owner, ACL); lo_get's limit is
1 GB ("too large"): such an LO is read in windows of one (``digests``)."""

DIGEST_WINDOW = 5_000


def digests(conn: psycopg.Connection, sel: Selection) -> Iterator[Scan]:
    """Every selected LO in OID order with its digest (``DIGEST``) and comment md5: no
    bytes cross the network. ``changed`` is left False (the caller compares)."""
    start = sel.first
    while start <= sel.last:
        window = sel.part(start, sel.last)
        rows = _digest_rows(conn, window, DIGEST_WINDOW)
        if rows is None:  # an LO over 1 GB in this window: one LO at a time
            rows = _digest_rows(conn, window, 1)
            if rows is None:
                row = one(
                    conn,
                    sql.SQL(
                        "SELECT m.oid::int8, md5(d.description) FROM"
                        " pg_catalog.pg_largeobject_metadata m {} WHERE {} ORDER BY m.oid LIMIT 1"
                    ).format(sql.SQL(catalog.COMMENT_JOIN), window.where(sql.SQL("m.oid"))),
                )
                rows = [Scan(int(row[0]), False, row[1], None)]
        if not rows:
            return
        yield from rows
        start = rows[-1].oid + 1


def _digest_rows(conn: psycopg.Connection, sel: Selection, limit: int) -> list[Scan] | None:
    query = sql.SQL(
        "SELECT m.oid::int8, md5(d.description), {digest} FROM"
        " pg_catalog.pg_largeobject_metadata m {join} WHERE {cond} ORDER BY m.oid LIMIT {n}"
    ).format(digest=sql.SQL(DIGEST), join=sql.SQL(catalog.COMMENT_JOIN),
             cond=sel.where(sql.SQL("m.oid")), n=sql.Literal(limit))  # fmt: skip
    try:
        with conn.transaction():  # a savepoint: "too large" must not end the snapshot
            rows = conn.execute(query).fetchall()
    except psycopg.errors.ProgramLimitExceeded:
        return None
    except psycopg.Error as e:
        if "too large" not in str(e):
            raise
        return None
    return [Scan(int(o), False, c, d) for o, c, d in rows]
