"""copy and sync database to database (issue 28) against their anchors, side by side in
one run on one embedded PostgreSQL 17 cluster (the 17 wheel), over TCP loopback.

Cases (``--quick``: the empty case at 100k instead of 1M):
- 1M empty LOs: ``pgblobdump copy`` (1 and 2 jobs) against ``pgblobdump dump -o - |
  pgblobdump restore -`` and ``pg_dump 17 -Fc | pg_restore 17`` (one job, through a pipe)
  into fresh databases; target: no slower than the first, at least 100x the second.
- 100k x 4 KiB random LOs: ``copy`` (1 and 2 jobs) against the lo_get COPY read to
  nowhere and the two-connection staged ``lo_from_bytea`` (target: within 1.5x of the
  slower); then ``sync`` with nothing changed (target: at most 10% of the full copy) and
  with 1% changed, every kind of change (target: at most 15%).

Every contender is a child process under /usr/bin/time (wall includes start-up); anchors
run in this process. Targets are checked for equality after each run (LO counts; the
sync cases by ``sync --dry-run`` finding nothing left to do).

Usage: .venv/bin/python benchmarks/copy_sync.py [--quick]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from scratch import Scratch, say

from pgblobdump.proc import ProcessStats, run_measured
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

MAJOR = 17
PGBLOBDUMP = Path(sys.executable).with_name("pgblobdump")
GNU_TIME = Path("/usr/bin/time")
BLOCK = 4096
PIPE = "\\|"
"""A ``|`` inside a Markdown table cell."""


class Bench(Scratch):
    def __init__(self, cluster: EmbeddedCluster) -> None:
        super().__init__(cluster)
        tc = toolchain.find(MAJOR, ("pg_dump", "pg_restore"))
        self.pg_dump = tc.tool("pg_dump")
        self.pg_restore = tc.tool("pg_restore")
        self.rows: list[tuple[str, str, float, float, str]] = []

    def measure(self, argv: list[str], what: str) -> ProcessStats:
        say(f"{what} ...")
        st = run_measured(argv, gnu_time=GNU_TIME, what=what)
        say(f"{what}: {st.wall_s:.2f} s, {st.max_rss_kb / 1024:.0f} MB")
        return st

    def shell(self, cmd: str, what: str) -> ProcessStats:
        return self.measure(["/bin/bash", "-o", "pipefail", "-c", cmd], what)

    def row(self, case: str, step: str, wall: float, rss_mb: float = 0.0, ratio: str = "") -> None:
        self.rows.append((case, step, wall, rss_mb, ratio))

    # -- 1M empty -------------------------------------------------------------------------
    def empty(self, n: int) -> None:
        case = f"{n:,} empty"
        src = self.fresh_db("cs_src")
        with psycopg.connect(src, autocommit=True) as conn:
            conn.execute("SELECT count(lo_create(g::oid)) FROM generate_series(100000, %s) g",
                         (100_000 + n - 1,))  # fmt: skip
            conn.execute("VACUUM ANALYZE pg_largeobject_metadata")
        walls: dict[str, float] = {}
        for jobs in (1, 2):
            dst = self.fresh_db("cs_dst")
            st = self.measure([str(PGBLOBDUMP), "copy", "-d", src, "--target-dbname", dst,
                               "--jobs", str(jobs), "--json"], f"copy --jobs {jobs}")  # fmt: skip
            assert self.lo_count(dst) == n
            walls[f"copy {jobs}"] = st.wall_s
            self.row(case, f"pgblobdump copy --jobs {jobs}", st.wall_s, st.max_rss_kb / 1024)
        dst = self.fresh_db("cs_dst")
        pipe = f"'{PGBLOBDUMP}' dump -d '{src}' -o - | '{PGBLOBDUMP}' restore - -d '{dst}' --json"
        st = self.shell(pipe, "dump -o - | restore -")
        assert self.lo_count(dst) == n
        walls["pipe"] = st.wall_s
        self.row(case, "pgblobdump dump -o - | pgblobdump restore -", st.wall_s,
                 st.max_rss_kb / 1024)  # fmt: skip
        dst = self.fresh_db("cs_dst")
        pg = f"'{self.pg_dump}' -Fc -d '{src}' | '{self.pg_restore}' -d '{dst}'"
        st = self.shell(pg, "pg_dump -Fc | pg_restore")
        assert self.lo_count(dst) == n
        walls["pg"] = st.wall_s
        self.row(case, f"pg_dump {MAJOR} -Fc | pg_restore {MAJOR}", st.wall_s, st.max_rss_kb / 1024)
        for i, (_c, step, wall, rss, _r) in enumerate(self.rows):
            if step.startswith("pgblobdump copy") and _c == case:
                ratio = (f"**{wall / walls['pipe']:.2f}x** the pipe; pg_dump{PIPE}pg_restore"
                         f" / copy = **{walls['pg'] / wall:.0f}x**")  # fmt: skip
                self.rows[i] = (_c, step, wall, rss, ratio)

    # -- 100k x 4 KiB ---------------------------------------------------------------------
    def four_k(self, n: int) -> None:
        case = f"{n:,} x 4 KiB"
        src = self.fresh_db("cs_src")
        subprocess.run([str(PGBLOBDUMP), "generate", "-d", src, "-n", str(n), "--size", "4KiB",
                        "--json"], check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        with psycopg.connect(src, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE pg_largeobject_metadata, pg_largeobject")
            oids = [int(r[0]) for r in conn.execute(
                "SELECT oid::int8 FROM pg_largeobject_metadata ORDER BY 1")]  # fmt: skip
        a_get = self.anchor_lo_get(src)
        self.row(case, "anchor: COPY oid, lo_get(oid) read to nowhere (in-process)", a_get)
        dst = self.fresh_db("cs_dst")
        a_put = self.anchor_lo_from_bytea(dst, oids)
        self.row(case, "anchor: COPY stage + lo_from_bytea, 2 connections (in-process)", a_put)
        slower = max(a_get, a_put)
        full = 0.0
        for jobs in (1, 2):
            dst = self.fresh_db("cs_dst")
            st = self.measure([str(PGBLOBDUMP), "copy", "-d", src, "--target-dbname", dst,
                               "--jobs", str(jobs), "--json"], f"copy --jobs {jobs}")  # fmt: skip
            assert self.lo_count(dst) == n
            full = st.wall_s if jobs == 1 else full
            self.row(case, f"pgblobdump copy --jobs {jobs}", st.wall_s, st.max_rss_kb / 1024,
                     f"**{st.wall_s / slower:.2f}x** the slower anchor")  # fmt: skip
        dst = self.fresh_db("cs_dst")  # the sync cases start from a copy with one job
        self.measure([str(PGBLOBDUMP), "copy", "-d", src, "--target-dbname", dst], "copy again")
        sync = [str(PGBLOBDUMP), "sync", "-d", src, "--target-dbname", dst, "--delete", "--json"]
        st = self.measure(sync, "sync, nothing changed")
        self.row(case, "pgblobdump sync, nothing changed", st.wall_s, st.max_rss_kb / 1024,
                 f"**{st.wall_s / full:.1%}** of the full copy (one job)")  # fmt: skip
        self.change_one_percent(src, oids)
        st = self.measure(sync, "sync, 1% changed")
        self.row(case, "pgblobdump sync, 1% changed (every kind)", st.wall_s,
                 st.max_rss_kb / 1024,
                 f"**{st.wall_s / full:.1%}** of the full copy (one job)")  # fmt: skip
        left = subprocess.run([str(PGBLOBDUMP), "sync", "-d", src, "--target-dbname", dst,
                               "--dry-run", "--delete", "--json"], capture_output=True, text=True,
                              check=True)  # fmt: skip
        assert json.loads(left.stdout) == [], left.stdout[:500]

    def change_one_percent(self, src: str, oids: list[int]) -> None:
        """1% of the LOs changed, a tenth each: written in place, appended, truncated,
        unlinked and made again, new owner, new ACL, new comment, removed, new ones."""
        n = len(oids)
        k = n // 1000  # 0.1% per kind, 10 kinds
        kinds = [
            "SELECT count(lo_put(o::oid, 100, 'in place')) FROM unnest(%(o)s::int8[]) o",
            "SELECT count(lo_put(o::oid, 4096, 'appended')) FROM unnest(%(o)s::int8[]) o",
            "SELECT count(lo_truncate(lo_open(o::oid, 131072), 1000)) FROM unnest(%(o)s::int8[]) o",
            "SELECT count(lo_unlink(o::oid)) FROM unnest(%(o)s::int8[]) o",
            "owner",
            "grant",
            "comment",
            "SELECT count(lo_unlink(o::oid)) FROM unnest(%(o)s::int8[]) o",
            "SELECT count(lo_from_bytea((o + 100000000)::oid, 'new')) FROM unnest(%(o)s::int8[]) o",
            "SELECT count(lo_put(o::oid, 0, 'x')) FROM unnest(%(o)s::int8[]) o",
        ]
        with psycopg.connect(src, autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'cs_owner'").fetchone():
                conn.execute("CREATE ROLE cs_owner")
            for i, q in enumerate(kinds):
                mine = oids[i * (n // 10) : i * (n // 10) + k]
                listed = ", ".join(map(str, mine))
                with conn.transaction():
                    if q == "owner":
                        for o in mine:
                            conn.execute(f"ALTER LARGE OBJECT {o} OWNER TO cs_owner")
                    elif q == "grant":
                        conn.execute(f"GRANT SELECT ON LARGE OBJECT {listed} TO PUBLIC")
                    elif q == "comment":
                        for o in mine:
                            conn.execute(f"COMMENT ON LARGE OBJECT {o} IS 'c'")
                    else:
                        conn.execute(q, {"o": mine})
                    if i == 3:  # unlinked, then made again under the same OID
                        conn.execute("SELECT count(lo_from_bytea(o::oid, 'again'))"
                                     " FROM unnest(%s::int8[]) o", (mine,))  # fmt: skip

    def anchor_lo_get(self, dsn: str) -> float:
        with psycopg.connect(dsn, autocommit=True) as conn:
            t = time.perf_counter()
            q = ("COPY (SELECT oid, lo_get(oid) FROM pg_largeobject_metadata)"
                 " TO STDOUT (FORMAT binary)")  # fmt: skip
            with conn.cursor().copy(q) as copy:
                for _block in copy:
                    pass
            return time.perf_counter() - t

    def anchor_lo_from_bytea(self, dsn: str, oids: list[int], connections: int = 2) -> float:
        pool = [os.urandom(BLOCK) for _ in range(1024)]

        def part(k: int) -> None:
            with psycopg.connect(dsn) as conn:
                conn.execute("CREATE TEMP TABLE stage (o oid, d bytea)")
                with conn.cursor().copy("COPY stage FROM STDIN (FORMAT binary)") as copy:
                    copy.set_types(["oid", "bytea"])
                    for i in range(k, len(oids), connections):
                        copy.write_row((oids[i], pool[i % len(pool)]))
                conn.execute("SELECT count(lo_from_bytea(o, d)) FROM stage")
                conn.commit()

        t = time.perf_counter()
        threads = [threading.Thread(target=part, args=(k,)) for k in range(connections)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return time.perf_counter() - t

    def table(self) -> str:
        out = ["| case | step | wall s | peak RSS MB | ratio |", "|---|---|---:|---:|---|"]
        for case, step, wall, rss, ratio in self.rows:
            cell = step.replace("|", PIPE)
            out.append(f"| {case} | {cell} | {wall:.2f} | {rss:.0f} | {ratio} |")
        return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the empty case at 100k, not 1M")
    args = ap.parse_args()
    with EmbeddedCluster(MAJOR, settings=BENCHMARK_WAL) as cluster:
        b = Bench(cluster)
        b.empty(100_000 if args.quick else 1_000_000)
        b.four_k(100_000)
        print(f"{datetime.date.today()}, PostgreSQL {cluster.tc.version}\n")
        print(b.table())


if __name__ == "__main__":
    main()
