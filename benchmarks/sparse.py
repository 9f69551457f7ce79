"""Sparse LOs stay sparse (issue 27, item 4), side by side in one run on one embedded
PostgreSQL 17 cluster (the 17 wheel), over TCP loopback.

1. An LO with 13 bytes written at offset 1,000,000,000 (one page in pg_largeobject):
   ``pgblobdump dump`` + ``restore``, ``pg_dump 17 -Fc`` + ``pg_restore 17``, and
   ``pgblobdump pack`` of that pg_dump archive + ``restore``: wall time, peak RSS, archive
   bytes, and the LO's pages in pg_largeobject after each restore (the source has 1).
   Every restore is checked: the LO's length and bytes (ranges at both ends) equal.
2. What the writer's hole test costs on data without holes: ``pgblobdump dump`` of
   100,000 random 4 KiB LOs, with the test and without it (the same command with the test
   replaced by "no hole", in the same interpreter start-up), alternating, ``--repeats``
   times each; plus the test alone, in this process, over the same kind of bytes (4 KiB
   LOs and 1 MiB pieces of large ones).
3. What keeping small LOs sparse costs at restore: 2,000 LOs of 16 KiB and 500 of 256 KiB
   generated with ``--sparse 1`` (holes at the start, in the middle, at the end), dumped
   with every hole left out, with the default (holes of 64 pages or more, in LOs up to
   1 MiB), and with zeros (no hole test): restore time and pages.

4. ``--batched``: small LOs with holes written in restore's batches (this branch) against
   the code of ``--before REV`` (default ``main``: each such LO a transaction of its own,
   holes under 64 pages kept as zeros), exported with ``git archive`` and run in the same
   interpreter set-up: 2,000 x 16 KiB ``--sparse 1`` (before as it is, before with every
   hole left out, after), the mixed corpus (``--preset realistic``, 1,000 LOs, sizes
   clipped at 4 MiB), each dump and restore with the same code; and 100,000 random 4 KiB
   LOs (no holes) dumped once, restored by before and after alternately. Every restore's
   pages are counted and its bytes compared with the source's (md5 over all LOs).

Child processes run under ``/usr/bin/time`` (wall, peak RSS); their wall includes start-up.

Usage: .venv/bin/python benchmarks/sparse.py [--quick] [--repeats N] [--batched [--before REV]]
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from scratch import say

import pgblobdump
from pgblobdump.packed.format.holes import runs
from pgblobdump.packed.write.packer import SMALL_HOLE_PAGES
from pgblobdump.pgconstants import LOBLKSIZE
from pgblobdump.proc import ProcessStats, run_measured
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

MAJOR = 17
GNU_TIME = Path("/usr/bin/time")
OFFSET = 1_000_000_000
OID = 70_000
CLI = "import sys; from pgblobdump.cli import cli; sys.argv[0] = 'pgblobdump'; cli()"
NO_HOLE_TEST = (
    "import sys; import pgblobdump.packed.write.writer as w;"
    " w.runs = lambda data, start, end, min_pages=1: [(0, len(data))];"
    " from pgblobdump.cli import cli; sys.argv[0] = 'pgblobdump'; cli()"
)
"""The same CLI with the writer's hole test replaced by 'no hole' (format 1's writing)."""


def cli_of(tree: Path, *setup: str) -> str:
    """The CLI as ``CLI`` does it, from the pgblobdump package under ``tree`` (not the
    editable install's), after ``setup`` statements."""
    return (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)];"
        f" sys.path.insert(0, {str(tree)!r}); " + "".join(f"{x}; " for x in setup) + CLI
    )


def code_version() -> str:
    root = Path(pgblobdump.__file__).resolve().parent.parent
    git = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"],
                         capture_output=True, text=True)  # fmt: skip
    return f"pgblobdump from {root}" + (f" ({git.stdout.strip()})" if git.returncode == 0 else "")


