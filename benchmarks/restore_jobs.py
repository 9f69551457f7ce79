"""``restore --jobs N`` (issue 27, item 3) against its anchors, side by side in one run on
one embedded PostgreSQL 17 cluster (the 17 wheel), TCP loopback.

Cases:
- empty LOs at ``--small`` (100k) and ``--n`` (1M): ``pgblobdump restore`` with 1 and 2
  jobs (peak RSS at both counts: memory flat), the server's own rate (``SELECT
  count(lo_create(o)) FROM unnest(%b::oid[]) o`` in batches of 50,000, on one connection
  and split over two, in-process), and pg_restore 17 of a ``pg_dump 17 -Fc`` archive (one
  job, ``-j 2 --transaction-size 1000``) at ``--pg-restore-n`` LOs (default ``--n``; at a
  smaller count its time is scaled per LO to ``--n``, and the table says so).
- 100k random 4 KiB LOs (``--n4``): ``restore`` with 1 and 2 jobs against binary COPY into
  a staging table + ``SELECT lo_from_bytea(o, d) FROM stage`` split over 2 connections
  (in-process, the data made before the clock starts), then ``verify DIR -d`` of the
  ``--jobs 2`` restore.

pgblobdump and pg_restore run as children under ``/usr/bin/time`` (wall, peak RSS); their
wall includes start-up (Python imports for pgblobdump). Every restore is checked (LO count).

Usage: .venv/bin/python benchmarks/restore_jobs.py [--n 1000000] [--small 100000]
       [--n4 100000] [--pg-restore-n N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
from scratch import Scratch, say

import pgblobdump
from pgblobdump.pg.arrays import oid_array
from pgblobdump.proc import ProcessStats, run_measured
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

MAJOR = 17
PGBLOBDUMP = Path(sys.executable).with_name("pgblobdump")
GNU_TIME = Path("/usr/bin/time")
BATCH = 50_000
BLOCK = 4096


def code_version() -> str:
    root = Path(pgblobdump.__file__).resolve().parent.parent
    git = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return f"pgblobdump from {root}" + (f" ({git.stdout.strip()})" if git.returncode == 0 else "")


class Bench(Scratch):
    def __init__(self, cluster: EmbeddedCluster, work: Path) -> None:
        super().__init__(cluster)
        self.work = work
        tc = toolchain.find(MAJOR, ("pg_dump", "pg_restore"))
        self.pg_dump = tc.tool("pg_dump")
        self.pg_restore = tc.tool("pg_restore")
        self.rows: list[tuple[str, str, float, float | None, str]] = []
        self.verdicts: list[str] = []

    def check_count(self, dsn: str, want: int, what: str) -> None:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        if not row or row[0] != want:
            raise SystemExit(f"{what}: {row[0] if row else 0:,} LOs in the target, not {want:,}")

    def measure(self, argv: list[str | Path], what: str) -> ProcessStats:
        say(f"{what} ...")
        st = run_measured([str(x) for x in argv], gnu_time=GNU_TIME, what=what)
        say(f"{what}: {st.wall_s:.2f} s, {st.max_rss_kb / 1024:.0f} MB")
        return st

    def row(
        self, case: str, step: str, wall: float, rss: float | None = None, ratio: str = ""
    ) -> None:
        self.rows.append((case, step, wall, rss, ratio))

    def generate(self, dsn: str, n: int, *extra: str) -> None:
        say(f"generate {n:,} {' '.join(extra)} ...")
        subprocess.run(
            [str(PGBLOBDUMP), "generate", "-d", dsn, "-n", str(n), *extra, "--json"],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def dump(self, src: str, out: Path) -> None:
        say(f"dump -> {out.name} ...")
        subprocess.run(
            [str(PGBLOBDUMP), "dump", "-d", src, "-o", str(out), "--json"],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    def restore(self, case: str, archive: Path, n: int, jobs: int) -> ProcessStats:
        dsn = self.fresh_db("dst")
        st = self.measure(
            [PGBLOBDUMP, "restore", archive, "-d", dsn, "--jobs", str(jobs), "--json"],
            f"{case}: restore --jobs {jobs}",
        )
        self.check_count(dsn, n, f"{case}: restore --jobs {jobs}")
        return st

    def anchor_lo_create(self, n: int, connections: int) -> float:
        dsn = self.fresh_db("anc")
        oids = list(range(16384, 16384 + n))
        cuts = [oids[k * n // connections : (k + 1) * n // connections] for k in range(connections)]

        def part(mine: list[int]) -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for i in range(0, len(mine), BATCH):
                    with conn.transaction():
                        conn.execute(
                            "SELECT count(lo_create(o)) FROM unnest(%s::oid[]) o",
                            (oid_array(mine[i : i + BATCH]),),
                        )

        t = time.perf_counter()
        threads = [threading.Thread(target=part, args=(c,)) for c in cuts]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.perf_counter() - t
        self.check_count(dsn, n, "anchor lo_create")
        self.drop_db("anc")
        return wall

    def anchor_staged(self, n: int, connections: int = 2) -> float:
        dsn = self.fresh_db("anc")
        pool = [os.urandom(BLOCK) for _ in range(1024)]  # made before the clock starts
        errors: list[BaseException] = []

        def part(k: int) -> None:
            try:
                with psycopg.connect(dsn) as conn:
                    conn.execute("CREATE TEMP TABLE stage (o oid, d bytea)")
                    with conn.cursor().copy("COPY stage FROM STDIN (FORMAT binary)") as copy:
                        copy.set_types(["oid", "bytea"])
                        for i in range(k, n, connections):
                            copy.write_row((16384 + i, pool[i % len(pool)]))
                    conn.execute("SELECT count(lo_from_bytea(o, d)) FROM stage")
                    conn.commit()
            except BaseException as e:
                errors.append(e)

        t = time.perf_counter()
        threads = [threading.Thread(target=part, args=(k,)) for k in range(connections)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        if errors:
            raise errors[0]
        wall = time.perf_counter() - t
        self.check_count(dsn, n, "anchor staged lo_from_bytea")
        self.drop_db("anc")
        return wall

    def pg_restores(self, n: int) -> tuple[float, float]:
        """pg_restore 17 one job and ``-j 2 --transaction-size 1000`` of ``n`` empty LOs."""
        src = self.fresh_db("pgsrc")
        self.generate(src, n)
        fc = self.work / f"e{n}.dump"
        self.measure([self.pg_dump, "-Fc", "-f", fc, "-d", src], f"{n:,} empty: pg_dump -Fc")
        self.drop_db("pgsrc")
        walls = []
        for opts in ([], ["-j", "2", "--transaction-size", "1000"]):
            dsn = self.fresh_db("pgdst")
            label = f"{n:,} empty: pg_restore {MAJOR} {' '.join(opts) or '1 job'}"
            st = self.measure([self.pg_restore, *opts, "-d", dsn, fc], label)
            self.check_count(dsn, n, label)
            walls.append(st.wall_s)
        self.drop_db("pgdst")
        fc.unlink()
        return walls[0], walls[1]

    # -- cases ------------------------------------------------------------------------
    def empty(self, n: int) -> dict[str, float]:
        case = f"{n:,} empty"
        src = self.fresh_db("src")
        self.generate(src, n)
        archive = self.work / f"e{n}.pbd"
        self.dump(src, archive)
        self.drop_db("src")
        w: dict[str, float] = {}
        for c in (1, 2):
            w[f"anchor_{c}"] = self.anchor_lo_create(n, c)
            say(f"{case}: lo_create over oid[] on {c} connection(s) {w[f'anchor_{c}']:.2f} s")
        for jobs in (1, 2):
            st = self.restore(case, archive, n, jobs)
            w[f"j{jobs}"], w[f"rss_j{jobs}"] = st.wall_s, st.max_rss_kb / 1024
        shutil.rmtree(archive)
        self.row(case, "server: lo_create over unnest(oid[]), 1 connection", w["anchor_1"])
        self.row(case, "server: the same split over 2 connections", w["anchor_2"])
        for jobs in (1, 2):
            self.row(
                case,
                f"pgblobdump restore --jobs {jobs}",
                w[f"j{jobs}"],
                w[f"rss_j{jobs}"],
                f"{w[f'j{jobs}'] / w['anchor_2']:.2f}x the 2-connection server rate",
            )
        return w

    def four_k(self, n: int) -> dict[str, float]:
        case = f"{n:,} x 4 KiB random"
        src = self.fresh_db("src")
        self.generate(src, n, "--size", "4KiB", "--content", "random")
        archive = self.work / f"k{n}.pbd"
        self.dump(src, archive)
        self.drop_db("src")
        w = {"anchor": self.anchor_staged(n, 2)}
        say(f"{case}: staged lo_from_bytea over 2 connections {w['anchor']:.2f} s")
        for jobs in (1, 2):
            st = self.restore(case, archive, n, jobs)
            w[f"j{jobs}"], w[f"rss_j{jobs}"] = st.wall_s, st.max_rss_kb / 1024
        dsn = self.dsn("dst")  # the --jobs 2 restore's target, still there
        v = self.measure([PGBLOBDUMP, "verify", archive, "-d", dsn], f"{case}: verify -d")
        shutil.rmtree(archive)
        self.drop_db("dst")
        a = w["anchor"]
        self.row(
            case, "anchor: COPY stage + lo_from_bytea, 2 connections (in-process)", a, None, "1.00"
        )
        for jobs in (1, 2):
            self.row(
                case,
                f"pgblobdump restore --jobs {jobs}",
                w[f"j{jobs}"],
                w[f"rss_j{jobs}"],
                f"**{w[f'j{jobs}'] / a:.2f}x the anchor**",
            )
        self.row(
            case, "pgblobdump verify DIR -d (after --jobs 2: equal)", v.wall_s, v.max_rss_kb / 1024
        )
        return w


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="empty LOs (the target's count)")
    ap.add_argument("--small", type=int, default=100_000, help="empty LOs, for memory flat")
    ap.add_argument("--n4", type=int, default=100_000, help="random 4 KiB LOs")
    ap.add_argument("--pg-restore-n", type=int, help="empty LOs pg_restore restores (--n)")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    a = ap.parse_args()
    pn = a.pg_restore_n or a.n
    work = a.keep or Path(tempfile.mkdtemp(prefix="pgbd-rjobs-bench-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        with EmbeddedCluster(MAJOR, settings=BENCHMARK_WAL) as c:
            b = Bench(c, work)
            head = (
                f"PostgreSQL {c.tc.version} ({c.tc.source}), pg_restore"
                f" {toolchain.find(MAJOR, ('pg_restore',)).version}, {os.cpu_count()} cores,"
                f" {datetime.date.today().isoformat()}; {code_version()}"
            )
            say(head)
            small = b.empty(a.small)
            big = b.empty(a.n)
            k4 = b.four_k(a.n4)
            r1, r2 = b.pg_restores(pn)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    scale = a.n / pn
    case = f"{a.n:,} empty"
    note = "" if pn == a.n else f" (measured at {pn:,} LOs, x{scale:g} per LO)"
    r1, r2 = r1 * scale, r2 * scale
    b.row(case, f"pg_restore {MAJOR}, 1 job{note}", r1)
    b.row(case, f"pg_restore {MAJOR} -j 2 --transaction-size 1000{note}", r2)
    print(head)
    print()
    print("| case | step | wall s | peak RSS MB | ratio |")
    print("|---|---|---:|---:|---|")
    for row_case, step, wall, rss, ratio in b.rows:
        print(
            f"| {row_case} | {step} | {wall:.2f} | {'' if rss is None else f'{rss:.0f}'}"
            f" | {ratio} |"
        )
    print()

    def verdict(ok: bool, text: str) -> None:
        print(f"- {'met' if ok else '**missed**'}: {text}")

    j2, j1 = big["j2"], big["j1"]
    verdict(
        r2 / j2 >= 30,
        f"{a.n:,} empty, restore --jobs 2 >= 30x pg_restore -j 2"
        f" --transaction-size 1000: {r2 / j2:.1f}x (--jobs 1: {r2 / j1:.1f}x){note}",
    )
    verdict(
        r1 / j2 >= 100,
        f"{a.n:,} empty, restore --jobs 2 >= 100x pg_restore one job:"
        f" {r1 / j2:.1f}x (--jobs 1: {r1 / j1:.1f}x){note}",
    )
    verdict(
        k4["j2"] <= k4["anchor"],
        f"{a.n4:,} x 4 KiB, restore --jobs 2 within 1.0x of"
        f" the 2-connection staged lo_from_bytea: {k4['j2'] / k4['anchor']:.2f}x"
        f" (--jobs 1: {k4['j1'] / k4['anchor']:.2f}x)",
    )
    grow = big["rss_j2"] / small["rss_j2"]
    verdict(
        grow <= 1.25,
        f"memory flat, restore --jobs 2 peak RSS {small['rss_j2']:.0f} MB at"
        f" {a.small:,} and {big['rss_j2']:.0f} MB at {a.n:,} ({grow:.2f}x)",
    )
    print(
        f"- --jobs 2 / --jobs 1: {a.n:,} empty {j2 / j1:.2f}, {a.n4:,} x 4 KiB"
        f" {k4['j2'] / k4['j1']:.2f}; the server's own 2-connection / 1-connection"
        f" lo_create: {big['anchor_2'] / big['anchor_1']:.2f}"
    )


if __name__ == "__main__":
    main()
