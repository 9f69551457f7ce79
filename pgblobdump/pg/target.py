"""Where to connect, spelled like psql: ``-d`` (a name or a conninfo), ``-h -p -U``.

libpq itself reads PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD and the rest, so a
target built from no options at all connects where psql would. This module imports
psycopg only when a connection string is built, so commands that never connect (``toc``)
start without loading libpq.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pgblobdump.errors import UsageError, register_secret, scrub
from pgblobdump.pgconstants import NAMEDATALEN

APPLICATION_NAME = "pgblobdump"
"""The application_name our sessions show in pg_stat_activity, unless PGAPPNAME or the
connection string names one (pg.connect passes it as libpq's ``fallback_application_name``)."""

_application = [APPLICATION_NAME]
_run = [0]


def set_application_name(name: str) -> None:
    """Name this process's sessions (the CLI: ``pgblobdump <command>``); a new run begins
    (what ``-v`` said once per run is said again: tests run many in one process)."""
    _application[0] = name[: NAMEDATALEN - 1]  # the server would cut it anyway
    _run[0] += 1


def application_name() -> str:
    return _application[0]


def run_number() -> int:
    """Which run this is, for things said once per run."""
    return _run[0]


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (libpq's carry DETAIL and HINT lines)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


@dataclass(frozen=True)
class ConnectionTarget:
    """Connection options as given; empty fields fall back to libpq's environment."""

    dbname: str | None = None
    host: str | None = None
    port: str | None = None
    user: str | None = None

    def __post_init__(self) -> None:
        # ``-d ""`` must not mean "no -d": libpq would quietly use its default server.
        for flag, value in (("-d", self.dbname), ("-h", self.host), ("-p", self.port),
                            ("-U", self.user)):  # fmt: skip
            if value is not None and not value.strip():
                raise UsageError(f"{flag} is empty; give a value or leave the option out")

    @property
    def given(self) -> bool:
        """Whether the user named any connection option at all."""
        return any(v is not None for v in (self.dbname, self.host, self.port, self.user))

    def conninfo(self) -> str:
        """The libpq connection string; options override what ``-d`` says."""
        register_secret(os.environ.get("PGPASSWORD"))
        if self.port is not None and not all(p.strip().isdigit() for p in self.port.split(",")):
            raise UsageError(f"port {self.port!r} is not a number")
        import psycopg
        from psycopg import conninfo as pgconninfo

        base = self.dbname or ""
        if base and "=" not in base and "://" not in base:
            base = pgconninfo.make_conninfo(dbname=base)
        extra = {"host": self.host, "port": self.port, "user": self.user}
        try:
            conninfo = pgconninfo.make_conninfo(base, **{k: v for k, v in extra.items() if v})
        except psycopg.ProgrammingError as e:
            raise UsageError(
                f"invalid connection string {scrub(repr(self.dbname))}: {scrub(first_line(e))}"
            ) from e
        password = pgconninfo.conninfo_to_dict(conninfo).get("password")
        register_secret(str(password) if password is not None else None)
        return conninfo


def split_password(conninfo: str) -> tuple[str, str | None]:
    """``conninfo`` without its password, and the password (None when it has none).

    Child processes (pg_dump, pg_restore) get the password in ``PGPASSWORD`` instead of
    on their command line, where ``ps``, commands.txt and results.json would show it.
    """
    from psycopg import conninfo as pgconninfo

    params = pgconninfo.conninfo_to_dict(conninfo)
    password = params.pop("password", None)
    if password is None:
        return conninfo, None
    register_secret(str(password))
    return pgconninfo.make_conninfo("", **params), str(password)


def child_connection(conninfo: str) -> tuple[str, Mapping[str, str] | None]:
    """What a child (pg_dump, pg_restore) gets to connect: ``conninfo`` without its
    password for the command line, and an environment carrying the password in
    PGPASSWORD (None when there is none: the child inherits ours). Command lines are
    visible in ``ps`` and saved in commands.txt and results.json; the environment is not."""
    bare, password = split_password(conninfo)
    if password is None:
        return bare, None
    return bare, {**os.environ, "PGPASSWORD": password}
