"""Benchmark: `pgblobdump toc summary` / `toc los` against `pg_restore -l | wc -l`.

Builds (or reuses, with ``--archive 16=PATH --archive 17=PATH``) archives of 1,000,000
empty large objects dumped by pg_dump 16 and 17 (custom format), then times each reader
once under ``/usr/bin/time -f '%e %M'`` and prints wall time, peak RSS and ratios. The
rows: ``toc show`` (the whole listing; the target: no slower than pg_restore -l on the
16 archive), ``toc summary``, ``toc los --json``, ``toc extract`` of the last LO in the data,
and the one-pass walk ``pack`` reads archives with (``los.iter_data``: every LO with its
owner, ACL and comment, and every byte of it, decompressed), run as ``--walk PATH``.

    .venv/bin/python benchmarks/toc_vs_pg_restore.py --out /var/tmp/pgbd-bench
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

MAJORS = (16, 17)
SHOW_TARGET = 1.0
"""toc show of the 1M-entry pg_dump 16 archive no slower than pg_restore -l (issue 27)."""


def build(out: Path, count: int) -> dict[int, Path]:
    """Dump ``count`` empty LOs with pg_dump 16 and 17 into ``out``; reuse existing files."""
    paths = {m: out / f"los{count}_pg{m}.dump" for m in MAJORS}
    if all(p.is_file() for p in paths.values()):
        return paths
    out.mkdir(parents=True, exist_ok=True)
    with EmbeddedCluster(16, settings=BENCHMARK_WAL) as cluster:
        with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        with psycopg.connect(cluster.conninfo("bench"), autocommit=True) as conn:
            t = time.monotonic()
            conn.execute(f"SELECT lo_create(id) FROM generate_series(1, {count}) id")
            print(f"created {count} LOs in {time.monotonic() - t:.1f} s", file=sys.stderr)
        for major, path in paths.items():
            if path.is_file():
                continue
            pg_dump = toolchain.find(major).tool("pg_dump")
            tmp = path.with_suffix(".tmp")
            t = time.monotonic()
            subprocess.run(
                [str(pg_dump), "-Fc", "-f", str(tmp), "-d", cluster.conninfo("bench")],
                check=True,
            )
            tmp.rename(path)
            print(f"pg_dump {major}: {time.monotonic() - t:.1f} s -> {path}", file=sys.stderr)
    return paths


def timed(shell: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of the first command of ``shell``, via GNU time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        cmd = f"/usr/bin/time -o {tf.name} -f '%e %M' {shell}"
        subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True, stdout=subprocess.DEVNULL)
        wall, rss_kb = tf.read().split()[-2:]
    return float(wall), int(rss_kb) / 1024


def walk(path: Path) -> None:
    """Every LO of the archive with its bytes, through los.iter_data (as pack reads)."""
    from pgblobdump.toc import lo as los
    from pgblobdump.toc.reader import open_archive

    count = total = 0
    with open_archive(path) as archive:
        for _lo, pieces in los.iter_data(archive):
            count += 1
            total += sum(map(len, pieces))
    print(f"{count:,} LOs, {total:,} bytes", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/var/tmp/pgbd-bench"))
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument(
        "--archive",
        action="append",
        default=[],
        metavar="MAJOR=PATH",
        help="Reuse an archive instead of building it (repeatable).",
    )
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--walk", type=Path, help=argparse.SUPPRESS)  # the walk row, in a child
    args = ap.parse_args()
    if args.walk:
        walk(args.walk)
        return
    given = {int(k): Path(v) for k, v in (a.split("=", 1) for a in args.archive)}
    paths = given if set(given) >= set(MAJORS) else {**build(args.out, args.count), **given}
    if args.build_only:
        print(paths)
        return
    exe = Path(sys.executable).with_name("pgblobdump")
    print(f"machine: {os.cpu_count()} cores; python {sys.version.split()[0]}")
    print("| archive | command | wall s | peak RSS MB | wall ratio | RSS ratio |")
    print("|---|---|---:|---:|---:|---:|")
    shown: list[float] = []
    for major, path in sorted(paths.items()):
        pg_restore = toolchain.find(major).tool("pg_restore")
        runs = [
            ("pg_restore -l (to wc -l)", f"{pg_restore} -l {path} | wc -l"),
            ("toc show (to wc -l)", f"{exe} toc show {path} | wc -l"),
            ("toc summary", f"{exe} toc summary {path}"),
            ("toc los --json", f"{exe} toc los {path} --json > /dev/null"),
            ("toc extract (last LO)", f"{exe} toc extract {path} {args.count} > /dev/null"),
            ("walk every LO's bytes", f"{sys.executable} {__file__} --walk {path}"),
        ]
        base: tuple[float, float] | None = None
        for label, shell in runs:
            wall, rss = timed(shell)
            base = base or (max(wall, 0.01), rss)  # a listing can take under 10 ms
            print(
                f"| pg_dump {major} ({path.stat().st_size / 1e6:.1f} MB) | {label} | {wall:.2f}"
                f" | {rss:.0f} | {wall / base[0]:.2f} | {rss / base[1]:.2f} |",
                flush=True,
            )
            if label.startswith("toc show") and major == 16:
                shown.append(wall / base[0])
    for ratio in shown:
        verdict = "met" if ratio <= SHOW_TARGET else "missed"
        print(f"\ntoc show / pg_restore -l of the pg_dump 16 archive = **{ratio:.2f}x**"
              f" (target {SHOW_TARGET}x: {verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
