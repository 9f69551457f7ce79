"""Which pages of ``pg_largeobject`` may hold tuples written since a mark, from
PostgreSQL 17+'s WAL summaries: what ``dump --since`` and ``sync`` read instead of every
tuple header of the table, when the server keeps summaries for the whole stretch.

The WAL summarizer (``summarize_wal = on``) records, for each stretch of WAL between two
of its stops, which blocks of which relation fork the WAL touched. The tuples of
``pg_largeobject`` that today's test (``changes.after``) counts as written after a mark
lie in blocks touched by WAL written after the first write of any transaction the mark
could not see. That is not the mark's own WAL position: a transaction in progress at the
mark may have written pages long before. So a mark records ``wal_from`` (``start_of``):
the redo position of the last checkpoint, taken only when that checkpoint's next xid is
at or below the mark's xmin. Every transaction the mark cannot see then got its xid after
that checkpoint chose its redo position, and wrote nothing before it. The end is the WAL
insert position read under the new snapshot: every write it sees was inserted before.

The blocks named by the summaries covering [wal_from, end] are a superset (a summary
overlapping wal_from holds earlier changes too, VACUUM and freezing touch blocks), and
the tuples found there go through exactly today's transaction-id test, so the result is
the full pass's. A relation truncated or created in the stretch (a row with
``is_limit_block``: VACUUM cutting empty pages off the end, VACUUM FULL giving the table
a new file) has every block at or past its smallest limit block counted as changed: a
range to the relation's end, exact whatever happened there.

Anything that does not add up (no summaries, a gap, another timeline, a role that may
not run the functions, a summarizer that does not reach the snapshot in time) is a
reason (``Blocks.why``) and the caller takes today's full pass.
"""

from __future__ import annotations

import array
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import psycopg
from psycopg import sql

from pgblobdump.pg.query import one

log = logging.getLogger(__name__)

WAIT = 10.0
"""Seconds to wait for the WAL summarizer to pass the snapshot's WAL position."""

BATCH = 200
"""Block ranges read per statement (a UNION ALL of TID range scans)."""

FUNCTIONS = ("pg_available_wal_summaries()", "pg_wal_summary_contents(bigint,pg_lsn,pg_lsn)",
             "pg_get_wal_summarizer_state()")  # fmt: skip
"""What the WAL summaries path runs (superusers may; others need EXECUTE granted)."""


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL writes it (``0/1A2B3C``)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def start_of(conn: psycopg.Connection, xmin: int) -> int | None:
    """``wal_from`` of a mark whose snapshot has ``xmin`` (see the module's docstring):
    the last checkpoint's redo position when its next xid is at or below ``xmin``; None
    when the role may not read the checkpoint, on a standby, or when a transaction the
    snapshot cannot see is older than the last checkpoint."""
    row = one(
        conn,
        "SELECT pg_catalog.has_function_privilege('pg_catalog.pg_control_checkpoint()',"
        " 'EXECUTE') AND NOT pg_catalog.pg_is_in_recovery()",
    )
    if not row[0]:
        return None
    next_xid, redo = one(
        conn,
        "SELECT next_xid, (redo_lsn - '0/0'::pg_lsn)::int8 FROM pg_catalog.pg_control_checkpoint()",
    )
    epoch, _, xid = str(next_xid).partition(":")
    full = (int(epoch) << 32) | int(xid)
    return int(redo) if full <= xmin else None


class Mark(Protocol):
    """What is read here of a ``changes.Mark`` (which imports this module)."""

    @property
    def cluster(self) -> str: ...
    @property
    def timeline(self) -> int | None: ...
    @property
    def wal_from(self) -> int | None: ...


@dataclass(frozen=True)
class Blocks:
    """The blocks of ``pg_largeobject`` that may hold tuples written since a mark:
    ``ranges`` of [first, end) block numbers, ascending and apart, ``end`` None for
    every block to the relation's end; or ``why`` they cannot be known (then the caller
    takes the full pass). ``named``: the blocks the summaries named. ``off``: the
    server keeps no summaries at all (before 17, ``summarize_wal`` off, ``wal_level``
    minimal): the full pass is what it always was there."""

    ranges: list[tuple[int, int | None]] = field(default_factory=list)
    why: str | None = None
    named: int = 0
    off: bool = False


