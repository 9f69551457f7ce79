"""Packed dump against what the server sends (issue 27, item 2), side by side in one run.

Anchors run through psql (a child under /usr/bin/time, output to /dev/null):
- ``COPY (SELECT oid, lo_get(oid) FROM pg_largeobject_metadata) TO STDOUT (FORMAT binary)``
  (an LO over 1 GiB cannot pass through one bytea: such LOs are read by a second COPY of
  ``lo_get(oid, offset, 64 MiB)`` rows, and the two times are added);
- ``COPY pg_largeobject TO STDOUT (FORMAT binary)`` (superuser only);
- ``COPY (SELECT oid, lomowner, lomacl FROM pg_largeobject_metadata) TO STDOUT (FORMAT binary)``.
Contenders: ``pgblobdump dump`` with 1 and 2 jobs as the superuser (the pages path) and as a
role that may not read ``pg_largeobject`` (the lo_get path; the role has
``lo_compat_privileges = on`` so it may read every LO without an ACL change). Every dump is
a child under /usr/bin/time (wall includes Python start-up; peak RSS).

Cases (databases made once by ``pgblobdump generate`` and kept; reused on later runs):
- ``k4``: 100,000 x 4 KiB random;
- ``mix``: ``generate --preset realistic -n 4000 --seed 1`` plus one LO of 1.08 GiB random
  bytes (written with lo_put in 4 MiB pieces);
- ``e100k``, ``e1m``: 100,000 and 1,000,000 empty LOs (memory flat from one to the other).

With ``--pg-dump``, the empty cases also run ``pg_dump 17 -Fc`` once (as the superuser,
output to a file under /var/tmp, removed after; about 100 s at 1M).

Usage: .venv/bin/python benchmarks/dump_rate.py [--server DSN] [--cases k4,mix,e100k,e1m]
[--pg-dump]
(``--server``: a running server's conninfo without dbname, e.g. from ``pgblobdump server
start``, whose databases are kept for the next run; default: a temporary embedded 17
cluster.)
To pin the code under test while the package is edited, run from an exported commit:
``git archive HEAD | tar -x -C /var/tmp/snap; PYTHONPATH=/var/tmp/snap python ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg
from scratch import say

import pgblobdump
from pgblobdump.proc import run_measured
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

MAJOR = 17
GNU_TIME = Path("/usr/bin/time")
READER = "pgbd_bench_lo_get"
BIG_LO = (1 << 30) + (80 << 20) + 12345


@dataclass
class Row:
    case: str
    step: str
    wall: float
    rss_mb: float | None
    mb: float
    ratio: str = ""


class Bench:
    def __init__(self, server: str, work: Path) -> None:
        self.server = server
        self.work = work
        tc = toolchain.find(MAJOR, ("psql", "pg_dump"))
        self.psql = tc.tool("psql")
        self.pg_dump = tc.tool("pg_dump")
        self.with_pg_dump = False
        self.pgblobdump = [sys.executable, "-m", "pgblobdump"]
        self.rows: list[Row] = []
        self.verdicts: list[str] = []

    def dsn(self, db: str, role: str | None = None) -> str:
        return f"{self.server} dbname={db}" + (f" user={role}" if role else "")

    def _exists(self, db: str) -> bool:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            return bool(
                conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone()
            )

    def prepare(self, db: str, *gen: str, big: bool = False) -> None:
        if self._exists(db):
            say(f"{db}: reused")
        else:
            with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {db}")
            say(f"{db}: generate {' '.join(gen)} ...")
            subprocess.run([*self.pgblobdump, "generate", "-d", self.dsn(db), *gen, "--json"],
                           check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            if big:
                self._big_lo(db)
        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (READER,)).fetchone():
                conn.execute(f"CREATE ROLE {READER} LOGIN")
                conn.execute(f"ALTER ROLE {READER} SET lo_compat_privileges = on")

    def _big_lo(self, db: str) -> None:
        say(f"{db}: one LO of {BIG_LO:,} bytes ...")
        with psycopg.connect(self.dsn(db)) as conn:
            row = conn.execute("SELECT max(oid)::int8 + 1000 FROM pg_largeobject_metadata")
            oid = row.fetchone()[0]  # type: ignore[index]
            conn.execute("SELECT lo_create(%s::int8::oid)", (oid,))
            off = 0
            while off < BIG_LO:
                n = min(4 << 20, BIG_LO - off)
                conn.execute("SELECT lo_put(%s::int8::oid, %s, %s)", (oid, off, os.urandom(n)))
                off += n

    def sizes(self, db: str) -> tuple[int, int, list[tuple[int, int]]]:
        """(LOs, bytes, [(oid, size) of LOs over 1 GiB]), each size from ``lo_lseek64``."""
        with psycopg.connect(self.dsn(db)) as conn:
            rows = conn.execute(  # each descriptor closed at once (open ones slow lo_open)
                "SELECT s.oid::int8, lo_lseek64(s.fd, 0, 2) + 0 * lo_close(s.fd) FROM"
                " (SELECT oid, lo_open(oid, 262144) AS fd FROM pg_largeobject_metadata"
                " OFFSET 0) s"
            ).fetchall()
        big = [(int(o), int(s)) for o, s in rows if s > 1 << 30]
        return len(rows), sum(int(s) for _, s in rows), big

    def psql_copy(self, db: str, query: str, what: str) -> float:
        st = run_measured(
            [str(self.psql), "-X", "-q", "-d", self.dsn(db), "-c",
             f"COPY ({query}) TO STDOUT (FORMAT binary)"],
            gnu_time=GNU_TIME, what=what,
        )  # fmt: skip
        say(f"{what}: {st.wall_s:.2f} s")
        return st.wall_s

    def pg_dump_fc(self, db: str) -> tuple[float, float]:
        """(wall, peak RSS MB) of ``pg_dump -Fc`` of ``db``."""
        out = self.work / f"{db}.pgdump"
        st = run_measured([str(self.pg_dump), "-Fc", "-d", self.dsn(db), "-f", str(out)],
                          gnu_time=GNU_TIME, what=f"{db}: pg_dump -Fc")  # fmt: skip
        out.unlink(missing_ok=True)
        say(f"{db}: pg_dump {MAJOR} -Fc: {st.wall_s:.2f} s, {st.max_rss_kb / 1024:.0f} MB")
        return st.wall_s, st.max_rss_kb / 1024

    def lo_get_anchor(self, db: str, big: list[tuple[int, int]]) -> float:
        skip = ",".join(str(o) for o, _ in big) or "0"
        t = self.psql_copy(db, "SELECT oid, lo_get(oid) FROM pg_largeobject_metadata"
                           f" WHERE oid NOT IN ({skip})", f"{db}: lo_get COPY")  # fmt: skip
        for oid, size in big:
            t += self.psql_copy(
                db, f"SELECT lo_get({oid}, o, 64 << 20) FROM generate_series(0, {size - 1},"
                " 64 << 20) o", f"{db}: lo_get COPY of LO {oid} in 64 MiB rows")  # fmt: skip
        return t

    def dump(self, db: str, jobs: int, role: str | None) -> tuple[float, float, float]:
        """(wall, peak RSS MB, the dump's own seconds)."""
        out = self.work / f"{db}-{jobs}-{role or 'su'}"
        shutil.rmtree(out, ignore_errors=True)
        what = f"{db}: dump -j {jobs} ({'lo_get' if role else 'pages'} path)"
        report = self.work / "dump.json"
        st = run_measured(
            [*self.pgblobdump, "dump", "-d", self.dsn(db, role), "-o", str(out), "-j",
             str(jobs), "--json"],
            gnu_time=GNU_TIME, stdout=report, what=what,
        )  # fmt: skip
        own = float(json.loads(report.read_text())["seconds"])
        shutil.rmtree(out, ignore_errors=True)
        say(f"{what}: {st.wall_s:.2f} s ({own:.2f} s its own), {st.max_rss_kb / 1024:.0f} MB")
        return st.wall_s, st.max_rss_kb / 1024, own

    # -- cases --------------------------------------------------------------------------
    def bytes_case(self, db: str, label: str) -> dict[str, float]:
        n, total, big = self.sizes(db)
        mb = total / 1e6
        case = f"{label} ({n:,} LOs, {mb:,.0f} MB)"
        a = self.lo_get_anchor(db, big)
        p = self.psql_copy(db, "SELECT * FROM pg_largeobject", f"{db}: pages COPY")
        w = {"lo_get": a, "pages": p}
        self.rows.append(Row(case, "anchor: lo_get COPY (psql)", a, None, mb, "1.00"))
        self.rows.append(Row(case, "anchor: COPY pg_largeobject (psql)", p, None, mb,
                             f"{p / a:.2f}x the lo_get COPY"))  # fmt: skip
        for role in (None, READER):
            for jobs in (1, 2):
                wall, rss, _own = self.dump(db, jobs, role)
                key = f"{'lo_get' if role else 'pages'}_j{jobs}"
                w[key], w[f"rss_{key}"] = wall, rss
                ratio = f"**{wall / a:.2f}x** the lo_get COPY"
                if role is None:
                    ratio += f"; **{wall / p:.2f}x** COPY pg_largeobject"
                path = "lo_get path" if role else "pages path"
                self.rows.append(Row(case, f"dump --jobs {jobs} ({path})", wall, rss, mb, ratio))
        return w

    def empty_case(self, db: str, label: str, n: int) -> dict[str, float]:
        case = f"{label} ({n:,} empty LOs)"
        a = self.psql_copy(db, "SELECT oid, lomowner, lomacl FROM pg_largeobject_metadata",
                           f"{db}: metadata COPY")  # fmt: skip
        w = {"meta": a}
        self.rows.append(Row(case, "anchor: metadata COPY (psql)", a, None, 0, "1.00"))
        for role in (None, READER):
            for jobs in (1, 2):
                wall, rss, own = self.dump(db, jobs, role)
                key = f"{'lo_get' if role else 'pages'}_j{jobs}"
                w[key], w[f"rss_{key}"], w[f"own_{key}"] = wall, rss, own
                path = "lo_get path" if role else "pages path"
                self.rows.append(Row(case, f"dump --jobs {jobs} ({path})", wall, rss, 0,
                                     f"**{wall / a:.2f}x** the metadata COPY"
                                     f" ({own / a:.2f}x without start-up)"))  # fmt: skip
        if self.with_pg_dump:
            wall, rss = self.pg_dump_fc(db)
            w["pg_dump"] = wall
            best = min(w["pages_j1"], w["pages_j2"])
            self.rows.append(Row(case, f"anchor: pg_dump {MAJOR} -Fc", wall, rss, 0,
                                 f"{wall / a:.2f}x the metadata COPY; **{wall / best:.1f}x**"
                                 " the faster pages-path dump"))  # fmt: skip
        return w


def verdicts(res: dict[str, dict[str, float]]) -> list[str]:
    out = []

    def line(ok: bool, text: str) -> None:
        out.append(f"- **{'met' if ok else 'MISSED'}**: {text}")

    if "k4" in res:
        k = res["k4"]
        for path in ("pages", "lo_get"):
            r1, r2 = k[f"{path}_j1"] / k["lo_get"], k[f"{path}_j2"] / k["lo_get"]
            line(max(r1, r2) <= 1.5, f"100k x 4 KiB, {path} path, within 1.5x of the lo_get"
                 f" COPY: {r1:.2f}x (1 job), {r2:.2f}x (2 jobs)")  # fmt: skip
        p1, p2 = k["pages_j1"] / k["pages"], k["pages_j2"] / k["pages"]
        line(min(p1, p2) <= 2.0, f"100k x 4 KiB within 2x of COPY pg_largeobject (superuser):"
             f" {p1:.2f}x (1 job), {p2:.2f}x (2 jobs)")  # fmt: skip
    if "mix" in res:
        m = res["mix"]
        best = min(m["pages_j1"], m["pages_j2"])
        rss = max(v for k, v in m.items() if k.startswith("rss_"))
        line(best / m["lo_get"] <= 1.5, f"realistic corpus within 1.5x of the lo_get COPY"
             f" in MB/s: {m['pages_j1'] / m['lo_get']:.2f}x (1 job), "
             f"{m['pages_j2'] / m['lo_get']:.2f}x (2 jobs); lo_get path"
             f" {m['lo_get_j1'] / m['lo_get']:.2f}x /"
             f" {m['lo_get_j2'] / m['lo_get']:.2f}x")  # fmt: skip
        line(rss < 150, f"realistic corpus peak RSS under 150 MB: at most {rss:.0f} MB")
    if "e1m" in res:
        e = res["e1m"]
        best = min(e["pages_j1"], e["pages_j2"])
        line(best / e["meta"] <= 2.5, f"1M empty within 2.5x of the metadata COPY:"
             f" {e['pages_j1'] / e['meta']:.2f}x (1 job), {e['pages_j2'] / e['meta']:.2f}x"
             f" (2 jobs); lo_get path {e['lo_get_j1'] / e['meta']:.2f}x")  # fmt: skip
        if "pg_dump" in e:
            line(e["pg_dump"] / best >= 100, f"1M empty at least 100x pg_dump {MAJOR} -Fc:"
                 f" {e['pg_dump'] / best:.1f}x")  # fmt: skip
    if "e1m" in res and "e100k" in res:
        grew = {k[4:]: (res["e100k"][k], res["e1m"][k]) for k in res["e1m"] if k.startswith("rss_")}
        flat = all(b <= a * 1.1 + 5 for a, b in grew.values())
        line(flat, "memory flat from 100k to 1M empty: " + ", ".join(
            f"{k} {a:.0f} -> {b:.0f} MB" for k, (a, b) in grew.items()))  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", help="conninfo of a running server (no dbname)")
    ap.add_argument("--cases", default="k4,mix,e100k,e1m")
    ap.add_argument("--pg-dump", action="store_true", help="pg_dump -Fc on the empty cases")
    args = ap.parse_args()
    cases = args.cases.split(",")
    root = Path(pgblobdump.__file__).resolve().parent.parent
    say(f"pgblobdump from {root}")
    with contextlib.ExitStack() as stack:
        server = args.server
        if server is None:
            c = stack.enter_context(EmbeddedCluster(MAJOR, settings=BENCHMARK_WAL))
            server = c.conninfo("postgres", tcp=True).replace(" dbname=postgres", "")
        tmp = stack.enter_context(
            tempfile.TemporaryDirectory(prefix="pgbd-dumprate-", dir="/var/tmp")
        )
        b = Bench(server, Path(tmp))
        b.with_pg_dump = args.pg_dump
        res: dict[str, dict[str, float]] = {}
        specs = {
            "k4": (("-n", "100k", "--size", "4KiB", "--content", "random"), False),
            "mix": (("-n", "4000", "--preset", "realistic", "--seed", "1"), True),
            "e100k": (("-n", "100k"), False),
            "e1m": (("-n", "1M"), False),
        }
        for c in cases:
            gen, big = specs[c]
            b.prepare(f"dumprate_{c}", *gen, big=big)
        for c in cases:
            db = f"dumprate_{c}"
            if c == "k4":
                res[c] = b.bytes_case(db, "100k x 4 KiB random")
            elif c == "mix":
                res[c] = b.bytes_case(db, "realistic + one 1.08 GiB LO")
            else:
                res[c] = b.empty_case(db, c, 100_000 if c == "e100k" else 1_000_000)
        print(f"\n{datetime.date.today()}, {root}, PostgreSQL {MAJOR} over TCP loopback\n")
        print("| case | step | wall s | peak RSS MB | MB/s | ratio |")
        print("|---|---|---:|---:|---:|---|")
        for r in b.rows:
            rss = f"{r.rss_mb:.0f}" if r.rss_mb is not None else ""
            mbs = f"{r.mb / r.wall:,.0f}" if r.mb else ""
            print(f"| {r.case} | {r.step} | {r.wall:.2f} | {rss} | {mbs} | {r.ratio} |")
        print()
        print("\n".join(verdicts(res)))


if __name__ == "__main__":
    main()
