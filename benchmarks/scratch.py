"""What the benchmark scripts share: a timestamped line on stderr, and scratch databases
on one embedded cluster (over TCP, as a user's tools would connect)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import psycopg

from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Scratch:
    """Databases made, counted and dropped on ``cluster``."""

    def __init__(self, cluster: EmbeddedCluster) -> None:
        self.c = cluster

    def dsn(self, db: str) -> str:
        return self.c.conninfo(db, tcp=True)

    def fresh_db(self, name: str) -> str:
        """An empty database ``name`` (dropped first if it is there); its conninfo."""
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        return self.dsn(name)

    def drop_db(self, name: str) -> None:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def lo_count(self, dsn: str) -> int:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        return int(row[0]) if row else 0


def on_server(
    dsn: str | None, major: int, run: Callable[[str, Callable[[str], str]], None]
) -> None:
    """``run(admin conninfo, conninfo of a database name)`` on the server at ``dsn`` (its
    database is the admin one), else on an embedded cluster of ``major``."""
    if dsn:
        run(dsn, lambda name: psycopg.conninfo.make_conninfo(dsn, dbname=name))
        return
    with EmbeddedCluster(major, settings=BENCHMARK_WAL) as c:
        print(f"PostgreSQL {c.tc.version}, {os.cpu_count()} CPUs", file=sys.stderr)
        run(c.conninfo(), c.conninfo)
