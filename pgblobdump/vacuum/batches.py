"""``vacuum``: unlink the candidates set-based, in lock-budgeted batches, each its own
transaction, while other sessions keep writing.

A row naming a candidate may be inserted at any moment after the orphans were found. So
the candidates go in rounds: a second connection (the guard) locks every table holding
reference columns IN SHARE MODE (writers wait for it; it waits for the writers already
in flight), the round's candidates are checked again against every column under that
lock, and the ones still orphans are unlinked in batches, each one transaction, before
the guard lets go. A round lasts about ROUND_SECONDS, or five times the re-check when
that is longer (large reference tables), so a writer waits at most about that long.
Each batch also checks, in its own statement, that no reference column appeared
meanwhile (a table created or altered during the run) and is undone if one did; the
round then starts again with the new columns.

Each batch re-applies ``--min-age`` and the unlink right to the metadata rows it
removes, so an OID unlinked and created again by someone else meanwhile is young and
kept. What a killed run removed is removed; nothing is half-removed (a batch commits
whole or not at all); a rerun finds the rest.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError
from pgblobdump.pg.catalog import UNLINKABLE
from pgblobdump.pg.connect import connect
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.units import plural
from pgblobdump.vacuum.age import AgeRule
from pgblobdump.vacuum.orphans import candidate_chunk, still_orphans
from pgblobdump.vacuum.refs import (
    References,
    discover,
    lock_unpopulated,
    oid_array,
    stamp,
    stamp_sql,
)

ROUND_SECONDS = 1.0
"""How long the guard holds its locks, about: the longest a writer waits."""
LOCK_TIMEOUT = "60s"
"""How long the guard waits for a table's writers before it gives up, naming it."""
UNLINK_LOCK_TIMEOUT = "5s"
"""How long a batch waits for an LO someone holds before the round starts again."""
MAX_ROUND_OIDS = 50_000
"""At most this many candidates a round (the client holds them: memory stays flat)."""
RECHECK_SHARE = 5
MAX_CHANGES = 20
"""Rounds started again in a row (columns changing, deadlocks) before vacuum gives up."""


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
    lock_unpopulated(guard, refs)


def _unlink(
    conn: psycopg.Connection, batch: Sequence[int], rule: AgeRule, types: Sequence[int],
    mark: str,
) -> int:  # fmt: skip
    """Unlink ``batch`` in one transaction; the count unlinked. An LO someone else
    unlinked meanwhile fails the statement ("does not exist"): the batch runs again, and
    its new snapshot no longer sees it."""
    for attempt in range(3):
        try:
            with conn.transaction():
                row = conn.execute(
                    sql.SQL(
                        "SELECT (SELECT count(pg_catalog.lo_unlink(m.oid))"
                        " FROM pg_catalog.pg_largeobject_metadata m"
                        " WHERE m.oid = ANY(%s::int8[]::pg_catalog.oid[]) AND {old} AND {mine}),"
                        " {stamp}"
                    ).format(old=rule.condition(), mine=UNLINKABLE, stamp=stamp_sql(types)),
                    (oid_array(batch),),
                ).fetchone()
                assert row is not None
                if row[1] != mark:
                    raise _Changed
            return int(row[0])
        except psycopg.errors.UndefinedObject:
            if attempt == 2:
                raise
        except psycopg.errors.LockNotAvailable as e:
            # An LO locked by a writer that may itself wait for the guard's locks (it
            # wrote to the LO, then names it): undo the round, so the guard lets go.
            raise _Changed from e
    raise AssertionError("unreachable")


def _run_batches(
    workers: Sequence[psycopg.Connection], batches: list[list[int]], rule: AgeRule,
    types: Sequence[int], mark: str, on_done: Callable[[list[int], int], None],
) -> None:  # fmt: skip
    """Each worker connection unlinks its share of ``batches`` (batch k goes to worker k
    mod N), each batch one transaction; ``on_done(batch, removed)`` after each commit.
    The first failure stops the others after their current batch and is raised."""
    stop = threading.Event()
    failures: list[BaseException] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        try:
            for batch in batches[k :: len(workers)]:
                if stop.is_set():
                    return
                n = _unlink(workers[k], batch, rule, types, mark)
                with lock:
                    on_done(batch, n)
        except BaseException as e:  # handed to the caller's thread below
            stop.set()
            failures.append(e)

    threads = [threading.Thread(target=work, args=(k,), daemon=True)
               for k in range(1, len(workers))]  # fmt: skip
    for t in threads:
        t.start()
    work(0)  # the caller's thread is worker 0 (Ctrl-C lands here, and stops the rest)
    for t in threads:
        while t.is_alive():
            try:
                t.join()
            except KeyboardInterrupt as e:
                stop.set()  # each finishes its batch: nothing half-removed
                failures.append(e)
    if failures:
        # A real failure first; _Changed (a column appeared) only when it is all there is.
        raise next((e for e in failures if not isinstance(e, _Changed)), failures[0])


