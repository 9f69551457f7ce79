"""Connections spelled like psql: ``-d`` (a name or a full connection string), ``-h -p -U``.

libpq itself reads PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD and the rest, so a
target built from no options at all connects where psql would.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import conninfo as pgconninfo

from pgblobdump.errors import ConnectionFailed, UsageError

APPLICATION_NAME = "pgblobdump"


@dataclass(frozen=True)
class ConnectionTarget:
    """Connection options as given; empty fields fall back to libpq's environment."""

    dbname: str | None = None
    host: str | None = None
    port: str | None = None
    user: str | None = None

    @property
    def given(self) -> bool:
        """Whether the user named any connection option at all."""
        return any((self.dbname, self.host, self.port, self.user))

    def conninfo(self) -> str:
        """The libpq connection string; options override what ``-d`` says."""
        base = self.dbname or ""
        if base and "=" not in base and "://" not in base:
            base = pgconninfo.make_conninfo(dbname=base)
        extra = {k: v for k, v in (("host", self.host), ("port", self.port), ("user", self.user))}
        try:
            return pgconninfo.make_conninfo(base, **{k: v for k, v in extra.items() if v})
        except psycopg.ProgrammingError as e:
            raise UsageError(f"invalid connection string {self.dbname!r}: {_first_line(e)}") from e


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


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
        raise UsageError(f"invalid connection string: {_first_line(e)}") from e
    except psycopg.OperationalError as e:
        raise ConnectionFailed(f"cannot connect to {describe(conninfo)}: {_first_line(e)}") from e
    with conn:
        yield conn
