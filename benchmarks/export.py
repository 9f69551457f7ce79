"""``export`` (issue 40, item 1) against its anchors, side by side in one run on one
embedded PostgreSQL 17 cluster (the 17 wheel), over TCP loopback, into a local directory.

Cases:
- 100k x 4 KiB random LOs (``generate --size 4KiB``): ``pgblobdump export`` (1 and 2
  jobs) against ``pgblobdump dump`` of the same database (1 and 2 jobs; target: export
  within 1.5x) and a psql ``\\lo_export`` loop (one psql session fed a script of
  ``\\lo_export OID 'file'`` lines; target: export at least 20x faster). The loop runs over
  the first ``--loop-n`` LOs only and is extrapolated to the whole by its per-LO time
  (said in the output).
- the realistic corpus (``generate --preset realistic -n N --seed 1``: long-tailed sizes,
  holes): export and dump, 1 and 2 jobs (target: within 1.5x).
- peak RSS of export at two scales of 4 KiB LOs (``--small`` and the 100k): flat.

Every contender is a child process under /usr/bin/time (wall includes start-up); the
output directory is removed between runs, and the file system synced twice
(the removal's own work is not the next contender's). Each export's manifest is checked (its LO
count).

Usage: .venv/bin/python benchmarks/export.py [--n 100000] [--small 10000]
       [--realistic 2000] [--loop-n 5000] [--dir /var/tmp/pgbd-export-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
from scratch import Scratch, say

from pgblobdump.proc import ProcessStats, run_measured
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

MAJOR = 17
PGBLOBDUMP = Path(sys.executable).with_name("pgblobdump")
GNU_TIME = Path("/usr/bin/time")


def _remove(path: Path) -> None:
    """Remove an output and wait for the file system to settle (its writeback, a
    removal of 100k files' journal work), so that the next contender does not pay for
    this one: a sync, then a sync that finds nothing left to do."""
    shutil.rmtree(path, ignore_errors=True)
    os.sync()
    os.sync()


class Bench(Scratch):
    def __init__(self, cluster: EmbeddedCluster, work: Path) -> None:
        super().__init__(cluster)
        self.work = work
        self.psql = toolchain.find(MAJOR, ("psql",)).tool("psql")
        self.rows: list[tuple[str, str, float, float, str]] = []

    def measure(self, argv: list[str], what: str) -> ProcessStats:
        say(f"{what} ...")
        st = run_measured(argv, gnu_time=GNU_TIME, what=what)
        say(f"{what}: {st.wall_s:.2f} s, {st.max_rss_kb / 1024:.0f} MB")
        return st

    def out(self, name: str) -> Path:
        p = self.work / name
        _remove(p)
        return p

    def generate(self, name: str, *args: str) -> str:
        db = self.fresh_db(name)
        subprocess.run([str(PGBLOBDUMP), "generate", "-d", db, *args, "--json"], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE pg_largeobject_metadata, pg_largeobject")
        return db

    def export(self, db: str, jobs: int, n: int, case: str) -> ProcessStats:
        out = self.out("export")
        st = self.measure([str(PGBLOBDUMP), "export", "-d", db, "-o", str(out), "--jobs",
                           str(jobs), "--json"], f"{case}: export --jobs {jobs}")  # fmt: skip
        doc = json.loads((out / "manifest.json").read_text())
        assert doc["los"] == n, (doc["los"], n)
        _remove(out)
        return st

    def dump(self, db: str, jobs: int, case: str) -> ProcessStats:
        out = self.out("dump.pbd")
        st = self.measure([str(PGBLOBDUMP), "dump", "-d", db, "-o", str(out), "--jobs",
                           str(jobs)], f"{case}: dump --jobs {jobs}")  # fmt: skip
        _remove(out)
        return st

    def lo_export_loop(self, db: str, n: int) -> tuple[float, int]:
        """One psql session fed ``\\lo_export`` lines for the first ``n`` LOs: (wall, n)."""
        with psycopg.connect(db) as conn:
            rows = conn.execute(
                "SELECT oid::int8 FROM pg_largeobject_metadata ORDER BY 1 LIMIT %s", (n,)
            ).fetchall()
        oids = [int(r[0]) for r in rows]
        out = self.out("loop")
        out.mkdir()
        script = self.work / "loop.sql"
        script.write_text("".join(f"\\lo_export {o} '{out}/{o}'\n" for o in oids))
        argv = [str(self.psql), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", db, "-f", str(script)]
        st = self.measure(argv, f"psql \\lo_export loop of {len(oids):,}")
        assert sum(1 for _ in out.iterdir()) == len(oids)
        _remove(out)
        return st.wall_s, len(oids)

    def row(self, case: str, step: str, st: ProcessStats | float, ratio: str = "") -> None:
        if isinstance(st, float):
            self.rows.append((case, step, st, 0.0, ratio))
        else:
            self.rows.append((case, step, st.wall_s, st.max_rss_kb / 1024, ratio))

    def four_k(self, n: int, small: int, loop_n: int) -> None:
        case = f"{n:,} x 4 KiB"
        db = self.generate("ex_k4", "-n", str(n), "--size", "4KiB")
        dumps = {j: self.dump(db, j, case) for j in (1, 2)}
        exports = {j: self.export(db, j, n, case) for j in (1, 2)}
        wall, done = self.lo_export_loop(db, loop_n)
        loop = wall * n / done
        for j in (1, 2):
            self.row(case, f"pgblobdump dump --jobs {j}", dumps[j])
        self.row(case, f"psql \\lo_export loop, {done:,} LOs x {n / done:g} (extrapolated)", loop)
        for j in (1, 2):
            e = exports[j]
            self.row(case, f"pgblobdump export --jobs {j}", e,
                     f"**{e.wall_s / dumps[j].wall_s:.2f}x** dump --jobs {j};"
                     f" loop / export = **{loop / e.wall_s:.0f}x**")  # fmt: skip
        sdb = self.generate("ex_k4s", "-n", str(small), "--size", "4KiB")
        s = self.export(sdb, 1, small, f"{small:,} x 4 KiB")
        self.row(f"{small:,} x 4 KiB", "pgblobdump export --jobs 1", s,
                 f"peak RSS {s.max_rss_kb / 1024:.0f} MB here,"
                 f" {exports[1].max_rss_kb / 1024:.0f} MB at {n:,}")  # fmt: skip
        self.drop_db("ex_k4s")
        self.drop_db("ex_k4")

    def realistic(self, n: int) -> None:
        case = f"realistic, {n:,} LOs"
        db = self.generate("ex_real", "-n", str(n), "--preset", "realistic", "--seed", "1")
        with psycopg.connect(db) as conn:
            row = conn.execute("SELECT count(*), sum(octet_length(data))"
                               " FROM pg_largeobject").fetchone()  # fmt: skip
        assert row is not None
        say(f"{case}: {row[0]:,} pages, {int(row[1] or 0) / 2**20:,.0f} MiB stored")
        los = self.lo_count(db)
        for j in (1, 2):
            d = self.dump(db, j, case)
            e = self.export(db, j, los, case)
            self.row(case, f"pgblobdump dump --jobs {j}", d)
            self.row(case, f"pgblobdump export --jobs {j}", e,
                     f"**{e.wall_s / d.wall_s:.2f}x** dump --jobs {j}")  # fmt: skip
        self.drop_db("ex_real")

    def table(self) -> str:
        lines = ["| case | step | wall s | peak RSS MB | ratio |", "|---|---|---|---|---|"]
        for case, step, wall, rss, ratio in self.rows:
            lines.append(f"| {case} | {step} | {wall:.2f} | {rss:.0f} | {ratio} |")
        return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--small", type=int, default=10_000)
    ap.add_argument("--realistic", type=int, default=2000)
    ap.add_argument("--loop-n", type=int, default=5000)
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/pgbd-export-bench"))
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    with EmbeddedCluster(MAJOR, settings=BENCHMARK_WAL) as c:
        b = Bench(c, a.dir)
        b.four_k(a.n, a.small, a.loop_n)
        if a.realistic:
            b.realistic(a.realistic)
    print(b.table())


if __name__ == "__main__":
    main()
