"""Exactly what one run created in a database, so that its clean-up removes that and
nothing else, whatever other sessions do meanwhile.

Every change is made in a transaction opened through ``Ledger.transaction``, which learns
the transaction's id before doing anything. What it creates is entered in the ledger only
once COMMIT has returned; when a run is cut short between COMMIT reaching the server and
the client hearing back (Ctrl-C, SIGTERM, a dropped connection), ``undo`` asks the server
with ``pg_xact_status`` whether that transaction committed. So the ledger never holds an
object the run did not make: an LO OID taken by another session makes the whole statement
fail and enters nothing.

Clean-up runs on a new connection: the run's own may be in the middle of a statement,
a pipeline or a COPY, or gone with its server. It is cancelled and closed first, and the
server rolls back whatever it had open.

Clean-up cannot hang: its connection has a connect timeout and TCP keepalives (a cut
connection is noticed), its statements a lock timeout (another session may hold a lock
on one of our LOs: ``lo_unlink`` in an open transaction) and a statement timeout. When
one of them ends it, or a signal does (the caller runs it under ``signals.stoppable``),
the error names exactly what is left.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import psycopg
import psycopg.errors
from psycopg import sql

from pgblobdump.errors import PgBlobDumpError
from pgblobdump.pg.connect import connect, reason
from pgblobdump.pg.locks import LockBudget

SETTLE_SECONDS = 30.0
"""How long clean-up waits for an abandoned transaction to end before it gives up on it."""

CONNECT_TIMEOUT = 5
"""Seconds clean-up waits for its connection (libpq's connect_timeout)."""
LOCK_TIMEOUT_MS = 5_000
"""How long a clean-up statement waits for a lock another session holds on what we made
(``lo_unlink`` of one of our LOs in a transaction of its own) before it gives up."""
STATEMENT_TIMEOUT_MS = 120_000
"""Bound on one clean-up statement (a batch of ``lo_unlink``s of up to a lock budget of
LOs, or a DROP TABLE): generous for big LOs, but never forever."""
KEEPALIVES: dict[str, int | str] = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
              "keepalives_count": 3, "tcp_user_timeout": 15_000}  # fmt: skip
"""libpq settings that make a connection cut on the way (no FIN, no RST) fail in seconds
rather than hours; they do nothing on a Unix socket."""


class CleanupFailed(PgBlobDumpError):
    """Clean-up could not finish; the message names what is left. The caller adds this
    to the error of the run (whose class and exit code the user sees)."""