def changed_blocks(conn: psycopg.Connection, since: Mark, now: Mark, wait: float = WAIT,
                   checkpoint: bool = True) -> Blocks:  # fmt: skip
    """The blocks written since ``since``, read under ``conn``'s snapshot (marked
    ``now``), from the WAL summaries; ``Blocks.why`` when they cannot be used.
    ``checkpoint``: when the summarizer has not reached the snapshot (it writes a
    summary at each checkpoint's redo), ask for a checkpoint where the role may, as
    pg_basebackup does at a backup's start; then wait up to ``wait`` seconds."""
    why = _off(conn)
    if why is not None:
        return Blocks(why=why, off=True)
    why = _unusable(conn, since, now)
    if why is not None:
        return Blocks(why=why)
    assert since.wal_from is not None and now.timeline is not None
    end = int(one(conn, "SELECT (pg_catalog.pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8")[0])
    why = _wait(conn, now.timeline, end, wait, checkpoint)
    if why is not None:
        return Blocks(why=why)
    rows = conn.execute(
        "SELECT tli, (start_lsn - '0/0'::pg_lsn)::int8, (end_lsn - '0/0'::pg_lsn)::int8"
        " FROM pg_catalog.pg_available_wal_summaries() WHERE tli = %s"
        " AND end_lsn > %s::pg_lsn AND start_lsn < %s::pg_lsn ORDER BY start_lsn",
        (now.timeline, lsn_text(since.wal_from), lsn_text(end)),
    ).fetchall()
    why = gap(since.wal_from, end, [(int(s), int(e)) for _t, s, e in rows])
    if why is not None:
        return Blocks(why=why)
    blocks, limit = _named(conn, now.timeline, since.wal_from, end)
    ranges = to_block_ranges(blocks, limit)
    log.info("WAL summaries %s to %s: %d blocks of pg_largeobject named%s, in %d ranges",
             lsn_text(since.wal_from), lsn_text(end), len(blocks),
             "" if limit is None else f", every block from {limit} on", len(ranges))  # fmt: skip
    return Blocks(ranges, None, len(blocks))


def _off(conn: psycopg.Connection) -> str | None:
    """Why the server keeps no WAL summaries at all (None: it keeps them)."""
    version = int(one(conn, "SHOW server_version_num")[0])
    if version < 170000:
        return f"PostgreSQL {version // 10000} keeps no WAL summaries (17 and later do)"
    summarize, level = one(conn, "SELECT current_setting('summarize_wal'),"
                                 " current_setting('wal_level')")  # fmt: skip
    if summarize != "on":
        return "summarize_wal is off on the source"
    if level == "minimal":
        return "wal_level is minimal on the source: the summarizer skips such WAL"
    return None


def _unusable(conn: psycopg.Connection, since: Mark, now: Mark) -> str | None:
    """Why the summaries cannot be read for this mark, before any wait (None: they may)."""
    standby, *may = one(
        conn,
        sql.SQL("SELECT pg_catalog.pg_is_in_recovery(), {}").format(
            sql.SQL(", ").join(
                sql.SQL("pg_catalog.has_function_privilege({}, 'EXECUTE')").format(
                    sql.Literal(f"pg_catalog.{f}")
                )
                for f in FUNCTIONS
            )
        ),
    )
    if standby:
        return "the source is a standby"
    if not all(may):
        denied = [f.partition("(")[0] for f, ok in zip(FUNCTIONS, may, strict=True) if not ok]
        return f"this role may not execute {', '.join(denied)}"
    if since.wal_from is None:
        return ("the mark records no WAL position to start from (taken by a role that may not"
                " read pg_control_checkpoint(), by an earlier pgblobdump, or with a transaction"
                " older than the last checkpoint open)")  # fmt: skip
    if since.cluster != now.cluster or not now.cluster.startswith("system "):
        return "the mark's cluster cannot be told to be this one by its system identifier"
    if since.timeline is None or since.timeline != now.timeline:
        return f"the timeline changed since the mark ({since.timeline} -> {now.timeline})"
    return None


def _wait(conn: psycopg.Connection, timeline: int, end: int, wait: float,
          checkpoint: bool) -> str | None:  # fmt: skip
    """Wait until the summarizer has summarized WAL past ``end`` on ``timeline``."""
    deadline = time.monotonic() + wait
    asked = not checkpoint
    while True:
        tli, done = one(
            conn,
            "SELECT summarized_tli, (summarized_lsn - '0/0'::pg_lsn)::int8"
            " FROM pg_catalog.pg_get_wal_summarizer_state()",
        )
        if int(tli) == timeline and int(done) >= end:
            return None
        if int(tli) > timeline:
            return f"the summarizer is on timeline {tli}, the snapshot on {timeline}"
        if not asked:
            asked = True
            if _may_checkpoint(conn):
                log.info("CHECKPOINT: the summarizer writes a summary at its redo position")
                conn.execute("CHECKPOINT")
                continue
        if time.monotonic() >= deadline:
            return (f"the WAL summarizer did not reach the snapshot's WAL position"
                    f" {lsn_text(end)} within {wait:g} s (it is at {lsn_text(int(done))}; it"
                    " writes a summary at each checkpoint)")  # fmt: skip
        time.sleep(0.05)


