"""``pgblobdump import`` of a directory of files (issue 40, item 2) against ``restore
--jobs 2`` of a packed archive of the same LOs, side by side in one run on one embedded
PostgreSQL 17 cluster (the 17 wheel), TCP loopback.

The case: ``--n`` files of 4 KiB (random bytes) in 100 directories. The same bytes are
made LOs of a source database (``lo_from_bytea`` in batches, in-process) and dumped with
``pgblobdump dump``; then, each into a new empty database, alternately ``--repeat``
times: ``pgblobdump restore ARCHIVE --jobs 2`` (the anchor) and ``pgblobdump import DIR
--jobs 2``. Both run as children under ``/usr/bin/time`` (wall, peak RSS; start-up
included). Import does more than restore: it reads each file (open, read, two stats),
hashes it, checks each LO's sha256 on the server and writes a journal row per file; the
files are in the page cache (made just before). Peak RSS of import is measured at
``--small`` files too (memory flat). Every run is checked (LO count).

Usage: .venv/bin/python benchmarks/import_files.py [--n 100000] [--small 10000]
       [--repeat 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
from scratch import Scratch, say

import pgblobdump
from pgblobdump.pg.arrays import bytea_array, oid_array
from pgblobdump.proc import ProcessStats, run_measured
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

MAJOR = 17
PGBLOBDUMP = Path(sys.executable).with_name("pgblobdump")
GNU_TIME = Path("/usr/bin/time")
BLOCK = 4096
DIRS = 100
BAR = 1.2


def code_version() -> str:
    root = Path(pgblobdump.__file__).resolve().parent.parent
    git = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return f"pgblobdump from {root}" + (f" ({git.stdout.strip()})" if git.returncode == 0 else "")


def make_files(root: Path, n: int) -> list[bytes]:
    """``n`` files of 4 KiB in DIRS directories; returns their bytes in key order."""
    say(f"{n:,} files of 4 KiB -> {root} ...")
    datas = []
    for i in range(n):
        d = root / f"d{i % DIRS:03}"
        d.mkdir(exist_ok=True)
        data = os.urandom(BLOCK)
        (d / f"f{i:07}").write_bytes(data)
    for d in sorted(root.iterdir()):
        for f in sorted(d.iterdir()):
            datas.append(f.read_bytes())
    return datas


class Bench(Scratch):
    def measure(self, argv: list[str | Path], what: str) -> ProcessStats:
        say(f"{what} ...")
        st = run_measured([str(x) for x in argv], gnu_time=GNU_TIME, what=what)
        say(
            f"{what}: {st.wall_s:.2f} s, CPU {st.user_s:.2f} user + {st.sys_s:.2f} sys,"
            f" {st.max_rss_kb / 1024:.0f} MB"
        )
        return st

    def check(self, dsn: str, want: int, what: str) -> None:
        got = self.lo_count(dsn)
        if got != want:
            raise SystemExit(f"{what}: {got:,} LOs in the target, not {want:,}")

    def source(self, datas: list[bytes]) -> str:
        dsn = self.fresh_db("src")
        say(f"source database of {len(datas):,} LOs ...")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for i in range(0, len(datas), 5000):
                part = datas[i : i + 5000]
                conn.execute(
                    "SELECT count(lo_from_bytea(o, d)) FROM unnest(%s::oid[], %s::bytea[]) u(o, d)",
                    (oid_array(range(20000 + i, 20000 + i + len(part))), bytea_array(part)),
                )
        return dsn

    def restore(self, archive: Path, n: int) -> ProcessStats:
        dsn = self.fresh_db("dst")
        st = self.measure([PGBLOBDUMP, "restore", archive, "-d", dsn, "--jobs", "2", "--json"],
                          "restore --jobs 2")  # fmt: skip
        self.check(dsn, n, "restore")
        return st

    def import_(self, root: Path, n: int, what: str = "import --jobs 2") -> ProcessStats:
        dsn = self.fresh_db("dst")
        st = self.measure([PGBLOBDUMP, "import", root, "-d", dsn, "--jobs", "2", "--json"], what)
        self.check(dsn, n, what)
        return st


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="files of 4 KiB")
    ap.add_argument("--small", type=int, default=10_000, help="files, for memory flat")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each, alternately")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="pgbd-import-bench-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    restores: list[ProcessStats] = []
    imports: list[ProcessStats] = []
    try:
        with EmbeddedCluster(MAJOR, settings=BENCHMARK_WAL) as c:
            b = Bench(c)
            head = (
                f"PostgreSQL {c.tc.version} ({c.tc.source}), {os.cpu_count()} cores,"
                f" {datetime.date.today().isoformat()}; {code_version()}"
            )
            say(head)
            small_dir, big_dir = work / "small", work / "big"
            small_dir.mkdir(exist_ok=True)
            big_dir.mkdir(exist_ok=True)
            make_files(small_dir, a.small)
            datas = make_files(big_dir, a.n)
            src = b.source(datas)
            del datas
            archive = work / "archive"
            say("dump ...")
            subprocess.run([str(PGBLOBDUMP), "dump", "-d", src, "-o", str(archive), "--json"],
                           check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            b.drop_db("src")
            small = b.import_(small_dir, a.small, f"import --jobs 2, {a.small:,} files")
            for _ in range(a.repeat):
                restores.append(b.restore(archive, a.n))
                imports.append(b.import_(big_dir, a.n))
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    r = statistics.median(s.wall_s for s in restores)
    i = statistics.median(s.wall_s for s in imports)
    print(head)
    print()
    print("| case | step | wall s (each run) | median s | peak RSS MB | ratio |")
    print("|---|---|---|---:|---:|---|")
    each_r = ", ".join(f"{s.wall_s:.2f}" for s in restores)
    each_i = ", ".join(f"{s.wall_s:.2f}" for s in imports)
    rss_r = max(s.max_rss_kb for s in restores) / 1024
    rss_i = max(s.max_rss_kb for s in imports) / 1024
    print(f"| {a.n:,} x 4 KiB | restore --jobs 2 (anchor) | {each_r} | {r:.2f} | {rss_r:.0f} | 1 |")
    print(
        f"| {a.n:,} x 4 KiB | import --jobs 2 | {each_i} | {i:.2f} | {rss_i:.0f} | {i / r:.2f}x |"
    )
    print(f"| {a.small:,} x 4 KiB | import --jobs 2 | {small.wall_s:.2f} | |"
          f" {small.max_rss_kb / 1024:.0f} | |")  # fmt: skip
    print()
    ok = i / r <= BAR
    print(f"- {'met' if ok else '**missed**'}: import --jobs 2 within {BAR}x of restore --jobs 2:"
          f" {i / r:.2f}x (medians of {a.repeat})")  # fmt: skip
    print(f"- peak RSS of import: {small.max_rss_kb / 1024:.0f} MB at {a.small:,} files,"
          f" {rss_i:.0f} MB at {a.n:,}")  # fmt: skip


if __name__ == "__main__":
    main()
