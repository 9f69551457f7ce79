"""migrate run vs the naive rewrites, side by side in one run, on the same table.

For each scale a table of N LOs is made once with ``pgblobdump generate --table src``;
each contender then works on its own copy (``CREATE TABLE t AS SELECT * FROM src``, with
the primary key), so they read the same LOs:

- ``UPDATE``: ``ALTER TABLE t ADD COLUMN b bytea`` then one ``UPDATE t SET b = lo_get(lo)``
  (the anchor: targets.md asks for migrate within 1.5x of it). It holds a row lock on
  every row for the whole statement: no application write to the table gets through.
- ``UPDATE EXTERNAL``: the same with the new column set to EXTERNAL first (what migrate
  picks for incompressible data), to separate storage from method.
- ``ALTER TYPE``: ``ALTER TABLE t ALTER COLUMN lo TYPE bytea USING lo_get(lo)``: ACCESS
  EXCLUSIVE (no reads either) for the whole rewrite.
- ``migrate``: ``pgblobdump migrate run t.lo`` as a child under /usr/bin/time (peak RSS);
  its longest exclusive lock comes from its own report.
- ``migrate --in-place``: the one-statement rewrite, verified.

Reported per contender: wall seconds, WAL bytes (``pg_current_wal_lsn`` difference),
table size after (``pg_total_relation_size``), the longest lock that blocks writers, and
the ratio to ``UPDATE``. The embedded cluster runs with fsync and full_page_writes off,
which lowers the WAL figures of every contender alike.

Usage: .venv/bin/python benchmarks/migrate_vs_naive.py [--major 17] [--scales 100k:4KiB,1M:256B]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg

from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.units import format_bytes, parse_count, parse_size

PGBLOBDUMP = os.path.join(os.path.dirname(sys.executable), "pgblobdump")


@dataclass
class Row:
    contender: str
    seconds: float
    wal: int
    size: int
    lock: str
    rss_kib: int | None = None


def fresh_db(c: EmbeddedCluster, name: str) -> str:
    with psycopg.connect(c.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return c.conninfo(name)


def copy_table(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS t")
        conn.execute("CREATE TABLE t AS SELECT * FROM src")
        conn.execute("ALTER TABLE t ADD PRIMARY KEY (id)")
        conn.execute("VACUUM ANALYZE t")
        conn.execute("CHECKPOINT")


def lsn(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'").fetchone()[0])  # type: ignore[index]


def measure(
    db: str, name: str, work: Callable[[psycopg.Connection], tuple[str, int | None]]
) -> Row:
    copy_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        w0 = lsn(conn)
        t0 = time.perf_counter()
        lock, rss = work(conn)
        seconds = time.perf_counter() - t0
        wal = lsn(conn) - w0
        size = int(conn.execute("SELECT pg_total_relation_size('t')").fetchone()[0])  # type: ignore[index]
        typ = conn.execute(
            "SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = 't'::regclass"
            " AND attname IN ('lo', 'b') AND format_type(atttypid, NULL) = 'bytea'"
        ).fetchone()
        assert typ is not None, f"{name}: no bytea column after the run"
    return Row(name, seconds, wal, size, lock if lock else f"{seconds:.2f} s", rss)


def naive_update(external: bool) -> Callable[[psycopg.Connection], tuple[str, int | None]]:
    def work(conn: psycopg.Connection) -> tuple[str, int | None]:
        conn.execute("ALTER TABLE t ADD COLUMN b bytea")
        if external:
            conn.execute("ALTER TABLE t ALTER COLUMN b SET STORAGE EXTERNAL")
        t0 = time.perf_counter()
        conn.execute("UPDATE t SET b = lo_get(lo)")
        return f"row locks on every row {time.perf_counter() - t0:.2f} s", None

    return work


def alter_type(conn: psycopg.Connection) -> tuple[str, int | None]:
    t0 = time.perf_counter()
    conn.execute("ALTER TABLE t ALTER COLUMN lo TYPE bytea USING lo_get(lo)")
    return f"ACCESS EXCLUSIVE {time.perf_counter() - t0:.2f} s", None


def migrate(db: str, *extra: str) -> Callable[[psycopg.Connection], tuple[str, int | None]]:
    def work(conn: psycopg.Connection) -> tuple[str, int | None]:
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "PGBD %M", PGBLOBDUMP, "migrate", "run", "-d", db, "t.lo",
             *extra, "--json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode:
            raise SystemExit(f"migrate failed: {proc.stderr}")
        rss = int(proc.stderr.strip().splitlines()[-1].split()[1])
        result = json.loads(proc.stdout)
        return f"ACCESS EXCLUSIVE {result['lock_ms'] / 1000:.3f} s", rss

    return work


def scale(c: EmbeddedCluster, count: int, size: int) -> list[Row]:
    db = fresh_db(c, "pgbd_migrate_bench")
    t0 = time.perf_counter()
    subprocess.run(
        [PGBLOBDUMP, "generate", "-d", db, "-n", str(count), "--size", str(size), "--table",
         "src", "--json"],
        check=True, capture_output=True,
    )  # fmt: skip
    print(f"  generated {count:,} x {format_bytes(size)} in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)  # fmt: skip
    rows = [
        measure(db, "UPDATE", naive_update(external=False)),
        measure(db, "UPDATE EXTERNAL", naive_update(external=True)),
        measure(db, "ALTER TYPE", alter_type),
        measure(db, "migrate", migrate(db)),
        measure(db, "migrate --in-place", migrate(db, "--in-place")),
    ]
    with psycopg.connect(c.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE pgbd_migrate_bench WITH (FORCE)")
    return rows


def show(title: str, rows: list[Row]) -> None:
    base = rows[0].seconds
    print(f"\n### {title}\n")
    print(
        "| contender | seconds | x UPDATE | WAL | table after | lock blocking writers | peak RSS |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for r in rows:
        rss = f"{r.rss_kib / 1024:.0f} MB" if r.rss_kib else ""
        print(f"| {r.contender} | {r.seconds:.2f} | {r.seconds / base:.2f} | {format_bytes(r.wal)}"
              f" | {format_bytes(r.size)} | {r.lock} | {rss} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--major", type=int, default=17)
    ap.add_argument("--scales", default="100k:4KiB,1M:256B", help="COUNT:SIZE,...")
    args = ap.parse_args()
    with EmbeddedCluster(args.major) as c:
        print(f"PostgreSQL {c.tc.version}, {os.cpu_count()} CPUs", file=sys.stderr)
        for spec in args.scales.split(","):
            count_text, size_text = spec.split(":")
            count, size = parse_count(count_text), parse_size(size_text)
            rows = scale(c, count, size)
            show(f"{count:,} LOs x {format_bytes(size)}", rows)


if __name__ == "__main__":
    main()
