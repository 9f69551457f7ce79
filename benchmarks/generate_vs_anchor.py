"""generate vs the server's own set-based statements, side by side in one run.

Anchors (targets.md): one ``SELECT lo_create(id) FROM generate_series(...)`` for empty LOs;
binary COPY into a staging table + ``lo_from_bytea`` for 4 KiB LOs, on one connection and
split over two. pgblobdump runs as a child under /usr/bin/time for its peak RSS, at two
scales each, to show memory stays flat as the count grows.

Usage: .venv/bin/python benchmarks/generate_vs_anchor.py [--major 16] [--quick] [--realistic]

``--realistic``: instead, ``--preset realistic`` (log-normal sizes, mixed content, owners,
ACLs, comments, 5% sparse) at 1,000 and 5,000 LOs, in MB/s and LOs/s beside the 4 KiB
staged ``lo_from_bytea`` anchor of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

import psycopg

from pgblobdump.generate.content import ContentSource
from pgblobdump.generate.spec import Content, SizeSpec
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

PGBLOBDUMP = os.path.join(os.path.dirname(sys.executable), "pgblobdump")


def fresh_db(c: EmbeddedCluster, name: str) -> str:
    with psycopg.connect(c.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return c.conninfo(name)


def anchor_lo_create(db: str, n: int) -> float:
    with psycopg.connect(db, autocommit=True) as conn:
        t = time.perf_counter()
        conn.execute("SELECT count(lo_create(id)) FROM generate_series(1, %s) id", (n,))
        return time.perf_counter() - t


def _stage_and_create(db: str, first: int, n: int, size: int, seed: int) -> None:
    src = ContentSource(SizeSpec(size, size), Content.RANDOM, seed)
    with psycopg.connect(db) as conn:
        conn.execute("CREATE TEMP TABLE stage (o oid, d bytea)")
        with conn.cursor().copy("COPY stage FROM STDIN (FORMAT binary)") as copy:
            copy.set_types(["oid", "bytea"])
            for i in range(first, first + n):
                copy.write_row((i, src.data(size)))
        conn.execute("SELECT count(lo_from_bytea(o, d)) FROM stage")
        conn.commit()


def anchor_lo_from_bytea(db: str, n: int, size: int, connections: int) -> float:
    per = n // connections
    t = time.perf_counter()
    threads = [
        threading.Thread(target=_stage_and_create, args=(db, 1 + i * per, per, size, i))
        for i in range(connections)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t


def run_generate_json(db: str, args: list[str]) -> tuple[float, int, dict[str, object]]:
    """Wall seconds, peak RSS (KiB) and the --json result of a generate child process."""
    fmt = "%e %M"
    proc = subprocess.run(
        ["/usr/bin/time", "-f", fmt, PGBLOBDUMP, "generate", "-d", db, *args, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    wall, rss = proc.stderr.strip().splitlines()[-1].split()
    return float(wall), int(rss), json.loads(proc.stdout)


def run_generate(db: str, args: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of a pgblobdump generate child process."""
    wall, rss, _ = run_generate_json(db, args)
    return wall, rss


