"""Benchmark (issue 14): ``pack`` of a 1M-LO ``pg_dump 17 -Fd`` archive against what the
same archive costs to list and to tar; and ``dump --full`` / ``restore --full`` of a
database with 1M LOs and some tables against pg_dump/pg_restore 17, all in one run on
one embedded PostgreSQL 17 cluster, ratios against figures of the same run.

Part 1 (pack): the -Fd archive (1,000,000 empty LOs: 1,001,000+ files) is made once by
pg_dump 17; then, each under /usr/bin/time: ``pg_restore -l DIR`` (to /dev/null),
``tar cf - DIR`` piped to /dev/null (a real read of every file; GNU tar skips reading
when it writes to /dev/null itself), and ``pgblobdump pack DIR -o OUT``; then the files
the packed archive has. The target: pack no slower than pg_restore -l plus tar, at
most 5 files.

Part 2 (--full): the database also holds two tables (100k rows, an oid column owning
the LOs, an index). ``pgblobdump dump --full`` against ``pg_dump -Fc``; ``restore
--full`` against ``pg_restore`` one job and ``-j 2 --transaction-size 1000``, each into
a fresh database, checked (LO count, table rows).

    .venv/bin/python benchmarks/pack_and_full.py [--count N] [--keep DIR]

``--major 16 --pack-only``: part 1 only, on a pg_dump 16 -Fd archive (one BLOB entry per
LO: the layout whose LO list a pack must not hold in memory).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from pgblobdump.proc import ProcessStats, run_measured
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

MAJOR = 17
PACK_TARGET = 1.0
"""pack no slower than pg_restore -l plus tar cf (issue 27, item 5)."""
PGBLOBDUMP = Path(sys.executable).with_name("pgblobdump")
GNU_TIME = Path("/usr/bin/time")


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def measured(argv: list[str | Path], what: str) -> ProcessStats:
    say(f"{what} ...")
    st = run_measured([str(a) for a in argv], gnu_time=GNU_TIME, what=what)
    say(f"{what}: {st.wall_s:.2f} s, {st.max_rss_kb / 1024:.0f} MB")
    return st


def files_in(path: Path) -> int:
    return sum(len(names) for _root, _dirs, names in os.walk(path))


def fresh(c: EmbeddedCluster, name: str) -> str:
    with psycopg.connect(c.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return c.conninfo(name, tcp=True)


def row(what: str, st: ProcessStats, ratio: str = "") -> str:
    return f"| {what} | {st.wall_s:.2f} | {st.max_rss_kb / 1024:.0f} | {ratio} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--keep", type=Path, help="keep (and reuse) the -Fd archive here")
    ap.add_argument("--major", type=int, default=MAJOR, help="PostgreSQL and pg_dump major")
    ap.add_argument("--pack-only", action="store_true", help="part 1 (pack) only")
    a = ap.parse_args()
    n = a.count
    major = a.major
    work = a.keep or Path(tempfile.mkdtemp(prefix="pgbd-pack-bench-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    tc = toolchain.find(major, ("pg_dump", "pg_restore"))
    pg_dump, pg_restore = tc.tool("pg_dump"), tc.tool("pg_restore")
    lines: list[str] = []
    try:
        with EmbeddedCluster(major, settings=BENCHMARK_WAL) as c:
            src = fresh(c, "src")
            with psycopg.connect(src, autocommit=True) as conn:
                conn.execute(f"SELECT count(lo_create(g)) FROM generate_series(1, {n}) g")
                conn.execute(
                    "CREATE TABLE docs (id int PRIMARY KEY, title text, body oid);"
                    " INSERT INTO docs SELECT g, 'doc ' || g, g FROM"
                    f" generate_series(1, {n} / 10) g;"
                    " CREATE TABLE notes (id serial PRIMARY KEY, doc int REFERENCES docs, t text);"
                    " INSERT INTO notes (doc, t) SELECT g, md5(g::text) FROM"
                    f" generate_series(1, {n} / 10) g; CREATE INDEX ON docs (title)"
                )
            head = (f"PostgreSQL {c.tc.version}, pg_dump/pg_restore {tc.version},"
                    f" {os.cpu_count()} cores, {n:,} empty LOs")  # fmt: skip
            say(head)

            # part 1: pack of the -Fd archive
            fd = work / f"fd{n}" if major == MAJOR else work / f"fd{n}_pg{major}"
            if not (fd / "toc.dat").is_file():
                shutil.rmtree(fd, ignore_errors=True)
                measured([pg_dump, "-Fd", "-f", fd, "-d", src], "pg_dump -Fd (made once)")
            listing = measured(["bash", "-c", f"{pg_restore} -l {fd} > /dev/null"],
                               "pg_restore -l")  # fmt: skip
            tar = measured(["bash", "-c", f"tar cf - -C {fd} . | cat > /dev/null"], "tar cf")
            out = work / "packed.pbd"
            shutil.rmtree(out, ignore_errors=True)
            pack = measured([PGBLOBDUMP, "pack", fd, "-o", out, "--json"], "pgblobdump pack")
            both = listing.wall_s + tar.wall_s
            lines += [
                "| step | wall s | peak RSS MB | ratio |",
                "|---|---:|---:|---|",
                row(f"pg_restore -l of the -Fd ({files_in(fd):,} files)", listing),
                row("tar cf - DIR | cat > /dev/null", tar),
                row(
                    f"pgblobdump pack ({files_in(out)} files after)",
                    pack,
                    f"**{pack.wall_s / both:.2f}x** pg_restore -l + tar (target"
                    f" {PACK_TARGET}x: {'met' if pack.wall_s / both <= PACK_TARGET else 'missed'})",
                ),
            ]
            shutil.rmtree(out, ignore_errors=True)
            if a.keep is None:
                shutil.rmtree(fd, ignore_errors=True)
            if a.pack_only:
                _print(head, lines)
                return

            # part 2: dump --full / restore --full
            full = work / "full.pbd"
            fc = work / "full.dump"
            shutil.rmtree(full, ignore_errors=True)
            d_ours = measured([PGBLOBDUMP, "dump", "--full", "-d", src, "-o", full, "--json"],
                              "pgblobdump dump --full")  # fmt: skip
            d_theirs = measured([pg_dump, "-Fc", "-f", fc, "-d", src], "pg_dump -Fc")
            r_ours_db = fresh(c, "dst_ours")
            r_ours = measured([PGBLOBDUMP, "restore", "--full", full, "-d", r_ours_db, "-j", "2",
                               "--json"], "pgblobdump restore --full -j 2")  # fmt: skip
            r1_db = fresh(c, "dst_1")
            r1 = measured([pg_restore, "-d", r1_db, fc], "pg_restore 1 job")
            r2_db = fresh(c, "dst_2")
            r2 = measured([pg_restore, "-j", "2", "--transaction-size", "1000", "-d", r2_db, fc],
                          "pg_restore -j 2 --transaction-size 1000")  # fmt: skip
            for db in (r_ours_db, r1_db, r2_db):
                with psycopg.connect(db) as conn:
                    got = conn.execute(
                        "SELECT (SELECT count(*) FROM pg_largeobject_metadata),"
                        " (SELECT count(*) FROM docs), (SELECT count(*) FROM notes)"
                    ).fetchone()
                if got != (n, n // 10, n // 10):
                    raise SystemExit(f"restore into {db} gave {got}")
            lines += [
                "",
                "| step | wall s | peak RSS MB | ratio |",
                "|---|---:|---:|---|",
                row(f"pgblobdump dump --full ({files_in(full)} files)", d_ours,
                    f"pg_dump / ours = **{d_theirs.wall_s / d_ours.wall_s:.1f}x**"),
                row("pg_dump 17 -Fc", d_theirs),
                row("pgblobdump restore --full -j 2", r_ours,
                    f"pg_restore 1 job / ours = **{r1.wall_s / r_ours.wall_s:.1f}x**;"
                    f" -j 2 / ours = **{r2.wall_s / r_ours.wall_s:.1f}x**"),
                row("pg_restore 17, 1 job", r1),
                row("pg_restore 17 -j 2 --transaction-size 1000", r2),
            ]  # fmt: skip
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    _print(head, lines)


def _print(head: str, lines: list[str]) -> None:
    print(head)
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
