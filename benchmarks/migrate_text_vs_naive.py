"""migrate run --to text vs the naive one-statement UPDATE, side by side in one run.

A text column of CLOB OIDs (Hibernate's ``@Lob String`` through pgjdbc: each value an LO's
OID as digits) becomes the CLOBs' text. For each scale, N LOs of text are made once with
``pgblobdump generate --table src --content text``; each contender then works on its own
copy ``t (id bigint PRIMARY KEY, c text)`` holding ``src.lo::text``, so all read the same
LOs:

- ``UPDATE``: ``UPDATE t SET c = convert_from(lo_get(c::oid), 'UTF8')``, one statement
  (issue 37's anchor: migrate within 1.5x of it). It locks every row for as long as it
  runs, and fails whole on the first value that is not an OID or the first LO that is not
  UTF-8.
- ``migrate``: ``pgblobdump migrate run t.c --to text`` as a child under /usr/bin/time
  (peak RSS): checks, the new column filled in primary-key batches, every row verified,
  the switch, the old column dropped.
- ``migrate --in-place``: the one-statement rewrite under ACCESS EXCLUSIVE, verified.

The contenders run in turns, ``--rounds`` times (the machine may be shared: the spread
shows), and the ratio is taken of each contender's fastest round. ``--profile`` adds an
in-process ``migrate run`` on a fresh copy with each statement timed.

Usage: .venv/bin/python benchmarks/migrate_text_vs_naive.py [--major 17] [--scales 100k,1M]
       [--size 1KiB] [--rounds 2] [--profile] [--dsn DSN (a running server instead)]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from migrate_vs_naive import copy_table as copy_rows
from migrate_vs_naive import lsn, statement_times
from migrate_vs_naive import migrate as migrate_timed
from scratch import on_server

from pgblobdump.migrate import RunOptions
from pgblobdump.migrate import run as migrate_run
from pgblobdump.units import format_bytes, parse_count, parse_size

PGBLOBDUMP = os.path.join(os.path.dirname(sys.executable), "pgblobdump")
TARGET = 1.5
"""migrate --to text within this many times the naive UPDATE (issue 37)."""
DB = "pgbd_migrate_text_bench"


@dataclass
class Row:
    contender: str
    seconds: list[float] = field(default_factory=list)
    wal: int = 0
    lock: str = ""
    rss_kib: int | None = None

    @property
    def best(self) -> float:
        return min(self.seconds)


def copy_table(db: str) -> None:
    """``t``: each CLOB's OID as digits, as Hibernate's ``@Lob String`` stores it."""
    copy_rows(db, "SELECT id, lo::text AS c FROM src")


Work = Callable[[psycopg.Connection], tuple[str, int | None]]


def measure(db: str, row: Row, work: Work) -> None:
    copy_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        w0 = lsn(conn)
        t0 = time.perf_counter()
        lock, rss = work(conn)
        row.seconds.append(time.perf_counter() - t0)
        row.wal = lsn(conn) - w0
        wrong = conn.execute(
            "SELECT count(*) FROM t JOIN src USING (id)"
            " WHERE t.c IS DISTINCT FROM convert_from(lo_get(src.lo), 'UTF8')"
        ).fetchone()
        assert wrong is not None and wrong[0] == 0, f"{row.contender}: {wrong} rows wrong"
    row.lock, row.rss_kib = lock, rss


def naive(conn: psycopg.Connection) -> tuple[str, int | None]:
    t0 = time.perf_counter()
    conn.execute("UPDATE t SET c = convert_from(lo_get(c::oid), 'UTF8')")
    return f"row locks on every row {time.perf_counter() - t0:.2f} s", None


def migrate(db: str, *extra: str) -> Work:
    return migrate_timed(db, "--to", "text", *extra, column="t.c")


def profile(db: str, top: int = 10) -> None:
    copy_table(db)
    with statement_times() as stats, psycopg.connect(db, autocommit=True) as conn:
        t0 = time.perf_counter()
        migrate_run(conn, "t.c", RunOptions(to="text"))
        total = time.perf_counter() - t0
    print(f"\nProfile of one in-process `migrate run --to text` ({total:.2f} s), statements"
          " by time:\n")  # fmt: skip
    print("| seconds | calls | statement |")
    print("|---:|---:|---|")
    for text, (calls, secs) in sorted(stats.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {secs:.2f} | {calls:.0f} | `{text.replace('|', '/')}` |")


def generated_db(conninfo: Callable[[str], str], admin: str, count: int, size: int) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    db = conninfo(DB)
    t0 = time.perf_counter()
    subprocess.run(
        [PGBLOBDUMP, "generate", "-d", db, "-n", str(count), "--size", str(size), "--content",
         "text", "--table", "src", "--json"],
        check=True, capture_output=True,
    )  # fmt: skip
    print(f"  generated {count:,} x {format_bytes(size)} in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)  # fmt: skip
    return db


def scale(db: str, rounds: int) -> list[Row]:
    contenders: list[tuple[Row, Work]] = [
        (Row("UPDATE"), naive),
        (Row("migrate --to text"), migrate(db)),
        (Row("migrate --to text --in-place"), migrate(db, "--in-place")),
    ]
    for i in range(rounds):
        for row, work in contenders:
            measure(db, row, work)
            print(f"  round {i + 1}: {row.contender} {row.seconds[-1]:.2f} s", file=sys.stderr)
    return [row for row, _ in contenders]


def show(title: str, rows: list[Row]) -> None:
    base = rows[0].best
    print(f"\n### {title}\n")
    print("| contender | seconds (each round) | best x UPDATE | WAL | lock blocking writers"
          " | peak RSS |")  # fmt: skip
    print("|---|---:|---:|---:|---|---:|")
    for r in rows:
        rss = f"{r.rss_kib / 1024:.0f} MB" if r.rss_kib else ""
        each = ", ".join(f"{s:.2f}" for s in r.seconds)
        print(f"| {r.contender} | {each} | {r.best / base:.2f} | {format_bytes(r.wal)}"
              f" | {r.lock} | {rss} |")  # fmt: skip
    ratio = rows[1].best / base
    print(f"\nmigrate --to text / UPDATE = **{ratio:.2f}x** (target {TARGET}x:"
          f" {'met' if ratio <= TARGET else 'missed'})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--major", type=int, default=17)
    ap.add_argument("--scales", default="100k,1M", help="COUNT,...")
    ap.add_argument("--size", default="1KiB", help="each CLOB's size")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="also time migrate's statements")
    ap.add_argument("--dsn", help="an existing server (its database is the admin one)")
    args = ap.parse_args()
    on_server(args.dsn, args.major, lambda admin, conninfo: run_scales(args, admin, conninfo))


def run_scales(args: argparse.Namespace, admin: str, conninfo: Callable[[str], str]) -> None:
    size = parse_size(args.size)
    for text in args.scales.split(","):
        count = parse_count(text)
        db = generated_db(conninfo, admin, count, size)
        rows = scale(db, args.rounds)
        show(f"{count:,} CLOBs x {format_bytes(size)}", rows)
        if args.profile:
            profile(db)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {DB} WITH (FORCE)")


if __name__ == "__main__":
    main()