def _may_checkpoint(conn: psycopg.Connection) -> bool:
    return bool(one(conn, "SELECT current_setting('is_superuser') = 'on'"
                          " OR pg_catalog.pg_has_role('pg_checkpoint', 'USAGE')")[0])  # fmt: skip


def gap(start: int, end: int, summaries: list[tuple[int, int]]) -> str | None:
    """Why ``summaries`` ([start, end) LSN pairs, by start) do not cover [start, end]
    without a hole; None when they do."""
    at = start
    for s, e in summaries:
        if s > at:
            break
        at = max(at, e)
        if at >= end:
            return None
    return (f"the WAL summaries do not cover {lsn_text(start)} to {lsn_text(end)}: none from"
            f" {lsn_text(at)} (summarize_wal was off for a while, or wal_summary_keep_time"
            " removed them)")  # fmt: skip


_NAMED = """
SELECT c.relblocknumber, c.is_limit_block
FROM pg_catalog.pg_available_wal_summaries() s,
     LATERAL pg_catalog.pg_wal_summary_contents(s.tli, s.start_lsn, s.end_lsn) c,
     pg_catalog.pg_class r, pg_catalog.pg_database d
WHERE s.tli = %(tli)s AND s.end_lsn > %(start)s::pg_lsn AND s.start_lsn < %(end)s::pg_lsn
  AND r.oid = 'pg_catalog.pg_largeobject'::regclass AND d.datname = current_database()
  AND c.relfilenode = pg_catalog.pg_relation_filenode(r.oid) AND c.reldatabase = d.oid
  AND c.reltablespace = coalesce(nullif(r.reltablespace, 0), d.dattablespace)
  AND c.relforknumber = 0
"""
"""The main fork's blocks of this database's pg_largeobject (its file now) in the
summaries overlapping [start, end]."""


def _named(conn: psycopg.Connection, tli: int, start: int, end: int) -> tuple[set[int], int | None]:
    """The blocks named, and the smallest limit block (None: no truncation or creation)."""
    blocks: set[int] = set()
    limit: int | None = None
    args = {"tli": tli, "start": lsn_text(start), "end": lsn_text(end)}
    for block, is_limit in conn.execute(_NAMED, args):
        if is_limit:
            limit = int(block) if limit is None else min(limit, int(block))
        else:
            blocks.add(int(block))
    return blocks, limit


def to_block_ranges(blocks: set[int], limit: int | None) -> list[tuple[int, int | None]]:
    """``blocks`` as ascending [first, end) ranges of adjacent blocks; every block from
    ``limit`` on as one last range to the relation's end."""
    out: list[tuple[int, int | None]] = []
    for b in sorted(blocks):
        if limit is not None and b >= limit:
            break
        if out and out[-1][1] == b:
            out[-1] = (out[-1][0], b + 1)
        else:
            out.append((b, b + 1))
    if limit is not None:
        if out and out[-1][1] == limit:
            out[-1] = (out[-1][0], None)
        else:
            out.append((limit, None))
    return out


def _tid_ranges(ranges: list[tuple[int, int | None]]) -> Iterator[sql.Composable]:
    """One TID range condition on ``p.ctid`` per block range."""
    for first, end in ranges:
        cond = sql.SQL("p.ctid >= {}::tid").format(sql.Literal(f"({first},0)"))
        if end is not None:
            cond = sql.SQL("{} AND p.ctid < {}::tid").format(cond, sql.Literal(f"({end},0)"))
        yield cond


def changed_los(
    conn: psycopg.Connection, blocks: Blocks, written: sql.Composable, where: sql.Composable
) -> array.array[int]:
    """The OIDs, ascending and once each, of the LOs with a page tuple in ``blocks`` for
    which ``written`` holds (today's test on ``p.xmin``) and ``where`` (on ``p.loid``,
    or empty): TID range scans, BATCH ranges a statement."""
    found: set[int] = set()
    # The planner may think a never-analyzed pg_largeobject too small for TID range scans.
    before = str(one(conn, "SELECT current_setting('enable_seqscan')")[0])
    conn.execute("SELECT set_config('enable_seqscan', 'off', true)")
    try:
        conds = list(_tid_ranges(blocks.ranges))
        for i in range(0, len(conds), BATCH):
            query = sql.SQL(" UNION ").join(
                sql.SQL(
                    "SELECT p.loid::int8 FROM pg_catalog.pg_largeobject p"
                    " WHERE {where} {tid} AND {written}"
                ).format(where=where, tid=c, written=written)
                for c in conds[i : i + BATCH]
            )
            found.update(int(r[0]) for r in conn.execute(query))
    finally:
        conn.execute("SELECT set_config('enable_seqscan', %s, true)", (before,))
    return array.array("I", sorted(found))
