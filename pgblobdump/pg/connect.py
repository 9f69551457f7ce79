"""Open connections with libpq's errors turned into ours, and describe them safely.

``translate`` is the one place where a psycopg error becomes a PgBlobDumpError: every
connection opened by ``connect`` runs its body under it, and the CLI's last-resort handler
uses it too, so no psycopg exception reaches a user as a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping

import psycopg
from psycopg import conninfo as pgconninfo

from pgblobdump.errors import ConnectionFailed, DatabaseError, PgBlobDumpError, UsageError, scrub
from pgblobdump.pg.sqllog import LoggingCursor
from pgblobdump.pg.target import APPLICATION_NAME as APPLICATION_NAME  # re-exported
from pgblobdump.pg.target import application_name, first_line, run_number

log = logging.getLogger(__name__)

_described: set[tuple[int, str, str, str]] = set()
_described_lock = threading.Lock()

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
            full,
            autocommit=autocommit,
            fallback_application_name=application_name(),
            connect_timeout=timeout,
            cursor_factory=LoggingCursor,
        )
    except psycopg.ProgrammingError as e:
        raise UsageError(f"invalid connection string: {scrub(first_line(e))}") from e
    except psycopg.OperationalError as e:
        raise ConnectionFailed(
            f"cannot connect to {describe(conninfo)}: {scrub(first_line(e))}"
        ) from e
    where = describe(conninfo)
    with sql_errors(doing or f"on {where}", where if doing else ""), conn:
        if log.isEnabledFor(logging.INFO):
            _log_server(conn)
        yield conn


def _log_server(conn: psycopg.Connection) -> None:
    """For -v, once per server and role: what we connected to and the settings that size
    our work (the lock table that batches are cut from)."""
    info = conn.info
    key = (run_number(), info.host, str(info.port), info.dbname)
    with _described_lock:
        if key in _described:
            return
        _described.add(key)
    row = conn.execute(
        "SELECT current_setting('server_version'), current_user,"
        " (SELECT application_name FROM pg_catalog.pg_stat_activity"
        "  WHERE pid = pg_catalog.pg_backend_pid()),"
        " current_setting('max_locks_per_transaction'),"
        " current_setting('max_connections'), current_setting('max_prepared_transactions'),"
        " current_setting('transaction_isolation')"
    ).fetchone()
    if not conn.autocommit:
        conn.rollback()  # leave the caller a connection with no transaction begun
    assert row is not None
    version, user, app, locks, conns, prepared, isolation = row
    where = f"{info.host}:{info.port}" if not info.host.startswith("/") else info.host
    log.info(
        "server: PostgreSQL %s, database %s on %s as %s (pg_stat_activity shows"
        " application_name %r)",
        version, info.dbname, where, user, app,
    )  # fmt: skip
    log.info(
        "server settings: max_locks_per_transaction %s, max_connections %s,"
        " max_prepared_transactions %s, default isolation %s",
        locks, conns, prepared, isolation,
    )  # fmt: skip
