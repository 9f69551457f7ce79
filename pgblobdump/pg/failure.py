"""The one way a run that writes to a database fails: its error, then exactly what it
made removed (or named), in one line. generate and restore both end here."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable

import psycopg
import psycopg.errors

from pgblobdump import signals
from pgblobdump.errors import DatabaseError, Interrupted, PgBlobDumpError
from pgblobdump.pg.connect import describe, translate
from pgblobdump.pg.ledger import CleanupFailed, Ledger


def taken_oid(e: BaseException) -> str | None:
    """The OID in "Key (oid)=(5250000) already exists": an LO OID someone else has."""
    if not isinstance(e, psycopg.errors.UniqueViolation):
        return None
    m = re.search(r"\(oid\)=\((\d+)\)", e.diag.message_detail or "")
    return m.group(1) if m else None


def with_more(base: PgBlobDumpError, more: str) -> PgBlobDumpError:
    """``base`` with ``; more`` added to its message, keeping its class and exit code."""
    if isinstance(base, Interrupted):
        return Interrupted(f"{base}; {more}", base.signum)
    return type(base)(f"{base}; {more}")


def as_error(
    e: BaseException, what: str, taken: Callable[[str], str], where: str = ""
) -> PgBlobDumpError:
    """Our error for whatever ended a run: a signal (even one hidden behind psycopg's
    failed clean-up), an OID taken (``taken(oid)`` words it), a psycopg error, ours."""
    e = signals.interrupt_in(e) or e
    if isinstance(e, KeyboardInterrupt):
        signum = signals.signum_of(e)
        return Interrupted(f"{what} interrupted by {signals.name(signum)}", signum)
    oid = taken_oid(e)
    if oid is not None:
        return DatabaseError(f"{what} failed: {taken(oid)}")
    if isinstance(e, psycopg.Error):
        return translate(e, f"{what} failed", where)
    assert isinstance(e, PgBlobDumpError)
    return e


def failed(
    e: BaseException,
    what: str,
    ledger: Ledger,
    conn: psycopg.Connection,
    taken: Callable[[str], str],
    cleanup: bool = True,
    if_left: str = "",
    stop: Callable[[], bool] | None = None,
) -> PgBlobDumpError:
    """The error to raise when a run ends by ``e``: exactly what the ledger holds is
    removed (unless ``cleanup`` is off), and the one line says what was removed or left
    (``if_left`` says what to do about a remainder).

    ``stop`` first stops the run's threads; it returns False when one may still be using
    ``conn`` (which is then left alone). The whole clean-up is ``signals.stoppable``: a
    signal now (a second Ctrl-C) ends it at once, the error naming what is left, with
    the exit status of the signal."""
    base = as_error(e, what, taken, describe(ledger.conninfo))
    try:
        with signals.stoppable():
            free = stop() if stop is not None else True
            if ledger.empty:
                return base
            if not cleanup:
                with contextlib.suppress(Exception):
                    conn.close()  # an interrupted transaction is rolled back
                return with_more(base, f"left in place: {ledger.describe()}{if_left}")
            removed = ledger.undo(conn if free else None)
    except signals.Abandoned as a:
        left = ledger.remainder()
        more = f"clean-up stopped by {signals.name(a.signum)}" + (
            f"; {left}{if_left}" if left else ""
        )
        if isinstance(base, Interrupted):
            return Interrupted(f"{base}; {more}", base.signum)
        return Interrupted(f"{base}; {more}", a.signum)
    except CleanupFailed as failure:
        return with_more(base, f"{failure}{if_left}")
    if removed == "nothing":
        return base
    return with_more(base, f"removed the {removed} this run created")


def failed_all(
    e: BaseException,
    what: str,
    runs: list[tuple[Ledger, psycopg.Connection]],
    taken: Callable[[str], str],
    if_left: str = "",
    stop: Callable[[], list[bool]] | None = None,
) -> PgBlobDumpError:
    """``failed`` for a run over several connections (``restore --jobs``), each with
    its own ledger: ``stop`` stops every connection's threads (False for a connection
    one may still be using), then each ledger is undone in turn, and the one line says
    what was removed, or what is left of each."""
    base = as_error(e, what, taken, describe(runs[0][0].conninfo) if runs else "")
    removed: list[str] = []
    failures: list[str] = []
    done = 0
    try:
        with signals.stoppable():
            free = stop() if stop is not None else [True] * len(runs)
            for (ledger, conn), ok in zip(runs, free, strict=True):
                try:
                    r = ledger.undo(conn if ok else None)
                except CleanupFailed as failure:
                    failures.append(str(failure))
                else:
                    if r != "nothing":
                        removed.append(r)
                done += 1
    except signals.Abandoned as a:
        left = [ledger.remainder() for ledger, _ in runs[done:]]
        left = [x for x in left if x] + failures
        more = f"clean-up stopped by {signals.name(a.signum)}" + (
            f"; {'; '.join(left)}{if_left}" if left else ""
        )
        return Interrupted(f"{base}; {more}", base.signum if isinstance(base, Interrupted)
                           else a.signum)  # fmt: skip
    parts = []
    if removed:
        parts.append(f"removed the {' and '.join(removed)} this run created")
    if failures:
        parts.append("; ".join(failures) + if_left)
    return with_more(base, "; ".join(parts)) if parts else base
