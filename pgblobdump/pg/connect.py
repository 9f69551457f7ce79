"""Open connections with libpq's errors turned into ours, and describe them safely.

``translate`` is the one place where a psycopg error becomes a PgBlobDumpError: every
connection opened by ``connect`` runs its body under it, and the CLI's last-resort handler
uses it too, so no psycopg exception reaches a user as a traceback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

import psycopg
from psycopg import conninfo as pgconninfo

from pgblobdump.errors import ConnectionFailed, DatabaseError, PgBlobDumpError, UsageError, scrub
from pgblobdump.pg.target import first_line

APPLICATION_NAME = "pgblobdump"

_CONNECTION_SQLSTATES = ("08", "57P01", "57P02", "57P03")
"""Connection exceptions and the server shutting down (admin_shutdown, crash_shutdown,
cannot_connect_now): the connection is gone, not the statement refused."""


def describe(conninfo: str) -> str:
    """``dbname@host:port`` for messages, never the password."""
    try:
        params = pgconninfo.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<invalid connection string>"
    # libpq falls back to the environment for what the string leaves out; say so too.
    host = params.get("host") or os.environ.get("PGHOST") or "the default socket"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    dbname = params.get("dbname") or os.environ.get("PGDATABASE") or "(default)"
    return f"database {dbname} on {host}:{port}"


def reason(e: psycopg.Error) -> str:
    """The server's primary message (or libpq's first line), with any password masked."""
    diag = getattr(e, "diag", None)
    text = diag.message_primary if diag is not None and diag.message_primary else first_line(e)
    if e.sqlstate == "53200" and diag is not None and diag.message_hint:
        # "out of shared memory" alone names no cure; the server's hint does (a full
        # lock table: max_locks_per_transaction).
        text = f"{text} ({diag.message_hint.rstrip('.')})"
    return scrub(text or type(e).__name__)


def lost_connection(e: psycopg.Error) -> bool:
    """Whether ``e`` means the server went away rather than refused a statement."""
    state = e.sqlstate or ""
    if state:
        return state.startswith(_CONNECTION_SQLSTATES)
    return isinstance(e, psycopg.OperationalError | psycopg.InterfaceError)


def translate(e: psycopg.Error, doing: str, where: str = "") -> PgBlobDumpError:
    """Our error for a psycopg one: ConnectionFailed when the server went away (naming
    ``where``, the database and server, when given), DatabaseError when it refused;
    ``doing`` says what we were doing (``reading LOs``)."""
    prefix = f"{doing}: " if doing else ""
    if lost_connection(e):
        server = f" ({where})" if where else ""
        return ConnectionFailed(f"{prefix}lost the connection to the server{server}: {reason(e)}")
    return DatabaseError(f"{prefix}{reason(e)}")


@contextlib.contextmanager
def sql_errors(doing: str, where: str = "") -> Iterator[None]:
    """Run a block with psycopg errors raised as ours (see ``translate``)."""
    try:
        yield
    except psycopg.Error as e:
        raise translate(e, doing, where) from e


@contextlib.contextmanager
def connect(
    conninfo: str,
    autocommit: bool = True,
    doing: str = "",
    params: Mapping[str, int | str] | None = None,
) -> Iterator[psycopg.Connection]:
    """A psycopg connection; libpq errors while connecting become ConnectionFailed or
    UsageError, and psycopg errors escaping the body are translated (``doing`` names it).
    ``params`` are libpq's (``connect_timeout``, 10 s unless given; ``keepalives_idle``)."""
    extra = dict(params or {})
    timeout = extra.pop("connect_timeout", 10)
    try:
        full = pgconninfo.make_conninfo(conninfo, **extra) if extra else conninfo
        conn = psycopg.connect(
            full, autocommit=autocommit, application_name=APPLICATION_NAME, connect_timeout=timeout
        )
    except psycopg.ProgrammingError as e:
        raise UsageError(f"invalid connection string: {scrub(first_line(e))}") from e
    except psycopg.OperationalError as e:
        raise ConnectionFailed(
            f"cannot connect to {describe(conninfo)}: {scrub(first_line(e))}"
        ) from e
    where = describe(conninfo)
    with sql_errors(doing or f"on {where}", where if doing else ""), conn:
        yield conn