def remove(
    conninfo: str,
    conn: psycopg.Connection,
    refs: References,
    named: Sequence[tuple[str, str]],
    rule: AgeRule,
    batch_size: int,
    jobs: int = 1,
    since: str | None = None,
    reporter: Reporter = QUIET,
) -> Removal:
    """Unlink the candidates (``conn``'s temporary table) in rounds, as the module says,
    over ``jobs`` connections. ``since``: the snapshot the orphans were found under: a
    round re-reads only the rows written after it (and new columns whole).
    UnsafeToRemove when a column appearing meanwhile cannot be read."""
    # Columns read whole under ``since``: a view not populated then was not read at all.
    seen = (
        frozenset((c.relid, c.attnum) for c in refs.columns if c.populated)
        if since
        else frozenset()
    )
    done = Removal()
    # This run's own temporary tables (candidates, references) are another session's
    # to the guard: not a place where an application keeps references.
    row = conn.execute("SELECT pg_catalog.pg_my_temp_schema()::int8").fetchone()
    own = [int(row[0])] if row and row[0] else []
    after, chunk = 0, batch_size * 4 * jobs
    gone: set[int] = set()  # unlinked in a round that was then undone: not again
    changes = 0

    def on_done(batch: list[int], n: int) -> None:
        done.removed += n
        done.skipped += len(batch) - n
        done.batches += 1
        gone.update(batch)
        reporter.progress(done.removed, 0)

    with contextlib.ExitStack() as stack:
        guard = stack.enter_context(
            connect(conninfo, autocommit=True, doing="vacuum (the lock holder)")
        )
        workers = [conn] + [
            stack.enter_context(connect(conninfo, autocommit=True, doing=f"vacuum (worker {k})"))
            for k in range(1, jobs)
        ]
        for w in workers:
            w.execute(f"SET lock_timeout = '{UNLINK_LOCK_TIMEOUT}'")
        while oids := candidate_chunk(conn, after, chunk):
            t0 = time.perf_counter()
            round_referenced = 0
            recheck = 0.0
            try:
                with guard.transaction():
                    guard.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                    now = discover(guard, named, own=own)
                    if now.fingerprint != refs.fingerprint:
                        now.refuse_unsafe()
                        refs = now
                    try:
                        _lock(guard, refs)
                    except (psycopg.errors.UndefinedTable, psycopg.errors.DeadlockDetected) as e:
                        # Dropped between the look and the lock, or a writer holding one
                        # table wanted another we held: the round again. (A view REFRESHed
                        # meanwhile shows in the look after the lock.)
                        raise _Changed from e
                    except psycopg.errors.LockNotAvailable as e:
                        raise DatabaseError(
                            f"could not lock the tables that reference LOs within {LOCK_TIMEOUT}"
                            " (a long transaction writes to one);"
                            f" {plural(done.removed, 'LO')} removed so far, a rerun finishes"
                        ) from e
                    mark = stamp(guard, refs.types)
                    if discover(guard, named, own=own).fingerprint != refs.fingerprint:
                        raise _Changed  # a table created between the look and the lock
                    t1 = time.perf_counter()
                    todo = [o for o in oids if o not in gone]
                    # On the guard: it holds the locks, so a DROP or ALTER queued behind them
                    # cannot make this wait on a lock the guard never lets go.
                    try:
                        live = still_orphans(guard, refs, todo, since, seen)
                    except psycopg.errors.ObjectNotInPrerequisiteState as e:
                        # A view emptied (REFRESH ... WITH NO DATA) since the look: the
                        # round again, the next look reads it as empty.
                        raise _Changed from e
                    recheck = time.perf_counter() - t1
                    round_referenced = len(todo) - len(live)
                    done.referenced_meanwhile += round_referenced
                    batches = [live[k : k + batch_size] for k in range(0, len(live), batch_size)]
                    _run_batches(workers, batches, rule, refs.types, mark, on_done)
            except _Changed:
                changes += 1
                if changes > MAX_CHANGES:
                    raise DatabaseError(
                        f"the tables that reference LOs changed {MAX_CHANGES} times in a row"
                        f" while vacuum ran; {plural(done.removed, 'LO')} removed so far, a rerun"
                        " finishes"
                    ) from None
                # The round again, against the new columns; what it unlinked stays gone.
                done.referenced_meanwhile -= round_referenced
                refs = discover(conn, named, own=own)
                refs.refuse_unsafe()
                continue
            done.rounds += 1
            changes = 0
            gone.clear()
            after = oids[-1]
            elapsed = max(time.perf_counter() - t0, 1e-3)
            # Rounds long enough that re-reading the reference columns costs at most a
            # fifth of them, and at least ROUND_SECONDS.
            target = max(ROUND_SECONDS, RECHECK_SHARE * recheck)
            chunk = int(len(oids) * target / elapsed)
            chunk = max(batch_size, min(chunk, MAX_ROUND_OIDS))
    return done
