"""What the benchmark scripts share: a timestamped line on stderr, and scratch databases
on one embedded cluster (over TCP, as a user's tools would connect)."""

from __future__ import annotations

import sys
import time

import psycopg

from pgblobdump.servers.cluster import EmbeddedCluster


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
