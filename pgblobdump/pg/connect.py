"""Open connections with libpq's errors turned into ours, and describe them safely."""

from __future__ import annotations

import contextlib
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
    host = params.get("host") or "default socket"
    port = params.get("port") or "5432"
    return f"database {params.get('dbname') or '(default)'} on {host}:{port}"


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
