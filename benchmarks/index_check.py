"""What checking ``index.pbi`` against the manifest costs a restore (issue 36, item 7):
``restore DIR`` of ``--n`` empty LOs (default 100k) timed ``--repeat`` times into fresh
databases, and the whole-index check alone at ``--big`` LOs (default 1M; 0 leaves it out),
in-process, with its peak memory (tracemalloc: the check reads 1 MiB at a time).

Run it on the code before and after the check, one embedded PostgreSQL 17 cluster each,
TCP loopback; restores run as children (wall includes Python's start-up) and report
their own ``seconds`` (``--json``) too.

Usage: .venv/bin/python benchmarks/index_check.py [--n 100000] [--big 1000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import xxhash
from scratch import Scratch, say

from pgblobdump.packed.read import source
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

PGBLOBDUMP = Path(sys.executable).with_name("pgblobdump")


def empty_los(dsn: str, n: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT count(lo_create(o::oid)) FROM generate_series(100000, %s) o",
                     (100000 + n - 1,))  # fmt: skip


def dump(src: str, out: Path) -> None:
    subprocess.run(
        [str(PGBLOBDUMP), "dump", "-d", src, "-o", str(out), "-q"],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def restores(bench: Scratch, archive: Path, repeat: int) -> tuple[list[float], list[float]]:
    """(wall, own seconds) of each restore of ``archive`` into a fresh database."""
    walls, owns = [], []
    for _ in range(repeat):
        dsn = bench.fresh_db("dst")
        t = time.perf_counter()
        out = subprocess.run([str(PGBLOBDUMP), "restore", str(archive), "-d", dsn, "--json",
                              "-q"], check=True, capture_output=True)  # fmt: skip
        walls.append(time.perf_counter() - t)
        owns.append(float(json.loads(out.stdout)["seconds"]))
    return walls, owns


def check_alone(archive: Path) -> tuple[float, float, int]:
    """(seconds, peak MiB, index bytes) of the whole-index check, in-process; on code
    without the check, of the same pass written out (xxh3-128 in 1 MiB reads)."""
    a = source.directory(str(archive))
    check = getattr(a, "check_index", None)
    tracemalloc.start()
    t = time.perf_counter()
    if check is not None:
        check()
    else:
        h = xxhash.xxh3_128()
        with a.storage.open("index.pbi") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    took = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return took, peak / (1 << 20), (archive / "index.pbi").stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, EmbeddedCluster(17, settings=BENCHMARK_WAL) as cluster:
        bench = Scratch(cluster)
        work = Path(d)
        src = bench.fresh_db("src")
        say(f"{args.n:,} empty LOs, dump ...")
        empty_los(src, args.n)
        dump(src, work / "a")
        walls, owns = restores(bench, work / "a", args.repeat)
        took, peak, size = check_alone(work / "a")
        print(f"restore of {args.n:,} empty LOs, {args.repeat} runs: wall median"
              f" {statistics.median(walls):.3f} s (min {min(walls):.3f}), own median"
              f" {statistics.median(owns):.3f} s (min {min(owns):.3f});"
              f" index {size:,} bytes, checked whole in {took * 1000:.1f} ms")  # fmt: skip
        if args.big:
            big = bench.fresh_db("big")
            say(f"{args.big:,} empty LOs, dump ...")
            empty_los(big, args.big)
            dump(big, work / "b")
            took, peak, size = check_alone(work / "b")
            print(f"index of {args.big:,} LOs: {size:,} bytes, checked whole in"
                  f" {took * 1000:.1f} ms, peak {peak:.2f} MiB traced")  # fmt: skip


if __name__ == "__main__":
    main()