def to_ranges(oids: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted OIDs as inclusive ranges of consecutive ones: [1, 2, 3, 7] -> [(1, 3), (7, 7)]."""
    if len(oids) > 1:  # n distinct OIDs between lo and hi = lo + n - 1: all of them (C speed)
        lo, hi = min(oids), max(oids)
        if hi - lo + 1 == len(oids) and len(set(oids)) == len(oids):
            return [(lo, hi)]
    ranges: list[tuple[int, int]] = []
    for o in oids:
        if ranges and ranges[-1][1] + 1 == o:
            ranges[-1] = (ranges[-1][0], o)
        else:
            ranges.append((o, o))
    return ranges


def ranges_text(oids: Sequence[int]) -> str:
    """Sorted OIDs as every range of consecutive ones: ``1..5, 9, 12..20`` (for a table or
    CSV; JSON lists the OIDs)."""
    return ", ".join(f"{lo}..{hi}" if hi > lo else str(lo) for lo, hi in to_ranges(oids))


def format_ranges(ranges: list[tuple[int, int]]) -> str:
    """``10,000 LOs (OIDs 5000000..5009999)``, a few ranges at most, for messages."""
    total = sum(hi - lo + 1 for lo, hi in ranges)
    return f"{total:,} LO{'s' if total != 1 else ''} ({oid_ranges(ranges)})"


def oid_ranges(ranges: list[tuple[int, int]]) -> str:
    """``OIDs 5000000..5009999, 5020000`` (a few ranges at most, then how many more)."""
    shown = ", ".join(f"{lo}..{hi}" if hi > lo else str(lo) for lo, hi in ranges[:3])
    more = f" and {len(ranges) - 3} more ranges" if len(ranges) > 3 else ""
    return f"OIDs {shown}{more}"


@dataclass
class Pending:
    """A transaction in flight and what it creates if it commits. ``xid`` is None until
    the server told us; before that no COMMIT has been sent, so nothing can be in."""

    los: list[tuple[int, int]] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    xid: str | None = None


@dataclass
class Ledger:
    """What this run created, committed and known: LO OID ranges (inclusive, merged),
    tables (as identifiers) and roles; plus at most one transaction in flight."""

    conninfo: str
    run: str = "run"
    """What made these objects (``restore``, ``generate``), for messages."""
    lo_ranges: list[tuple[int, int]] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    pending: Pending | None = None
    backend_pid: int | None = None
    on_change: Callable[[Ledger], None] | None = field(default=None, repr=False)
    """Told when a transaction is about to create something, before it can commit (the
    restore journal keeps what a kill -9 would leave, counting what may commit)."""
    on_remove: Callable[[psycopg.Connection, list[tuple[int, int]]], None] | None = field(
        default=None, repr=False
    )
    """Told of each OID range clean-up removes, on its connection, in the removing
    transaction (copy and sync: what they made and removed is no longer expected)."""

    @property
    def empty(self) -> bool:
        return not (self.lo_ranges or self.tables or self.roles or self.pending)

    @contextlib.contextmanager
    def transaction(
        self,
        conn: psycopg.Connection,
        los: tuple[int, int] | Sequence[tuple[int, int]] | None = None,
    ) -> Iterator[Pending]:
        """A transaction whose creations enter the ledger when it commits. The body adds
        tables and roles it creates to the yielded Pending; ``los`` is the OID range
        (inclusive) it creates, all or nothing."""
        self.backend_pid = conn.info.backend_pid
        if los is None:
            ranges: list[tuple[int, int]] = []
        elif isinstance(los, tuple) and isinstance(los[0], int):
            ranges = [los]
        else:
            ranges = list(los)  # type: ignore[arg-type]
        pending = Pending(los=ranges)
        self.pending = pending
        with conn.transaction():
            row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
            assert row is not None
            pending.xid = str(row[0])
            if self.on_change is not None and (pending.los or pending.tables or pending.roles):
                self.on_change(self)
            yield pending
        self._enter(pending)

    def claim(self, los: Sequence[tuple[int, int]]) -> None:
        """In a transaction opened with no LOs: the OID ranges it creates, known only
        once it has looked at what exists (a skipping restore, sync's rewrites). Entered
        when it commits, and told to ``on_change`` as those given at its opening are."""
        p = self.pending
        assert p is not None and p.xid is not None and not p.los
        p.los = list(los)
        if self.on_change is not None and p.los:
            self.on_change(self)

    def _enter(self, pending: Pending) -> None:
        for lo, hi in pending.los:
            if self.lo_ranges and self.lo_ranges[-1][1] + 1 == lo:
                self.lo_ranges[-1] = (self.lo_ranges[-1][0], hi)
            else:
                self.lo_ranges.append((lo, hi))
        self.tables += pending.tables
        self.roles += pending.roles
        if self.pending is pending:
            self.pending = None

    # -- clean-up ---------------------------------------------------------------------
    def describe(self) -> str:
        """What this run created (or may have: a transaction whose fate is unknown)."""
        parts = []
        if self.lo_ranges:
            parts.append(format_ranges(self.lo_ranges))
        if self.tables:
            parts.append(f"table {', '.join(self.tables)}")
        if self.roles:
            parts.append(f"roles {', '.join(self.roles)}")
        p = self.pending
        if p is not None and p.xid is not None:
            maybe = [format_ranges(p.los)] if p.los else []
            maybe += [f"table {t}" for t in p.tables] + [f"role {r}" for r in p.roles]
            if maybe:
                parts.append(f"perhaps {' and '.join(maybe)} (transaction {p.xid})")
        return " and ".join(parts)

    def remainder(self) -> str:
        """What is left, for a message: ``what this restore created remains: 12,000 LOs
        (OIDs 200000..211999)``; empty when nothing is."""
        left = self.describe()
        return f"what this {self.run} created remains: {left}" if left else ""

    def undo(self, conn: psycopg.Connection | None) -> str:
        """Abandon ``conn`` (the run's connection), then remove exactly what this run
        created, on a new connection with timeouts (see the module's docstring). Returns
        what was removed; raises CleanupFailed naming what is left when it cannot finish.
        A signal handler's exception (``signals.stoppable``) goes through: the ledger then
        holds what is left."""
        _abandon(conn)
        if self.empty:
            return "nothing"
        removed = ""
        try:
            with _cleanup_connection(self.conninfo) as c:  # errors name the database
                self._settle(c)
                removed = self.describe() or "nothing"
                self._remove(c)
        except (PgBlobDumpError, psycopg.Error) as e:
            why = reason(e) if isinstance(e, psycopg.Error) else str(e)
            if isinstance(e.__cause__ or e, psycopg.errors.LockNotAvailable):
                why += ": another session holds a lock on one of them"
            raise CleanupFailed(
                f"clean-up failed ({why}); {self.remainder() or 'nothing is left'}"
            ) from e
        return removed

    def _settle(self, conn: psycopg.Connection) -> None:
        """Find out whether the transaction in flight committed (enter it) or not (drop it)."""
        p = self.pending
        if p is None:
            return
        if p.xid is None:
            self.pending = None
            return
        deadline = time.monotonic() + SETTLE_SECONDS
        terminated = False
        while True:
            row = conn.execute("SELECT pg_xact_status(%s::xid8)", (p.xid,)).fetchone()
            status = row[0] if row else None
            if status == "committed":
                self._enter(p)
                return
            if status in ("aborted", None):
                self.pending = None
                return
            if time.monotonic() > deadline:
                raise PgBlobDumpError(f"transaction {p.xid} did not end")
            if not terminated and self.backend_pid is not None:
                # The abandoned backend may still be inside the cancelled statement.
                with contextlib.suppress(psycopg.Error):
                    conn.execute("SELECT pg_terminate_backend(%s)", (self.backend_pid,))
                terminated = True
            time.sleep(0.05)

    def _remove(self, conn: psycopg.Connection) -> None:
        # lo_unlink holds a lock per LO until commit: batches sized from the lock table.
        per_batch = LockBudget.read(conn).per_transaction
        while self.lo_ranges:
            lo, hi = self.lo_ranges[0]
            top = min(hi, lo + per_batch - 1)
            with conn.transaction():
                conn.execute(
                    "SELECT count(lo_unlink(oid)) FROM pg_catalog.pg_largeobject_metadata"
                    " WHERE oid BETWEEN %s::int8::oid AND %s::int8::oid",
                    (lo, top),
                )
                if self.on_remove is not None:
                    self.on_remove(conn, [(lo, top)])
            self.lo_ranges[0] = (top + 1, hi)
            if top == hi:
                self.lo_ranges.pop(0)
        while self.tables:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.tables[0])))
            self.tables.pop(0)
        while self.roles:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(self.roles[0])))
            self.roles.pop(0)


@contextlib.contextmanager
def _cleanup_connection(conninfo: str) -> Iterator[psycopg.Connection]:
    """A connection for clean-up, every wait of it bounded (see the module's docstring)."""
    with connect(conninfo, params={"connect_timeout": CONNECT_TIMEOUT, **KEEPALIVES}) as conn:
        conn.execute(
            f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}; SET lock_timeout = {LOCK_TIMEOUT_MS}"
        )
        yield conn


def _abandon(conn: psycopg.Connection | None) -> None:
    """Cancel whatever ``conn`` is running and close it; the server rolls back."""
    if conn is None or conn.closed:
        return
    with contextlib.suppress(Exception):
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE:
            conn.cancel_safe(timeout=5)
    with contextlib.suppress(Exception):
        conn.close()