def measure(argv: list[str | Path], what: str) -> ProcessStats:
    say(f"{what} ...")
    st = run_measured([str(x) for x in argv], gnu_time=GNU_TIME, what=what)
    say(f"{what}: {st.wall_s:.2f} s, {st.max_rss_kb / 1024:.0f} MB")
    return st


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Bench:
    def __init__(self, cluster: EmbeddedCluster, work: Path) -> None:
        self.c = cluster
        self.work = work
        tc = toolchain.find(MAJOR, ("pg_dump", "pg_restore"))
        self.pg_dump = tc.tool("pg_dump")
        self.pg_restore = tc.tool("pg_restore")

    def fresh(self, name: str) -> str:
        with psycopg.connect(self.c.conninfo("postgres", tcp=True), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        return self.c.conninfo(name, tcp=True)

    @staticmethod
    def pages(dsn: str) -> int:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT count(*) FROM pg_largeobject").fetchone()
        assert row is not None
        return int(row[0])

    @staticmethod
    def probe(dsn: str) -> tuple[object, ...]:
        """The LO's length and the bytes at both ends and around its page of data."""
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT lo_lseek64(lo_open(%(o)s, 262144), 0, 2), md5(lo_get(%(o)s, 0, 1 << 20)),"
                " lo_get(%(o)s, %(at)s - 4096, 8192)",
                {"o": OID, "at": OFFSET},
            ).fetchone()
        assert row is not None
        return tuple(row)

    def sparse(self) -> list[list[str]]:
        src = self.fresh("sparse_src")
        with psycopg.connect(src, autocommit=True) as conn:
            conn.execute("SELECT lo_create(%s)", (OID,))
            conn.execute("SELECT lo_put(%s, %s, 'thirteen byte')", (OID, OFFSET))
        want = self.probe(src)
        rows = [["source", "", "", "", f"{self.pages(src):,}"]]
        cli = [sys.executable, "-c", CLI]

        def restored(name: str, argv: list[str | Path], what: str) -> tuple[ProcessStats, int]:
            dst = self.fresh(name)
            st = measure([*argv, "-d", dst], what)
            if self.probe(dst) != want:
                raise SystemExit(f"{what}: the LO differs from the source's")
            return st, self.pages(dst)

        packed = self.work / "p.pbd"
        d = measure([*cli, "dump", "-d", src, "-o", packed], "pgblobdump dump")
        rows.append(["pgblobdump dump", f"{d.wall_s:.2f}", f"{d.max_rss_kb / 1024:.0f}",
                     f"{size_of(packed):,}", ""])  # fmt: skip
        r, p_packed = restored("sparse_a", [*cli, "restore", packed], "pgblobdump restore")
        rows.append(["pgblobdump restore", f"{r.wall_s:.2f}", f"{r.max_rss_kb / 1024:.0f}", "",
                     f"{p_packed:,}"])  # fmt: skip
        dumped = self.work / "d.dump"
        d2 = measure([self.pg_dump, "-Fc", "-f", dumped, "-d", src], "pg_dump 17 -Fc")
        rows.append(["pg_dump 17 -Fc", f"{d2.wall_s:.2f}", f"{d2.max_rss_kb / 1024:.0f}",
                     f"{size_of(dumped):,}", ""])  # fmt: skip
        r2, p_pg = restored("sparse_b", [self.pg_restore, dumped], "pg_restore 17")
        rows.append(["pg_restore 17", f"{r2.wall_s:.2f}", f"{r2.max_rss_kb / 1024:.0f}", "",
                     f"{p_pg:,}"])  # fmt: skip
        packed2 = self.work / "pk.pbd"
        k = measure([*cli, "pack", dumped, "-o", packed2], "pgblobdump pack")
        rows.append(["pgblobdump pack (of the -Fc)", f"{k.wall_s:.2f}",
                     f"{k.max_rss_kb / 1024:.0f}", f"{size_of(packed2):,}", ""])  # fmt: skip
        r3, p_pack = restored("sparse_c", [*cli, "restore", packed2], "restore of the pack")
        rows.append(["pgblobdump restore (of the pack)", f"{r3.wall_s:.2f}",
                     f"{r3.max_rss_kb / 1024:.0f}", "", f"{p_pack:,}"])  # fmt: skip
        self.verdicts = [
            f"pages after restore: packed {p_packed:,}, packed from pg_dump {p_pack:,},"
            f" pg_restore 17 {p_pg:,} (source 1)",
            f"restore: pg_restore 17 / pgblobdump = {r2.wall_s / r.wall_s:.1f}x;"
            f" dump: pg_dump 17 -Fc / pgblobdump = {d2.wall_s / d.wall_s:.2f}x",
        ]
        return rows

    def hole_test_cost(self, n: int, repeats: int) -> list[list[str]]:
        src = self.fresh("dense_src")
        say(f"generate {n:,} x 4 KiB random ...")
        subprocess.run([sys.executable, "-c", CLI, "generate", "-d", src, "-n", str(n),
                        "--size", "4KiB", "--content", "random", "--json"],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        times: dict[str, list[ProcessStats]] = {"with the hole test": [], "without": []}
        for i in range(repeats):
            for label, code in (("with the hole test", CLI), ("without", NO_HOLE_TEST)):
                out = self.work / f"dense-{i}-{label[:4]}.pbd"
                times[label].append(measure([sys.executable, "-c", code, "dump", "-d", src,
                                             "-o", out], f"dump {label} #{i + 1}"))  # fmt: skip
                shutil.rmtree(out)
        rows = []
        best = {k: min(v, key=lambda s: s.wall_s) for k, v in times.items()}
        for label, sts in times.items():
            walls = ", ".join(f"{s.wall_s:.2f}" for s in sts)
            rows.append([f"dump {n:,} x 4 KiB, {label}", walls,
                         f"{best[label].max_rss_kb / 1024:.0f}"])  # fmt: skip
        ratio = best["with the hole test"].wall_s / best["without"].wall_s
        # the test alone, in this process, on bytes like these
        datas = [os.urandom(4096) for _ in range(n)]
        t = time.perf_counter()
        for data in datas:  # as LoPacker.add tests an LO of up to 1 MiB, at one page
            if len(data) > 1 * LOBLKSIZE and 0 in data[::LOBLKSIZE]:
                runs(data, 0, len(data), 1)
        per_lo = time.perf_counter() - t
        big = [os.urandom(1 << 20) for _ in range(256)]
        t = time.perf_counter()
        for data in big:
            runs(data, 0, None, 0)
        mb_s = 256 / (time.perf_counter() - t)
        text = (b"the large object of the dump " * 40000)[: 1 << 20]
        t = time.perf_counter()
        for _ in range(256):
            runs(text, 0, None, 0)
        text_mb_s = 256 / (time.perf_counter() - t)
        self.verdicts.append(
            f"hole test: dump with / without = {ratio:.3f} (best of {repeats} each)"
            f" (the default SMALL_HOLE_PAGES {SMALL_HOLE_PAGES} skips LOs up to"
            f" {SMALL_HOLE_PAGES * LOBLKSIZE // 1024} KiB);"
            f" the test alone, as if it were 1: {per_lo:.3f} s for the {n:,} LOs"
            f" ({per_lo / best['without'].wall_s:.2%} of the dump),"
            f" {mb_s:,.0f} MiB/s on random 1 MiB pieces, {text_mb_s:,.0f} MiB/s on text"
        )
        return rows

    def small_sparse(self, n: int) -> list[list[str]]:
        """What keeping small LOs sparse costs at restore: each is a transaction of its
        own there (as a large LO is), where a dense one joins a batch."""
        rows = []
        every = NO_HOLE_TEST.replace(
            "w.runs = lambda data, start, end, min_pages=1: [(0, len(data))]",
            "w.SMALL_HOLE_PAGES = 1",
        )
        cases = [
            (n, "16KiB", "every hole kept (SMALL_HOLE_PAGES 1)", every),
            (n, "16KiB", "holes of 64+ pages kept (the default)", CLI),
            (n, "16KiB", "zeros stored (no hole test)", NO_HOLE_TEST),
            (n // 4, "256KiB", "holes of 64+ pages kept (the default)", CLI),
            (n // 4, "256KiB", "zeros stored (no hole test)", NO_HOLE_TEST),
        ]
        made: set[str] = set()
        for count, size, label, code in cases:
            name = f"small_{size.lower()}"
            src = self.c.conninfo(name, tcp=True)
            if name not in made:
                made.add(name)
                src = self.fresh(name)
                say(f"generate {count:,} x {size}, --sparse 1 ...")
                subprocess.run([sys.executable, "-c", CLI, "generate", "-d", src, "-n",
                                str(count), "--size", size, "--sparse", "1", "--json"],
                               check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            out = self.work / f"{name}-{len(rows)}.pbd"
            what = f"{count:,} x {size} sparse, {label}"
            d = measure([sys.executable, "-c", code, "dump", "-d", src, "-o", out],
                        f"dump {what}")  # fmt: skip
            dst = self.fresh("small_dst")
            r = measure([sys.executable, "-c", CLI, "restore", out, "-d", dst],
                        f"restore {what}")  # fmt: skip
            rows.append([what, f"{d.wall_s:.2f}", f"{r.wall_s:.2f}", f"{self.pages(src):,}",
                         f"{self.pages(dst):,}"])  # fmt: skip
            shutil.rmtree(out)
        return rows


class Batched:
    """Part 4: small LOs with holes in restore's batches, before and after."""

    def __init__(self, bench: Bench, before: Path) -> None:
        self.b = bench
        self.before = cli_of(before)
        self.before_every = cli_of(before, "import pgblobdump.packed.write.writer as w",
                                   "w.SMALL_HOLE_PAGES = 1")  # fmt: skip
        self.verdicts: list[str] = []

    @staticmethod
    def digest(dsn: str) -> tuple[object, ...]:
        with psycopg.connect(dsn) as conn:
            row = conn.execute(
                "SELECT count(*), md5(string_agg(md5(lo_get(oid)), '' ORDER BY oid))"
                " FROM pg_largeobject_metadata"
            ).fetchone()
        assert row is not None
        return tuple(row)

    def generate(self, name: str, *args: str) -> str:
        src = self.b.fresh(name)
        say(f"generate {name} {' '.join(args)} ...")
        subprocess.run([sys.executable, "-c", CLI, "generate", "-d", src, *args, "--json"],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        return src

    def one(self, src: str, what: str, dump_code: str, code: str, check: bool = True,
            archive: Path | None = None) -> tuple[list[str], float]:  # fmt: skip
        """Dump with ``dump_code`` (unless ``archive`` is given), restore with ``code``."""
        out = archive or self.b.work / "batched.pbd"
        d = None
        if archive is None:
            d = measure([sys.executable, "-c", dump_code, "dump", "-d", src, "-o", out],
                        f"dump, {what}")  # fmt: skip
        dst = self.b.fresh("batched_dst")
        r = measure([sys.executable, "-c", code, "restore", out, "-d", dst], f"restore, {what}")
        same = "" if not check else "yes" if self.digest(dst) == self.digest(src) else "NO"
        if archive is None:
            shutil.rmtree(out)
        row = [what, f"{d.wall_s:.2f}" if d else "", f"{r.wall_s:.2f}",
               f"{r.max_rss_kb / 1024:.0f}", f"{self.b.pages(src):,}", f"{self.b.pages(dst):,}",
               same]  # fmt: skip
        return row, r.wall_s

    def run(self, n: int, mixed: int, dense: int, repeats: int) -> list[list[str]]:
        rows: list[list[str]] = []
        src = self.generate("batched_small", "-n", str(n), "--size", "16KiB", "--sparse", "1")
        label = f"{n:,} x 16 KiB --sparse 1"
        row, t_before = self.one(src, f"{label}: before", self.before, self.before)
        rows.append(row)
        row, t_every = self.one(src, f"{label}: before, every hole (64 -> 1)",
                                self.before_every, self.before)  # fmt: skip
        rows.append(row)
        row, t_after = self.one(src, f"{label}: after", CLI, CLI)
        rows.append(row)
        self.verdicts.append(
            f"{label}, restore: after / before = {t_after / t_before:.2f}x,"
            f" after / before-with-every-hole = {t_after / t_every:.2f}x"
        )
        src = self.generate("batched_mixed", "-n", str(mixed), "--preset", "realistic",
                            "--size-dist", "lognormal:16KiB:2.5:4MiB")  # fmt: skip
        label = f"mixed, {mixed:,} LOs (--preset realistic, clipped at 4 MiB)"
        row, t_before = self.one(src, f"{label}: before", self.before, self.before)
        rows.append(row)
        row, t_after = self.one(src, f"{label}: after", CLI, CLI)
        rows.append(row)
        self.verdicts.append(f"{label}, restore: after / before = {t_after / t_before:.2f}x")
        src = self.generate("batched_dense", "-n", str(dense), "--size", "4KiB")
        archive = self.b.work / "dense.pbd"
        measure([sys.executable, "-c", CLI, "dump", "-d", src, "-o", archive], "dump dense")
        label = f"{dense:,} x 4 KiB random"
        best = {"before": float("inf"), "after": float("inf")}
        for i in range(repeats):
            for who, code in (("before", self.before), ("after", CLI)):
                row, t = self.one(src, f"{label}: {who} (run {i + 1})", code, code,
                                  check=False, archive=archive)  # fmt: skip
                rows.append(row)
                best[who] = min(best[who], t)
        self.verdicts.append(
            f"{label}, restore, best of {repeats}: after / before ="
            f" {best['after'] / best['before']:.2f}x"
        )
        return rows


def table(head: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10,000 4 KiB LOs, not 100,000")
    ap.add_argument("--repeats", type=int, default=2, help="dumps with and without (2)")
    ap.add_argument("--batched", action="store_true", help="part 4 only: before and after")
    ap.add_argument("--before", default="main", help="the code before, a git revision (main)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pgbd-sparse-bench-", dir="/var/tmp"))
    try:
        with EmbeddedCluster(MAJOR, settings=BENCHMARK_WAL) as c:
            b = Bench(c, work)
            if a.batched:
                batched(b, work, a.before, a.quick, a.repeats)
                return
            head = (
                f"PostgreSQL {c.tc.version} ({c.tc.source}), pg_dump/pg_restore"
                f" {toolchain.find(MAJOR, ('pg_dump',)).version}, {os.cpu_count()} cores,"
                f" {datetime.date.today().isoformat()}; {code_version()}"
            )
            say(head)
            sparse = b.sparse()
            cost = b.hole_test_cost(10_000 if a.quick else 100_000, a.repeats)
            small = b.small_sparse(500 if a.quick else 2_000)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(head)
    print()
    print(f"13 bytes at offset {OFFSET:,} (LO {OID}):")
    print()
    table(["step", "wall s", "peak RSS MB", "archive bytes", "pages after"], sparse)
    table(["step", "wall s (each run)", "peak RSS MB"], cost)
    table(["LOs", "dump s", "restore s", "pages at the source", "pages after"], small)
    for v in b.verdicts:
        print(v)


def batched(b: Bench, work: Path, rev: str, quick: bool, repeats: int) -> None:
    root = Path(pgblobdump.__file__).resolve().parent.parent
    before = work / "before"
    before.mkdir()
    sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", rev],
                         check=True, capture_output=True, text=True).stdout.strip()  # fmt: skip
    tar = subprocess.run(["git", "-C", str(root), "archive", rev, "pgblobdump"],
                         check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(before)], input=tar, check=True)
    head = (
        f"PostgreSQL {b.c.tc.version} ({b.c.tc.source}), {os.cpu_count()} cores,"
        f" {datetime.date.today().isoformat()}; after: {code_version()}; before: {rev} ({sha})"
    )
    say(head)
    p = Batched(b, before)
    rows = p.run(500 if quick else 2_000, 200 if quick else 1_000,
                 10_000 if quick else 100_000, repeats)  # fmt: skip
    print(head)
    print()
    table(["case", "dump s", "restore s", "restore RSS MB", "pages at the source",
           "pages after", "bytes equal"], rows)  # fmt: skip
    for v in p.verdicts:
        print(v)


if __name__ == "__main__":
    main()
