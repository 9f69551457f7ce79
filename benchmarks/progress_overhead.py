"""What progress and -v cost: dump and restore with nothing shown, with --progress lines,
with bars on a terminal (a pty), and with -v, side by side in one run; ratios to the
silent run of the same command.

Every statement goes through the logging cursor (pg/sqllog.py) and every progress call
through the display, so this is where an overhead would show.

Usage: .venv/bin/python benchmarks/progress_overhead.py [--major 17] [--los 300000]
"""

from __future__ import annotations

import argparse
import os
import pty
import shutil
import subprocess
import sys
import tempfile
import time

import psycopg

from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

PGBLOBDUMP = os.path.join(os.path.dirname(sys.executable), "pgblobdump")

MODES = {"silent": [], "--progress": ["--progress"], "bars (pty)": [], "-v": ["-v"]}


def fresh_db(c: EmbeddedCluster, name: str) -> str:
    with psycopg.connect(c.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return c.conninfo(name)


def timed(args: list[str], tty: bool) -> float:
    """Wall seconds of one pgblobdump run; stderr a pty when ``tty`` (so bars are drawn)."""
    t = time.perf_counter()
    if tty:
        leader, follower = pty.openpty()
        proc = subprocess.Popen([PGBLOBDUMP, *args], stdout=subprocess.DEVNULL, stderr=follower)
        os.close(follower)
        while True:  # drain the pty, as a terminal would
            try:
                if not os.read(leader, 65536):
                    break
            except OSError:
                break
        proc.wait()
        os.close(leader)
    else:
        proc = subprocess.run([PGBLOBDUMP, *args], capture_output=True, check=False)  # type: ignore[assignment]
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{args}: exit {proc.returncode}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--major", type=int, default=17)
    ap.add_argument("--los", type=int, default=300_000)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="pgbd-progress-")
    try:
        with EmbeddedCluster(a.major, settings=BENCHMARK_WAL) as c:
            src = fresh_db(c, "src")
            subprocess.run([PGBLOBDUMP, "generate", "-d", src, "-n", str(a.los), "--size", "64",
                            "-q"], check=True)  # fmt: skip
            print(f"| {a.los:,} LOs x 64 B, PostgreSQL {a.major} | mode | wall s | / silent |")
            print("|---|---|---|---|")
            for what in ("dump", "restore"):
                base = None
                for k, (mode, extra) in enumerate(MODES.items()):
                    out = os.path.join(work, f"a{k}")
                    if what == "dump":
                        args = ["dump", "-d", src, "-o", out, *extra]
                    else:
                        args = ["restore", os.path.join(work, "a0"), "-d",
                                fresh_db(c, f"dst{k}"), *extra]  # fmt: skip
                    s = timed(args, tty=mode.startswith("bars"))
                    base = base or s
                    print(f"| {what} | {mode} | {s:.2f} | {s / base:.2f} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