def realistic(major: int, quick: bool) -> None:
    """The realistic corpus at two scales beside the 4 KiB anchor, in MB/s and LOs/s."""
    k = 10 if quick else 1
    n4 = 100_000 // k
    rows: list[tuple[str, ...]] = []
    with EmbeddedCluster(major, settings=BENCHMARK_WAL) as c:
        print(f"PostgreSQL {c.tc.version}, {os.cpu_count()} cores", file=sys.stderr)
        a1 = anchor_lo_from_bytea(fresh_db(c, "anchor_r"), n4, 4096, 1)
        mb = n4 * 4096 / 1e6
        rows.append(
            (f"{n4:,} x 4 KiB: COPY stage + lo_from_bytea, 1 conn", f"{a1:.2f}", "",
             f"{mb / a1:.1f}", f"{n4 / a1:,.0f}", "", "")
        )  # fmt: skip
        for n in (1000 // k, 5000 // k):
            db = fresh_db(c, f"gen_r{n}")
            wall, rss, r = run_generate_json(db, ["-n", str(n), "--preset", "realistic"])
            secs = float(r["seconds"])  # type: ignore[arg-type]
            total = int(r["total_bytes"])  # type: ignore[call-overload]
            with psycopg.connect(db) as conn:
                row = conn.execute(
                    "SELECT pg_size_pretty(pg_total_relation_size('pg_largeobject')),"
                    " max(length(lo_get(oid))) FROM pg_largeobject_metadata"
                ).fetchone()
                assert row is not None
            rows.append(
                (f"{n:,} realistic ({total / 1e6:,.0f} MB, {r['sparse']} sparse, largest"
                 f" {row[1] / 1e6:.0f} MB, table {row[0]})", f"{wall:.2f}", f"{rss / 1024:.0f}",
                 f"{total / 1e6 / secs:.1f}", f"{n / secs:,.0f}", f"{secs:.2f}",
                 f"{(total / 1e6 / secs) / (mb / a1):.2f}")
            )  # fmt: skip
    print("| step | wall s | peak RSS MB | MB/s | LOs/s | generate s | MB/s vs anchor |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row_ in rows:
        print("| " + " | ".join(row_) + " |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--major", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="a tenth of the counts")
    ap.add_argument("--realistic", action="store_true", help="the realistic corpus instead")
    a = ap.parse_args()
    if a.realistic:
        realistic(a.major, a.quick)
        return
    k = 10 if a.quick else 1
    empty_big, empty_small = 1_000_000 // k, 100_000 // k
    lo4_big, lo4_small = 100_000 // k, 10_000 // k
    rows: list[tuple[str, str, str, str]] = []
    with EmbeddedCluster(a.major, settings=BENCHMARK_WAL) as c:
        print(f"PostgreSQL {c.tc.version}, {os.cpu_count()} cores", file=sys.stderr)
        anchor = anchor_lo_create(fresh_db(c, "anchor1"), empty_big)
        rows.append((f"{empty_big:,} empty: one lo_create statement", f"{anchor:.2f}", "", "1.00"))
        for n in (empty_small, empty_big):
            wall, rss = run_generate(fresh_db(c, f"gen_e{n}"), ["-n", str(n)])
            ratio = f"{wall / anchor:.2f}" if n == empty_big else ""
            rows.append(
                (f"{n:,} empty: pgblobdump generate", f"{wall:.2f}", f"{rss / 1024:.0f}", ratio)
            )
        a1 = anchor_lo_from_bytea(fresh_db(c, "anchor2"), lo4_big, 4096, 1)
        a2 = anchor_lo_from_bytea(fresh_db(c, "anchor3"), lo4_big, 4096, 2)
        rows.append(
            (f"{lo4_big:,} x 4 KiB: COPY stage + lo_from_bytea, 1 conn", f"{a1:.2f}", "", "1.00")
        )
        rows.append(
            (f"{lo4_big:,} x 4 KiB: the same over 2 conns", f"{a2:.2f}", "", f"{a2 / a1:.2f}")
        )
        full = [
            "--size",
            "4KiB",
            "--table",
            "docs",
            "--owners",
            "3",
            "--grants",
            "0.1",
            "--comments",
            "0.01",
        ]
        for n in (lo4_small, lo4_big):
            wall, rss = run_generate(fresh_db(c, f"gen_f{n}"), ["-n", str(n), *full])
            ratio = f"{wall / a1:.2f}" if n == lo4_big else ""
            rows.append(
                (
                    f"{n:,} x 4 KiB + table, 3 owners, 10% ACL, 1% comments: generate",
                    f"{wall:.2f}",
                    f"{rss / 1024:.0f}",
                    ratio,
                )
            )
    print("| step | wall s | peak RSS MB | ratio to anchor |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
