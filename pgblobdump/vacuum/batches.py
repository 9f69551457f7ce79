"""``vacuum``: unlink the candidates set-based, in lock-budgeted batches, each its own
transaction, while other sessions keep writing.

A row naming a candidate may be inserted at any moment after the orphans were found. So
the candidates go in rounds: a second connection (the guard) locks every table holding
reference columns IN SHARE MODE (writers wait for it; it waits for the writers already
in flight), the round's candidates are checked again against every column under that
lock, and the ones still orphans are unlinked in batches, each one transaction, before
the guard lets go. A round lasts about ROUND_SECONDS, so a writer waits at most about
that long. Each batch also checks that no reference column appeared meanwhile (a table
created or altered during the run) and is undone if one did; the next round reads it.

Each batch re-applies ``--min-age`` and the unlink right to the metadata rows it
removes, so an OID unlinked and created again by someone else meanwhile is young and
kept. What a killed run removed is removed; nothing is half-removed (a batch commits
whole or not at all); a rerun finds the rest.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError
from pgblobdump.pg.catalog import UNLINKABLE
from pgblobdump.pg.connect import connect
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.vacuum.age import AgeRule
from pgblobdump.vacuum.orphans import candidate_chunk, still_orphans
from pgblobdump.vacuum.refs import References, discover

ROUND_SECONDS = 1.0
"""How long the guard holds its locks, about: the longest a writer waits."""
LOCK_TIMEOUT = "60s"
"""How long the guard waits for a table's writers before it gives up, naming it."""
MAX_ROUND_BATCHES = 64


@dataclass
class Removal:
    """What the batches did."""

    removed: int = 0
    referenced_meanwhile: int = 0
    """Candidates a row named by the time their round re-checked them: kept."""
    skipped: int = 0
    """Candidates gone, young again or no longer ours when their batch ran: kept."""
    batches: int = 0
    rounds: int = 0


class _Changed(Exception):
    """A reference column appeared or went during a batch: the batch is undone."""


def _lock(guard: psycopg.Connection, refs: References) -> None:
    tables = [(s, t) for relid, s, t in refs.tables if relid not in refs.matviews]
    if tables:
        guard.execute(
            sql.SQL("LOCK TABLE {} IN SHARE MODE").format(
                sql.SQL(", ").join(sql.Identifier(s, t) for s, t in tables)
            )
        )


def _unlink(
    conn: psycopg.Connection, batch: Sequence[int], rule: AgeRule, refs: References,
    named: Sequence[tuple[str, str]],
) -> int:  # fmt: skip
    with conn.transaction():
        row = conn.execute(
            sql.SQL(
                "SELECT count(pg_catalog.lo_unlink(m.oid))"
                " FROM pg_catalog.pg_largeobject_metadata m"
                " WHERE m.oid = ANY(%s::int8[]::pg_catalog.oid[]) AND {old} AND {mine}"
            ).format(old=rule.condition(), mine=UNLINKABLE),
            (list(batch),),
        ).fetchone()
        if discover(conn, named).fingerprint != refs.fingerprint:
            raise _Changed
    return int(row[0]) if row else 0


def remove(
    conninfo: str,
    conn: psycopg.Connection,
    refs: References,
    named: Sequence[tuple[str, str]],
    rule: AgeRule,
    batch_size: int,
    reporter: Reporter = QUIET,
    total: int = 0,
) -> Removal:
    """Unlink the candidates (``conn``'s temporary table) in rounds, as the module says.
    UnsafeToRemove when a column appearing meanwhile cannot be read."""
    done = Removal()
    after, chunk = 0, batch_size * 4
    with connect(conninfo, autocommit=True, doing="vacuum (the lock holder)") as guard:
        while oids := candidate_chunk(conn, after, chunk):
            t0 = time.perf_counter()
            round_referenced = 0
            try:
                with guard.transaction():
                    guard.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    now = discover(guard, named)
                    if now.fingerprint != refs.fingerprint:
                        now.refuse_unsafe()
                        refs = now
                    try:
                        _lock(guard, refs)
                    except psycopg.errors.LockNotAvailable as e:
                        raise DatabaseError(
                            f"could not lock the tables that reference LOs within {LOCK_TIMEOUT}"
                            f" (a long transaction writes to one); {done.removed:,} LOs removed"
                            " so far, a rerun finishes"
                        ) from e
                    if discover(guard, named).fingerprint != refs.fingerprint:
                        raise _Changed  # a table created between the look and the lock
                    live = still_orphans(conn, refs, oids)
                    round_referenced = len(oids) - len(live)
                    done.referenced_meanwhile += round_referenced
                    for k in range(0, len(live), batch_size):
                        batch = live[k : k + batch_size]
                        n = _unlink(conn, batch, rule, refs, named)
                        done.removed += n
                        done.skipped += len(batch) - n
                        done.batches += 1
                        after = batch[-1]
                        reporter.progress(done.removed, 0)
            except _Changed:
                # Resume after the last batch that committed; the round's re-check counts
                # again next time.
                done.referenced_meanwhile -= round_referenced
                refs = discover(conn, named)
                refs.refuse_unsafe()
                continue  # the same candidates again, against the new columns
            done.rounds += 1
            after = oids[-1]
            elapsed = max(time.perf_counter() - t0, 1e-3)
            chunk = int(len(oids) * ROUND_SECONDS / elapsed)
            chunk = max(batch_size, min(chunk, batch_size * MAX_ROUND_BATCHES))
    return done
