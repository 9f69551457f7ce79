"""What migrate's access checks cost, beside the verify pass they ride along with.

On one table of N LOs (``pgblobdump generate --table t``), in one run:
- ``verify`` (the anchor): one ``lo_get`` per row compared on the server, what migrate's
  verify pass does;
- ``access check, nothing widens``: ``access.widening`` when no role may read the column
  but not the LOs (one pass over pg_largeobject_metadata, grouped by owner and ACL);
- ``access check, all widen``: the same after ``GRANT SELECT ON t`` to a login role that
  may read none of the LOs (the column is joined to find and name them);
- ``in-place write scan``: finish's search for LO pages written after the verify pass
  (one pass over pg_largeobject's tuple headers).

Usage: .venv/bin/python benchmarks/migrate_access_cost.py [--major 17] [--count 1M] [--size 256]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import psycopg
from psycopg import sql

from pgblobdump.migrate.reach import access as access
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster
from pgblobdump.units import parse_count, parse_size

ROLE = "pgbd_bench_reader"


def timed(work: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        work()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--major", type=int, default=17)
    ap.add_argument("--count", default="1M")
    ap.add_argument("--size", default="256")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    count, size = parse_count(a.count), parse_size(a.size)
    with EmbeddedCluster(a.major, settings=BENCHMARK_WAL) as c:
        with psycopg.connect(c.conninfo(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE access_cost")
        db = c.conninfo("access_cost")
        subprocess.run(
            [sys.executable, "-m", "pgblobdump", "generate", "-d", db, "-n", str(count),
             "--size", str(size), "--table", "t"],
            check=True, capture_output=True,
        )  # fmt: skip
        with psycopg.connect(db, autocommit=True) as conn:
            relid = int(conn.execute("SELECT 't'::regclass::oid").fetchone()[0])  # type: ignore[index]
            column = sql.SQL("SELECT lo AS o FROM t")

            def verify() -> object:
                return conn.execute("SELECT count(*) FROM t WHERE lo_get(lo) IS NULL").fetchone()

            def check() -> object:
                return access.widening(conn, relid, "lo", column)

            def scan() -> object:
                return conn.execute(
                    "SELECT count(DISTINCT loid) FROM pg_largeobject WHERE age(xmin) <= 1000"
                ).fetchone()

            rows = [("verify (anchor)", timed(verify, a.repeat))]
            rows.append(("access check, nothing widens", timed(check, a.repeat)))
            rows.append(("in-place write scan", timed(scan, a.repeat)))
            conn.execute(f"DROP ROLE IF EXISTS {ROLE}")
            conn.execute(f"CREATE ROLE {ROLE} LOGIN")
            conn.execute(f"GRANT SELECT ON t TO {ROLE}")
            rows.append(("access check, all widen", timed(check, a.repeat)))
            conn.execute(f"REVOKE SELECT ON t FROM {ROLE}")
            conn.execute(f"DROP ROLE {ROLE}")
    anchor = rows[0][1]
    print(f"PostgreSQL {a.major}, {count:,} LOs x {size:,} B, median of {a.repeat}\n")
    print("| step | seconds | x verify |\n|---|---:|---:|")
    for name, s in rows:
        print(f"| {name} | {s:.2f} | {s / anchor:.2f} |")


if __name__ == "__main__":
    main()
