"""Open connections with libpq's errors turned into ours, and describe them safely."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import psycopg
from psycopg import conninfo as pgconninfo

from pgblobdump.errors import ConnectionFailed, UsageError
from pgblobdump.pg.target import first_line

APPLICATION_NAME = "pgblobdump"


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


@contextlib.contextmanager
def connect(conninfo: str, autocommit: bool = True) -> Iterator[psycopg.Connection]:
    """A psycopg connection that raises ConnectionFailed/UsageError instead of libpq errors."""
    try:
        conn = psycopg.connect(
            conninfo, autocommit=autocommit, application_name=APPLICATION_NAME, connect_timeout=10
        )
    except psycopg.ProgrammingError as e:
        raise UsageError(f"invalid connection string: {first_line(e)}") from e
    except psycopg.OperationalError as e:
        raise ConnectionFailed(f"cannot connect to {describe(conninfo)}: {first_line(e)}") from e
    with conn:
        yield conn
