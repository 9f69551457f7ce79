"""Incremental dumps and chains (issue 29): ``dump --since``, the restore of a chain and
``merge``, each against the full archive of the same snapshot, side by side in one run on
one PostgreSQL 17 server (``--server``, or an embedded 17 cluster over TCP loopback).

Cases:
1. ``--los`` (100k) random LOs of ``--size`` (4 KiB); ``--changed`` (1%) of them changed
   with every kind of change (see ``change``); ``dump --since FULL`` against a full
   ``dump`` of the same database state. Targets: time <= 20% of the full dump's, archive
   size <= 3% of the full archive's.
2. The same with ``--big-los`` (400) random LOs of ``--big-size`` (1 MiB): archive size
   <= 5% of the full archive's; time ratio reported.
3. On case 1's database, a chain of a full archive and ``--rounds`` (5) incrementals,
   each after a round changing ``--changed`` of the LOs and dumped ``--since`` the one
   before (case 1's full archive is its root, case 1's incremental its first
   incremental). Then ``restore`` of the last incremental into a fresh database against
   ``restore`` of a fresh full dump of the same snapshot (nothing changed after the last
   round): target within 1.2x; and ``merge`` of the chain against that fresh full dump:
   target ratio < 1.

Every command is a ``pgblobdump`` child under ``/usr/bin/time`` (wall includes Python
start-up; peak RSS); contenders are interleaved, each ``--repeat`` (3) times after one
untimed warm-up run each (``--no-warmup``: none), and ratios are of the medians. The
``--json`` ``seconds`` of each command (its own time, without start-up) are printed too.
Checks: every restore's LO count; ``verify FULL -d`` of the chain's restore and ``verify
MERGED -d`` of the source (same LOs, bytes and metadata).
The database is ``VACUUM ANALYZE``d and checkpointed after the data is made and after each
round of changes (hint bits set and pages written out before any clock starts). One more
``-v dump --since`` per incremental case prints its phases with their timings.

Usage: .venv/bin/python benchmarks/incremental.py [--server "host=... port=... user=..."]
       [--los 100000] [--size 4KiB] [--big-los 400] [--big-size 1MiB] [--changed 0.01]
       [--rounds 5] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from scratch import Scratch, say

import pgblobdump
from pgblobdump.proc import ProcessStats, run_measured
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster
from pgblobdump.units import format_bytes, parse_count, parse_size

MAJOR = 17
PGBLOBDUMP = Path(sys.executable).with_name("pgblobdump")
GNU_TIME = Path("/usr/bin/time")
OWNER = "inc_owner"
READER = "inc_reader"
KINDS = (
    "in place",
    "append",
    "truncate",
    "unlink+recreate",
    "new",
    "unlink",
    "owner",
    "grant",
    "comment",
)
"""The kinds of change, in the order a small count takes them (the first ones change
bytes: 4 changed LOs are lo_put in place, append, lo_truncate and unlink+recreate)."""


def code_version() -> str:
    root = Path(pgblobdump.__file__).resolve().parent.parent
    git = subprocess.run(
        ["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True, text=True
    )
    return f"pgblobdump from {root}" + (f" ({git.stdout.strip()})" if git.returncode == 0 else "")


def archive_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@dataclass
class Runs:
    """One contender's repeated runs: wall (whole command), its own ``--json`` seconds,
    peak RSS."""

    walls: list[float] = field(default_factory=list)
    owns: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)

    def add(self, st: ProcessStats, own: float) -> None:
        self.walls.append(st.wall_s)
        self.owns.append(own)
        self.rss_mb.append(st.max_rss_kb / 1024)

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def own(self) -> float:
        return statistics.median(self.owns)

    @property
    def rss(self) -> float:
        return max(self.rss_mb)

    def spread(self) -> str:
        return " / ".join(f"{w:.2f}" for w in self.walls)


class Bench(Scratch):
    def __init__(self, server: str, work: Path, repeat: int, warmup: bool = True) -> None:
        self.server = server
        self.work = work
        self.repeat = repeat
        self.warmup = warmup
        self.phases: list[tuple[str, str]] = []
        self.steps: list[tuple[str, str, Runs, str]] = []
        self.targets: list[tuple[str, str, str, str, bool | None]] = []
        self.rounds: list[tuple[int, int, int, float, float, int]] = []
        self.rnd = random.Random(29)

    def dsn(self, db: str) -> str:
        return f"{self.server} dbname={db}"

    # -- running ----------------------------------------------------------------------
    def run(self, argv: Sequence[str | Path], what: str) -> tuple[ProcessStats, float]:
        """``argv`` (a pgblobdump command with ``--json``) measured: its stats and the
        ``seconds`` it reports itself."""
        out = self.work / "out.json"
        say(f"{what} ...")
        st = run_measured(
            [str(PGBLOBDUMP), *map(str, argv)], gnu_time=GNU_TIME, stdout=out, what=what
        )
        doc = json.loads(out.read_text() or "{}")
        own = float(doc.get("seconds", 0.0)) if isinstance(doc, dict) else 0.0
        say(f"{what}: {st.wall_s:.2f} s (own {own:.2f} s), {st.max_rss_kb / 1024:.0f} MB")
        return st, own

    def dump(self, db: str, out: Path, since: Path | None = None) -> tuple[ProcessStats, float]:
        shutil.rmtree(out, ignore_errors=True)
        argv: list[str | Path] = ["dump", "-d", self.dsn(db), "-o", out, "--json"]
        if since is not None:
            argv += ["--since", since]
        label = f"dump --since {since.name}" if since else "dump (full)"
        return self.run(argv, f"{db}: {label} -> {out.name}")

    def interleaved(
        self, contenders: dict[str, Callable[[], tuple[ProcessStats, float]]]
    ) -> dict[str, Runs]:
        runs = {name: Runs() for name in contenders}
        for name, go in contenders.items():
            if self.warmup:
                say(f"(warm-up run of {name}, not counted)")
                go()
        for _ in range(self.repeat):
            for name, go in contenders.items():
                runs[name].add(*go())
        return runs

    def vacuum(self, db: str) -> None:
        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE pg_largeobject_metadata, pg_largeobject")
            conn.execute("CHECKPOINT")  # no write-back of the new pages during a timed run

    def make(self, db: str, n: int, size: int) -> None:
        self.fresh_db(db)
        say(f"{db}: generate {n:,} x {format_bytes(size)} random ...")
        subprocess.run(
            [
                str(PGBLOBDUMP),
                "generate",
                "-d",
                self.dsn(db),
                "-n",
                str(n),
                "--size",
                str(size),
                "--content",
                "random",
                "--json",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            for role in (OWNER, READER):
                if not conn.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)
                ).fetchone():
                    conn.execute(f"CREATE ROLE {role}")
        self.vacuum(db)

    def live(self, db: str) -> list[int]:
        with psycopg.connect(self.dsn(db)) as conn:
            return [
                int(r[0])
                for r in conn.execute("SELECT oid::int8 FROM pg_largeobject_metadata ORDER BY 1")
            ]

    def change(self, db: str, share: float, size: int) -> dict[str, int]:
        """``share`` of the LOs changed (at least one), spread over KINDS in turn: lo_put
        of 100 bytes at offset 100 (in place), lo_put of 100 bytes at offset ``size``
        (append), lo_truncate to half, lo_unlink then lo_from_bytea with new bytes under
        the same OID, new LOs of ``size`` (OIDs the server picks), lo_unlink, ALTER LARGE
        OBJECT OWNER, GRANT SELECT, COMMENT ON. Distinct LOs, drawn at random from those
        there; one transaction per kind. The count per kind."""
        oids = self.live(db)
        k = max(1, round(len(oids) * share))
        per = {
            kind: k // len(KINDS) + (1 if i < k % len(KINDS) else 0) for i, kind in enumerate(KINDS)
        }
        pick = iter(self.rnd.sample(oids, k - per["new"]))
        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            cur = conn.cursor()
            for kind, count in per.items():
                mine = [next(pick) for _ in range(count)] if kind != "new" else []
                with conn.transaction():
                    if kind == "in place":
                        cur.executemany(
                            "SELECT lo_put(%s::oid, 100, %s)", [(o, os.urandom(100)) for o in mine]
                        )
                    elif kind == "append":
                        cur.executemany(
                            "SELECT lo_put(%s::oid, %s::int8, %s)",
                            [(o, size, os.urandom(100)) for o in mine],
                        )
                    elif kind == "truncate":
                        cur.executemany(
                            "SELECT lo_truncate(lo_open(%s::oid, 131072), %s)",
                            [(o, size // 2) for o in mine],
                        )
                    elif kind == "unlink+recreate":
                        for o in mine:
                            cur.execute("SELECT lo_unlink(%s::oid)", (o,))
                            cur.execute("SELECT lo_from_bytea(%s::oid, %s)", (o, os.urandom(size)))
                    elif kind == "new":
                        for _ in range(count):
                            cur.execute("SELECT lo_from_bytea(0, %s)", (os.urandom(size),))
                    elif kind == "unlink":
                        cur.executemany("SELECT lo_unlink(%s::oid)", [(o,) for o in mine])
                    elif kind == "owner":
                        for o in mine:
                            cur.execute(f"ALTER LARGE OBJECT {o} OWNER TO {OWNER}")
                    elif kind == "grant":
                        for o in mine:
                            cur.execute(f"GRANT SELECT ON LARGE OBJECT {o} TO {READER}")
                    elif kind == "comment":
                        for o in mine:
                            cur.execute(f"COMMENT ON LARGE OBJECT {o} IS 'round {o}'")
        self.vacuum(db)
        say(f"{db}: changed {k:,} LOs: " + ", ".join(f"{n} {kind}" for kind, n in per.items()))
        return per

    def phase_timings(self, case: str, db: str, out: Path, since: Path) -> None:
        """One more ``-v dump --since`` (not counted): its phases and their timings."""
        shutil.rmtree(out, ignore_errors=True)
        done = subprocess.run(
            [str(PGBLOBDUMP), "-v", "dump", "-d", self.dsn(db), "-o", str(out), "--since",
             str(since), "--json"], capture_output=True, text=True, check=True,
        )  # fmt: skip
        said = [ln.removeprefix("pgblobdump: ").replace(str(since), since.name)
                for ln in done.stderr.splitlines()]  # fmt: skip
        kept = [ln for ln in said if ": done in " in ln or " carried from the chain" in ln]
        own = json.loads(done.stdout).get("seconds")
        self.phases.append((case, "; ".join(kept) + f" (own {own} s)"))

    def check_count(self, dsn: str, want: int, what: str) -> None:
        got = self.lo_count(dsn)
        if got != want:
            raise SystemExit(f"{what}: {got:,} LOs in the target, not {want:,}")

    def verify(self, archive: Path, db: str, what: str) -> None:
        say(f"check: {what} ...")
        done = subprocess.run(
            [str(PGBLOBDUMP), "verify", str(archive), "-d", self.dsn(db), "--json"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise SystemExit(f"{what}: verify says\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        say(f"check: {what}: equal")

    # -- recording --------------------------------------------------------------------
    def step(self, case: str, what: str, runs: Runs, note: str = "") -> None:
        self.steps.append((case, what, runs, note))

    def target(self, case: str, figure: str, ratio: str, target: str, ok: bool | None) -> None:
        self.targets.append((case, figure, ratio, target, ok))

    # -- cases ------------------------------------------------------------------------
    def incremental_case(
        self,
        case: str,
        db: str,
        n: int,
        size: int,
        share: float,
        size_target: float,
        time_target: float | None,
    ) -> tuple[Path, Path]:
        """``n`` LOs of ``size`` made, FULL0 dumped, ``share`` changed, then full and
        ``--since FULL0`` dumps of the new state interleaved. The full archive of the new
        state and the incremental."""
        self.make(db, n, size)
        d = self.work / db
        d.mkdir(exist_ok=True)
        full0, full1, inc1 = d / "full0.pbd", d / "full1.pbd", d / "inc1.pbd"
        self.dump(db, full0)
        self.change(db, share, size)
        runs = self.interleaved(
            {"full": lambda: self.dump(db, full1), "inc": lambda: self.dump(db, inc1, since=full0)}
        )
        fb, ib = archive_bytes(full1), archive_bytes(inc1)
        self.phase_timings(case, db, inc1, full0)
        self.step(case, "dump (full) of the changed state", runs["full"], format_bytes(fb))
        self.step(case, "dump --since FULL (incremental)", runs["inc"], format_bytes(ib))
        t = runs["inc"].wall / runs["full"].wall
        own = runs["inc"].own / runs["full"].own
        self.target(
            case,
            f"time, incremental / full: {runs['inc'].wall:.2f} / "
            f"{runs['full'].wall:.2f} s (own time: {own:.1%})",
            f"{t:.1%}",
            f"<= {time_target:.0%}" if time_target else "(reported)",
            None if time_target is None else t <= time_target,
        )
        self.target(
            case,
            f"archive size, incremental / full: {format_bytes(ib)} / {format_bytes(fb)}",
            f"{ib / fb:.2%}",
            f"<= {size_target:.0%}",
            ib / fb <= size_target,
        )
        return full1, inc1

    def chain_case(
        self, case: str, db: str, inc1: Path, share: float, size: int, rounds: int
    ) -> None:
        d = self.work / db
        prev = inc1
        for r in range(2, rounds + 1):
            self.change(db, share, size)
            cur = d / f"inc{r}.pbd"
            st, own = self.dump(db, cur, since=prev)
            self.rounds.append(
                (r, self.lo_count(self.dsn(db)), archive_bytes(cur), st.wall_s, own, r + 1)
            )
            prev = cur
        last = prev
        n = self.lo_count(self.dsn(db))
        full = d / "fullN.pbd"

        def restore(archive: Path, target: str) -> tuple[ProcessStats, float]:
            dsn = self.fresh_db(target)
            with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
                conn.execute("CHECKPOINT")  # the last restore's pages written out first
            got = self.run(
                ["restore", archive, "-d", dsn, "--json"], f"restore {archive.name} -> {target}"
            )
            self.check_count(dsn, n, f"restore {archive.name}")
            return got

        merged = d / "merged.pbd"

        def merge() -> tuple[ProcessStats, float]:
            shutil.rmtree(merged, ignore_errors=True)
            return self.run(["merge", last, "-o", merged, "--json"], f"merge {last.name}")

        merged2 = d / "merged2.pbd"

        def merge2() -> tuple[ProcessStats, float]:
            shutil.rmtree(merged2, ignore_errors=True)
            return self.run(["merge", inc1, "-o", merged2, "--json"], f"merge {inc1.name}")

        runs = self.interleaved(
            {"full": lambda: self.dump(db, full), "merge": merge, "merge2": merge2}
        )
        runs |= self.interleaved(
            {
                "restore full": lambda: restore(full, "inc_rfull"),
                "restore chain": lambda: restore(last, "inc_rchain"),
            }
        )
        self.verify(full, "inc_rchain", f"the chain's restore equals {full.name}")
        self.verify(merged, db, f"{merged.name} equals the source")
        for target in ("inc_rfull", "inc_rchain"):
            self.drop_db(target)
        self.step(
            case,
            "dump (full) of the last snapshot",
            runs["full"],
            format_bytes(archive_bytes(full)),
        )
        self.step(
            case,
            f"merge of the chain of {rounds + 1}",
            runs["merge"],
            format_bytes(archive_bytes(merged)),
        )
        self.step(
            case,
            f"(reference: merge of {inc1.name}, the chain of 2, an older snapshot)",
            runs["merge2"],
            format_bytes(archive_bytes(merged2)),
        )
        self.step(case, "restore of that full archive", runs["restore full"], f"{n:,} LOs")
        self.step(
            case,
            f"restore of the last incremental (chain of {rounds + 1})",
            runs["restore chain"],
            f"{n:,} LOs",
        )
        rr = runs["restore chain"].wall / runs["restore full"].wall
        self.target(
            case,
            f"restore, chain / full: {runs['restore chain'].wall:.2f} / "
            f"{runs['restore full'].wall:.2f} s",
            f"{rr:.2f}x",
            "<= 1.2x",
            rr <= 1.2,
        )
        mr = runs["merge"].wall / runs["full"].wall
        self.target(
            case,
            f"merge / fresh full dump: {runs['merge'].wall:.2f} / {runs['full'].wall:.2f} s",
            f"{mr:.2f}x",
            "< 1x",
            mr < 1,
        )

    # -- output -----------------------------------------------------------------------
    def report(self) -> str:
        out = [
            "| case | command | wall s (median) | runs, s | own s (median) | peak RSS MB"
            " | archive / note |",
            "|---|---|---:|---|---:|---:|---|",
        ]
        for case, what, r, note in self.steps:
            out.append(
                f"| {case} | {what} | {r.wall:.2f} | {r.spread()} | {r.own:.2f}"
                f" | {r.rss:.0f} | {note} |"
            )
        out += ["", "| case | figure | ratio | target | verdict |", "|---|---|---:|---|---|"]
        for case, figure, ratio, target, ok in self.targets:
            verdict = "-" if ok is None else "met" if ok else "**missed**"
            out.append(f"| {case} | {figure} | {ratio} | {target} | {verdict} |")
        if self.rounds:
            out += [
                "",
                "| chain round | LOs at snapshot | incremental archive | dump --since"
                " PREV wall s | own s | chain length |",
                "|---:|---:|---:|---:|---:|---:|",
            ]
            for rnd, n, size, wall, own, length in self.rounds:
                out.append(
                    f"| {rnd} | {n:,} | {format_bytes(size)} | {wall:.2f} | {own:.2f} | {length} |"
                )
        for case, text in self.phases:
            out += ["", f"{case}, phases of `-v dump --since` (one more run): {text}"]
        return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--server",
        help=f"conninfo of a running server, no dbname (default: an embedded {MAJOR} cluster)",
    )
    ap.add_argument("--los", type=parse_count, default=100_000, help="LOs of cases 1 and 3")
    ap.add_argument("--size", type=parse_size, default=4096, help="their size (4KiB)")
    ap.add_argument("--big-los", type=parse_count, default=400, help="LOs of case 2 (0: skip)")
    ap.add_argument("--big-size", type=parse_size, default=1 << 20, help="their size (1MiB)")
    ap.add_argument("--changed", type=float, default=0.01, help="share changed per round")
    ap.add_argument("--rounds", type=int, default=5, help="incrementals in the chain of case 3 (5)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each timed contender")
    ap.add_argument("--no-warmup", action="store_true", help="no untimed first run each")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="pgbd-inc-bench-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    cluster: EmbeddedCluster | None = None
    try:
        if a.server is None:
            cluster = EmbeddedCluster(MAJOR, settings=BENCHMARK_WAL).__enter__()
            server = cluster.conninfo("postgres", tcp=True).replace(" dbname=postgres", "")
        else:
            server = a.server
        b = Bench(server, work, a.repeat, not a.no_warmup)
        with psycopg.connect(b.dsn("postgres")) as conn:
            row = conn.execute("SELECT current_setting('server_version')").fetchone()
        head = (
            f"PostgreSQL {row[0] if row else '?'}, {os.cpu_count()} cores,"
            f" {datetime.date.today().isoformat()}; {code_version()}"
        )
        say(head)
        small = f"{a.los:,} x {format_bytes(a.size)}"
        pct = f"{a.changed * 100:g}%"
        _full1, inc1 = b.incremental_case(
            f"1. {small}, {pct} changed", "inc_k", a.los, a.size, a.changed, 0.03, 0.20
        )
        if a.big_los > 0:
            big = f"{a.big_los:,} x {format_bytes(a.big_size)}"
            b.incremental_case(
                f"2. {big}, {pct} changed", "inc_b", a.big_los, a.big_size, a.changed, 0.05, None
            )
            b.drop_db("inc_b")
        if a.rounds > 1:
            b.chain_case(
                f"3. {small}, chain of {a.rounds + 1}", "inc_k", inc1, a.changed, a.size, a.rounds
            )
        b.drop_db("inc_k")
    finally:
        if cluster is not None:
            cluster.__exit__(None, None, None)
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(head)
    print()
    print(b.report())


if __name__ == "__main__":
    main()
