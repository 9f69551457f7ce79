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

The last line of each scale compares ``migrate`` with the target (issue 27: within 1.5x
of ``UPDATE``). ``--profile`` adds one more run of ``migrate`` in-process on a fresh copy,
each statement timed (wall, summed per statement text): the top of the server-side profile.

Usage: .venv/bin/python benchmarks/migrate_vs_naive.py [--major 17] [--scales 100k:4KiB,1M:256B]
       [--profile] [--profile-without-pages] [--dsn DSN (a running server instead)]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from scratch import on_server

from pgblobdump.migrate import RunOptions
from pgblobdump.migrate import run as migrate_run
from pgblobdump.pg import catalog
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.units import format_bytes, parse_count, parse_size

PGBLOBDUMP = os.path.join(os.path.dirname(sys.executable), "pgblobdump")
TARGET = 1.5
"""migrate run within this many times the naive UPDATE (issue 27, item 5)."""


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


def copy_table(db: str, select: str = "SELECT * FROM src") -> None:
    """A fresh table ``t`` of ``select``'s rows, keyed by ``id``, analyzed, checkpointed."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS t")
        conn.execute(f"CREATE TABLE t AS {select}")
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


def migrate(
    db: str, *extra: str, column: str = "t.lo"
) -> Callable[[psycopg.Connection], tuple[str, int | None]]:
    """``migrate run`` of ``column`` under /usr/bin/time: its lock and peak RSS (KiB)."""

    def work(conn: psycopg.Connection) -> tuple[str, int | None]:
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "PGBD %M", PGBLOBDUMP, "migrate", "run", "-d", db, column,
             *extra, "--json"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode:
            raise SystemExit(f"migrate failed: {proc.stderr}")
        rss = int(proc.stderr.strip().splitlines()[-1].split()[1])
        result = json.loads(proc.stdout)
        return f"ACCESS EXCLUSIVE {result['lock_ms'] / 1000:.3f} s", rss

    return work


@contextmanager
def statement_times() -> Iterator[dict[str, list[float]]]:
    """Every ``Connection.execute`` meanwhile, timed: statement text -> [calls, seconds]."""
    stats: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    plain = psycopg.Connection.execute

    def timed(self: psycopg.Connection, query: Any, params: Any = None, **kw: Any) -> Any:
        text = query.as_string(self) if hasattr(query, "as_string") else str(query)
        key = re.sub(r"\s+", " ", text)[:100]
        t0 = time.perf_counter()
        try:
            return plain(self, query, params, **kw)
        finally:
            stats[key][0] += 1
            stats[key][1] += time.perf_counter() - t0

    psycopg.Connection.execute = timed  # type: ignore[method-assign,assignment]
    try:
        yield stats
    finally:
        psycopg.Connection.execute = plain  # type: ignore[method-assign]


def profile(db: str, top: int = 8, pages: bool = True) -> None:
    """One more ``migrate run`` in-process, on a fresh copy, each statement timed;
    ``pages`` False: as a role that may not read pg_largeobject (a non-superuser) runs,
    the question answered no (the naive UPDATE is timed again beside it)."""
    naive = ""
    if not pages:
        copy_table(db)
        with psycopg.connect(db, autocommit=True) as conn:
            t0 = time.perf_counter()
            naive_update(external=False)(conn)
            naive = f"; the naive UPDATE just before: {time.perf_counter() - t0:.2f} s"
    copy_table(db)
    readable = catalog.pages_readable
    try:
        if not pages:
            catalog.pages_readable = lambda conn: False
        with statement_times() as stats, psycopg.connect(db, autocommit=True) as conn:
            t0 = time.perf_counter()
            migrate_run(conn, "t.lo", RunOptions())
            total = time.perf_counter() - t0
    finally:
        catalog.pages_readable = readable
    who = "" if pages else " as a role that may not read pg_largeobject"
    print(f"\nProfile of one in-process `migrate run`{who} ({total:.2f} s{naive}),"
          " statements by time:\n")  # fmt: skip
    print("| seconds | calls | statement |")
    print("|---:|---:|---|")
    for text, (calls, secs) in sorted(stats.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {secs:.2f} | {calls:.0f} | `{text.replace('|', '/')}` |")


def generated_db(conninfo: Callable[[str], str], admin: str, count: int, size: int) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS pgbd_migrate_bench WITH (FORCE)")
        conn.execute("CREATE DATABASE pgbd_migrate_bench")
    db = conninfo("pgbd_migrate_bench")
    t0 = time.perf_counter()
    subprocess.run(
        [PGBLOBDUMP, "generate", "-d", db, "-n", str(count), "--size", str(size), "--table",
         "src", "--json"],
        check=True, capture_output=True,
    )  # fmt: skip
    print(f"  generated {count:,} x {format_bytes(size)} in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)  # fmt: skip
    return db


def scale(db: str) -> list[Row]:
    rows = [
        measure(db, "UPDATE", naive_update(external=False)),
        measure(db, "UPDATE EXTERNAL", naive_update(external=True)),
        measure(db, "ALTER TYPE", alter_type),
        measure(db, "migrate", migrate(db)),
        measure(db, "migrate --in-place", migrate(db, "--in-place")),
    ]
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
    ours = next(r for r in rows if r.contender == "migrate")
    ratio = ours.seconds / base
    print(f"\nmigrate / UPDATE = **{ratio:.2f}x** (target {TARGET}x:"
          f" {'met' if ratio <= TARGET else 'missed'})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--major", type=int, default=17)
    ap.add_argument("--scales", default="100k:4KiB,1M:256B", help="COUNT:SIZE,...")
    ap.add_argument("--profile", action="store_true", help="also time migrate's statements")
    ap.add_argument("--profile-without-pages", action="store_true",
                    help="the same as a role that may not read pg_largeobject")  # fmt: skip
    ap.add_argument("--dsn", help="an existing server (its database is the admin one)")
    args = ap.parse_args()
    on_server(args.dsn, args.major, lambda admin, conninfo: run_scales(args, admin, conninfo))


def run_scales(args: argparse.Namespace, admin: str, conninfo: Callable[[str], str]) -> None:
    for spec in args.scales.split(","):
        count_text, size_text = spec.split(":")
        count, size = parse_count(count_text), parse_size(size_text)
        db = generated_db(conninfo, admin, count, size)
        rows = scale(db)
        show(f"{count:,} LOs x {format_bytes(size)}", rows)
        if args.profile:
            profile(db)
        if args.profile_without_pages:
            profile(db, pages=False)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("DROP DATABASE pgbd_migrate_bench WITH (FORCE)")


if __name__ == "__main__":
    main()
