"""``restore --remap all`` (issue 39) against its anchor, side by side in one run on one
embedded PostgreSQL 17 cluster (the 17 wheel), over TCP loopback.

At each scale (``--small``, 100k, then ``--count``, 1M; ``--quick``: 10k and 100k), N LOs
of 4 KiB (random bytes, OIDs from ``--start-oid``) are generated and dumped (LOs only).
A base target holds N OTHER LOs at the same OIDs (another seed) and the rows a user
loaded: ``t1 (id int8, c oid)`` and ``t2 (id int8, c text)`` (the OID's digits), one row
per LO in each, made by ``INSERT ... SELECT oid FROM pg_largeobject_metadata``. Each round
works on a copy of that base (``CREATE DATABASE ... TEMPLATE``), so every contender starts
from the same state:

- ``remap``: ``pgblobdump restore ARCHIVE -d DST --remap all --referenced-by t1.c
  --referenced-by t2.c --jobs J --json`` under ``/usr/bin/time`` (wall with start-up,
  peak RSS). Its phases come from the run's own timestamps in the target
  (``pgblobdump_remap.runs.started``, each ``rewrites.done``, ``runs.finished``: each
  ``now()`` of its transaction), so the LOs' part and each column's rewrite are shown.
- anchor: the plain ``pgblobdump restore ARCHIVE -d EMPTY --jobs J`` of the same archive
  (under ``/usr/bin/time``), then, after the same rows are loaded (not timed) and a plain
  table ``map (old oid, new oid)`` of the remap's own pairs is made and ANALYZEd (not
  timed), the two naive statements, each timed around its ``execute`` (autocommit):
  ``UPDATE t1 SET c = m.new FROM map m WHERE t1.c = m.old`` and ``UPDATE t2 SET c =
  m.new::text FROM map m WHERE t2.c = m.old::text``.

Target: the remap within 1.5x of (plain restore + both UPDATEs), at ``--count``; memory
flat: the remap's peak RSS at ``--count`` within 1.25x of that at ``--small``. Rounds
(``--rounds``, at ``--small``; ``--big-rounds`` at ``--count``) alternate which contender
goes first; the report gives medians. Nothing of the preparation (generate, dump, the
other LOs, rows, copies of the base, the map table) is timed; a CHECKPOINT and an OS
``sync`` precede each timed step (fsync is off: a 4 GB copy of the base would otherwise
be written back by the kernel inside the remap's time). Every run is checked: 2N LOs in
the remap's target, N map rows, every row of t1 and t2 naming a new OID of the mapping; N
LOs in the anchor's, N rows updated by each UPDATE.

Usage: .venv/bin/python benchmarks/remap.py [--quick] [--count 1M] [--small 100k]
       [--rounds 3] [--big-rounds 1] [--jobs 2] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from scratch import Scratch, say

import pgblobdump
from pgblobdump.proc import ProcessStats, run_measured
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster
from pgblobdump.units import parse_count

MAJOR = 17
PGBLOBDUMP = Path(sys.executable).with_name("pgblobdump")
GNU_TIME = Path("/usr/bin/time")
TARGET = 1.5
"""The remap within this many times the anchor (issue 39)."""
FLAT = 1.25
"""Peak RSS at --count within this many times that at --small: flat."""
START_OID = 100_000
SCHEMA = "pgblobdump_remap"
UPDATES = {
    "t1": "UPDATE t1 SET c = m.new FROM map m WHERE t1.c = m.old",
    "t2": "UPDATE t2 SET c = m.new::text FROM map m WHERE t2.c = m.old::text",
}
"""The anchor's naive statements: t1.c is an oid column, t2.c a text one of digits."""


def code_version() -> str:
    root = Path(pgblobdump.__file__).resolve().parent.parent
    git = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return f"pgblobdump from {root}" + (f" ({git.stdout.strip()})" if git.returncode == 0 else "")


def dirty_mb() -> float:
    """The OS's dirty pages and those under writeback, in MB (/proc/meminfo)."""
    kb = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(("Dirty:", "Writeback:")):
                kb += int(line.split()[1])
    return kb / 1024


@dataclass
class Round:
    """One round at one scale: the remap (wall, RSS, its phases) and the anchor's parts."""

    remap_wall: float = 0.0
    remap_rss_mb: float = 0.0
    remap_los: float = 0.0
    remap_t1: float = 0.0
    remap_t2: float = 0.0
    restore_wall: float = 0.0
    restore_rss_mb: float = 0.0
    update_t1: float = 0.0
    update_t2: float = 0.0

    @property
    def anchor(self) -> float:
        return self.restore_wall + self.update_t1 + self.update_t2

    @property
    def remap_rest(self) -> float:
        """The remap's wall outside its run's timestamps: start-up, the plan, the report."""
        return self.remap_wall - self.remap_los - self.remap_t1 - self.remap_t2


