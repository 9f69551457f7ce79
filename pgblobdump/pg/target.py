"""Where to connect, spelled like psql: ``-d`` (a name or a conninfo), ``-h -p -U``.

libpq itself reads PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD and the rest, so a
target built from no options at all connects where psql would. This module imports
psycopg only when a connection string is built, so commands that never connect (``toc``)
start without loading libpq.
"""

from __future__ import annotations

from dataclasses import dataclass

from pgblobdump.errors import UsageError


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

    @property
    def given(self) -> bool:
        """Whether the user named any connection option at all."""
        return any((self.dbname, self.host, self.port, self.user))

    def conninfo(self) -> str:
        """The libpq connection string; options override what ``-d`` says."""
        if self.port is not None and not all(p.strip().isdigit() for p in self.port.split(",")):
            raise UsageError(f"port {self.port!r} is not a number")
        import psycopg
        from psycopg import conninfo as pgconninfo

        base = self.dbname or ""
        if base and "=" not in base and "://" not in base:
            base = pgconninfo.make_conninfo(dbname=base)
        extra = {"host": self.host, "port": self.port, "user": self.user}
        try:
            return pgconninfo.make_conninfo(base, **{k: v for k, v in extra.items() if v})
        except psycopg.ProgrammingError as e:
            raise UsageError(f"invalid connection string {self.dbname!r}: {first_line(e)}") from e