@dataclass
class Scale:
    n: int
    rounds: list[Round] = field(default_factory=list)

    def median(self, name: str) -> float:
        return statistics.median(float(getattr(r, name)) for r in self.rounds)

    def spread(self, name: str) -> str:
        vals = [float(getattr(r, name)) for r in self.rounds]
        return f"{min(vals):.2f}-{max(vals):.2f}" if len(vals) > 1 else ""


class Bench(Scratch):
    def __init__(self, cluster: EmbeddedCluster, work: Path, jobs: int) -> None:
        super().__init__(cluster)
        self.work = work
        self.jobs = jobs
        self.pairs: bytes = b""

    def measure(self, argv: list[str | Path], what: str, out: Path | None = None) -> ProcessStats:
        say(f"{what} ...")
        st = run_measured([str(x) for x in argv], gnu_time=GNU_TIME, what=what, stdout=out)
        say(f"{what}: {st.wall_s:.2f} s, {st.max_rss_kb / 1024:.0f} MB")
        return st

    def sql(self, dsn: str, *statements: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for s in statements:
                conn.execute(s)

    def checkpoint(self) -> None:
        """A CHECKPOINT, then the OS's dirty pages written out (``sync``): with fsync off,
        the files of a database just copied from the base (4 GB at 1M) would otherwise be
        written back by the kernel during the next timed step (only the remap's target is
        such a copy)."""
        self.sql(self.dsn("postgres"), "CHECKPOINT")
        dirty = dirty_mb()
        t = time.perf_counter()
        os.sync()
        say(f"sync: {dirty:,.0f} MB dirty or under writeback, {time.perf_counter() - t:.1f} s")

    def copy_db(self, template: str, name: str) -> str:
        self.drop_db(name)
        self.sql(
            self.dsn("postgres"), f"CREATE DATABASE {name} TEMPLATE {template} STRATEGY file_copy"
        )
        return self.dsn(name)

    # -- preparation (not timed) ------------------------------------------------------
    def generate(self, dsn: str, n: int, seed: int) -> None:
        say(f"generate {n:,} x 4 KiB, seed {seed} ...")
        subprocess.run(
            [str(PGBLOBDUMP), "generate", "-d", dsn, "-n", str(n), "--size", "4KiB",
             "--start-oid", str(START_OID), "--seed", str(seed), "--json"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip

    def load_rows(self, dsn: str) -> None:
        """The rows a user loaded: one in t1 (oid) and one in t2 (digits) per LO there."""
        self.sql(
            dsn,
            "CREATE TABLE IF NOT EXISTS t1 (id int8, c oid)",
            "CREATE TABLE IF NOT EXISTS t2 (id int8, c text)",
            "INSERT INTO t1 SELECT row_number() OVER (ORDER BY oid), oid"
            " FROM pg_largeobject_metadata",
            "INSERT INTO t2 SELECT row_number() OVER (ORDER BY oid), oid::text"
            " FROM pg_largeobject_metadata",
            "VACUUM ANALYZE t1",
            "VACUUM ANALYZE t2",
        )

    def prepare(self, n: int) -> Path:
        """The archive of N LOs, and the base target ``rm_base`` (N other LOs at the same
        OIDs, the rows); the archive's path."""
        src = self.fresh_db("rm_src")
        self.generate(src, n, seed=0)
        archive = self.work / f"a{n}.pbd"
        shutil.rmtree(archive, ignore_errors=True)
        say(f"dump -> {archive.name} ...")
        subprocess.run(
            [str(PGBLOBDUMP), "dump", "-d", src, "-o", str(archive), "--json"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        self.drop_db("rm_src")
        base = self.fresh_db("rm_base")
        self.generate(base, n, seed=1)
        self.load_rows(base)
        self.sql(base, "VACUUM ANALYZE pg_largeobject_metadata", "VACUUM ANALYZE pg_largeobject")
        return archive

    # -- contenders -------------------------------------------------------------------
    def remap(self, n: int, archive: Path, r: Round) -> None:
        dst = self.copy_db("rm_base", "rm_remap")
        self.checkpoint()
        out = self.work / "remap.json"
        st = self.measure(
            [PGBLOBDUMP, "restore", archive, "-d", dst, "--remap", "all",
             "--referenced-by", "t1.c", "--referenced-by", "t2.c", "--jobs", str(self.jobs),
             "--json"],
            f"{n:,}: restore --remap all, 2 columns", out,
        )  # fmt: skip
        r.remap_wall, r.remap_rss_mb = st.wall_s, st.max_rss_kb / 1024
        run = json.loads(out.read_text())["run"]
        with psycopg.connect(dst, autocommit=True) as conn:
            row = conn.execute(
                "SELECT extract(epoch FROM started)::float8, extract(epoch FROM finished)::float8"
                f" FROM {SCHEMA}.runs WHERE run = %s",
                (run,),
            ).fetchone()
            assert row is not None
            started, finished = row
            done = dict(
                conn.execute(
                    f"SELECT qualified, extract(epoch FROM done)::float8 FROM {SCHEMA}.rewrites"
                    " WHERE run = %s",
                    (run,),
                ).fetchall()
            )
            d1, d2 = done["public.t1.c"], done["public.t2.c"]
            r.remap_los = d1 - started
            r.remap_t1, r.remap_t2 = d2 - d1, finished - d2
            self.check_remap(conn, n, run)
            if not self.pairs:
                with conn.cursor().copy(
                    f"COPY (SELECT old, new FROM {SCHEMA}.map WHERE run = '{run}')"
                    " TO STDOUT (FORMAT binary)"
                ) as copy:
                    self.pairs = b"".join(bytes(b) for b in copy)
        say(f"{n:,}: remap phases: LOs {r.remap_los:.2f} s, t1.c {r.remap_t1:.2f} s,"
            f" t2.c {r.remap_t2:.2f} s")  # fmt: skip
        self.drop_db("rm_remap")

    def check_remap(self, conn: psycopg.Connection, n: int, run: str) -> None:
        got = conn.execute(
            "SELECT (SELECT count(*) FROM pg_largeobject_metadata),"
            f" (SELECT count(*) FROM {SCHEMA}.map WHERE run = %s AND old <> new),"
            f" (SELECT count(*) FROM t1 JOIN {SCHEMA}.map m ON m.run = %s AND m.new = t1.c),"
            f" (SELECT count(*) FROM t2 JOIN {SCHEMA}.map m ON m.run = %s AND m.new::text = t2.c)",
            (run, run, run),
        ).fetchone()
        if got != (2 * n, n, n, n):
            raise SystemExit(f"remap at {n:,}: (LOs, remapped, t1 rows, t2 rows) = {got}")

    def anchor(self, n: int, archive: Path, r: Round) -> None:
        dst = self.fresh_db("rm_plain")
        self.checkpoint()
        st = self.measure(
            [PGBLOBDUMP, "restore", archive, "-d", dst, "--jobs", str(self.jobs), "--json"],
            f"{n:,}: plain restore",
        )
        r.restore_wall, r.restore_rss_mb = st.wall_s, st.max_rss_kb / 1024
        if self.lo_count(dst) != n:
            raise SystemExit(f"plain restore at {n:,}: {self.lo_count(dst):,} LOs")
        self.load_rows(dst)
        with psycopg.connect(dst, autocommit=True) as conn:
            conn.execute("CREATE TABLE map (old oid, new oid)")
            with conn.cursor().copy("COPY map FROM STDIN (FORMAT binary)") as copy:
                copy.write(self.pairs)
            conn.execute("ANALYZE map")
        self.checkpoint()
        with psycopg.connect(dst, autocommit=True) as conn:
            for table, statement in UPDATES.items():
                t = time.perf_counter()
                rows = conn.execute(statement).rowcount
                wall = time.perf_counter() - t
                if rows != n:
                    raise SystemExit(f"anchor at {n:,}: {statement} updated {rows:,} rows")
                setattr(r, f"update_{table}", wall)
                say(f"{n:,}: {statement}: {wall:.2f} s")
        self.drop_db("rm_plain")

    def scale(self, n: int, rounds: int) -> Scale:
        self.pairs = b""
        archive = self.prepare(n)
        s = Scale(n)
        for k in range(rounds):
            r = Round()
            if k % 2 == 0:
                self.remap(n, archive, r)
                self.anchor(n, archive, r)
            else:
                self.anchor(n, archive, r)
                self.remap(n, archive, r)
            say(f"{n:,} round {k + 1}: remap {r.remap_wall:.2f} s, anchor {r.anchor:.2f} s"
                f" ({r.remap_wall / r.anchor:.2f}x)")  # fmt: skip
            s.rounds.append(r)
        self.drop_db("rm_base")
        shutil.rmtree(archive)
        return s


def report(head: str, scales: list[Scale], jobs: int) -> list[str]:
    """The Markdown table and the verdicts, one line each."""
    out = [head, "", "| LOs | step | wall s (median) | range | peak RSS MB | ratio |"]
    out.append("|---:|---|---:|---|---:|---|")
    for s in scales:
        a = s.median("anchor")

        def line(step: str, name: str, rss: str = "", ratio: str = "", s: Scale = s) -> None:
            out.append(
                f"| {s.n:,} | {step} | {s.median(name):.2f} | {s.spread(name)} | {rss} | {ratio} |"
            )

        line(f"anchor: plain `restore --jobs {jobs}` into an empty database", "restore_wall",
             f"{s.median('restore_rss_mb'):.0f}")  # fmt: skip
        line("anchor: `UPDATE t1 SET c = m.new FROM map m WHERE t1.c = m.old` (oid)", "update_t1")
        line("anchor: `UPDATE t2 SET c = m.new::text FROM map m WHERE t2.c = m.old::text`",
             "update_t2")  # fmt: skip
        line("**anchor: the three together**", "anchor", "", "1.00")
        line(f"**`restore --remap all --referenced-by t1.c --referenced-by t2.c --jobs {jobs}`**",
             "remap_wall", f"{s.median('remap_rss_mb'):.0f}",
             f"**{s.median('remap_wall') / a:.2f}x**")  # fmt: skip
        plain = s.median("restore_wall")
        line("remap: start to the first rewrite (the LOs, the map)", "remap_los", "",
             f"{s.median('remap_los') / plain:.2f}x the plain restore")  # fmt: skip
        line("remap: rewrite of t1.c (oid)", "remap_t1", "",
             f"{s.median('remap_t1') / s.median('update_t1'):.2f}x its UPDATE")  # fmt: skip
        line("remap: rewrite of t2.c (text digits)", "remap_t2", "",
             f"{s.median('remap_t2') / s.median('update_t2'):.2f}x its UPDATE")  # fmt: skip
        line("remap: the rest (start-up, the plan, the report)", "remap_rest")
    out.append("")
    big, small = scales[-1], scales[0]
    ratio = big.median("remap_wall") / big.median("anchor")
    each = ", ".join(f"{r.remap_wall / r.anchor:.2f}x" for r in big.rounds)
    ok = "met" if ratio <= TARGET else "**missed**"
    out.append(
        f"- {ok}: {big.n:,} LOs, `--remap all` with two columns within {TARGET}x of plain"
        f" restore + two naive UPDATEs: {ratio:.2f}x (median; rounds: {each})"
    )
    grow = big.median("remap_rss_mb") / small.median("remap_rss_mb")
    ok = "met" if grow <= FLAT else "**missed**"
    out.append(
        f"- {ok}: memory flat, the remap's peak RSS {small.median('remap_rss_mb'):.0f} MB at"
        f" {small.n:,} and {big.median('remap_rss_mb'):.0f} MB at {big.n:,} ({grow:.2f}x;"
        f" plain restore {small.median('restore_rss_mb'):.0f} -> "
        f"{big.median('restore_rss_mb'):.0f} MB)"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--count", type=parse_count, default=1_000_000, help="the target's count")
    ap.add_argument("--small", type=parse_count, default=100_000, help="for memory flat")
    ap.add_argument("--quick", action="store_true", help="--count 100k --small 10k")
    ap.add_argument("--rounds", type=int, default=3, help="rounds at --small")
    ap.add_argument("--big-rounds", type=int, default=1, help="rounds at --count")
    ap.add_argument("--jobs", type=int, default=2, help="restore --jobs, both contenders")
    ap.add_argument("--json", type=Path, help="also write the rounds here as JSON")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    a = ap.parse_args()
    if a.quick:
        a.count, a.small = 100_000, 10_000
    work = a.keep or Path(tempfile.mkdtemp(prefix="pgbd-remap-bench-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        with EmbeddedCluster(MAJOR, settings=BENCHMARK_WAL) as c:
            b = Bench(c, work, a.jobs)
            head = (
                f"PostgreSQL {c.tc.version} ({c.tc.source}), {os.cpu_count()} cores,"
                f" {datetime.date.today().isoformat()}; {code_version()}; rounds:"
                f" {a.rounds} at {a.small:,}, {a.big_rounds} at {a.count:,}"
            )
            say(head)
            scales = [b.scale(a.small, a.rounds), b.scale(a.count, a.big_rounds)]
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(report(head, scales, a.jobs)))
    if a.json:
        doc: dict[str, Any] = {
            "head": head,
            "scales": [{"n": s.n, "rounds": [asdict(r) for r in s.rounds]} for s in scales],
        }
        a.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
