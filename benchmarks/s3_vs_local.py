"""Packed dump and restore to and from S3 (SeaweedFS on loopback) against the same to and
from a local directory, and against pg_dump -Fc writing a local file, in one run.

Per scale (default 1M empty LOs and 100k x 4 KiB random): ``pgblobdump dump`` to a local
directory and to ``s3://``, ``pg_dump -Fc`` to a local file, then ``pgblobdump restore``
from each packed archive into a fresh database; every pgblobdump and pg_dump run is a
child under /usr/bin/time (peak RSS). Then ``cat`` of one LO from the S3 archive (the
index block and the frames it needs only). Target (targets.md): S3 within 1.3x of local;
``cat`` well under a second.

Usage: .venv/bin/python benchmarks/s3_vs_local.py [--major 17] [--scales 1M:0,100k:4KiB]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster
from pgblobdump.servers.seaweed import BUCKET, LocalS3
from pgblobdump.units import format_bytes, parse_count, parse_size

PGBLOBDUMP = os.path.join(os.path.dirname(sys.executable), "pgblobdump")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of a child under /usr/bin/time."""
    t0 = time.perf_counter()
    p = subprocess.run(
        ["/usr/bin/time", "-f", "PGBD %M", *argv], capture_output=True, text=True, env=env,
        check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{argv[:2]} failed: {p.stderr[-2000:]}")
    return seconds, int(p.stderr.strip().splitlines()[-1].split()[1])


def fresh_db(c: EmbeddedCluster, name: str) -> str:
    with psycopg.connect(c.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return c.conninfo(name)


def scale(c: EmbeddedCluster, s3: LocalS3, count: int, size: int, work: Path) -> list[str]:
    env = {**os.environ, **s3.env()}
    src = fresh_db(c, "pgbd_s3_src")
    gen = [PGBLOBDUMP, "generate", "-d", src, "-n", str(count), "--size", str(size)]
    subprocess.run(gen, check=True, capture_output=True)
    url = f"s3://{BUCKET}/bench-{count}-{size}-{time.time_ns()}"
    local = work / f"local-{count}-{size}"
    pg_dump = str(toolchain.find(c.tc.major, ("pg_dump",)).tool("pg_dump"))
    rows = []
    d_local = timed([PGBLOBDUMP, "dump", "-d", src, "-o", str(local)], env)
    d_s3 = timed([PGBLOBDUMP, "dump", "-d", src, "-o", url], env)
    custom = work / "pg_dump.custom"
    bare, _ = c.conninfo("pgbd_s3_src"), None
    d_pg = timed([pg_dump, "-Fc", "-f", str(custom), "-d", bare], env)
    r_local = timed([PGBLOBDUMP, "restore", str(local), "-d", fresh_db(c, "pgbd_s3_a")], env)
    r_s3 = timed([PGBLOBDUMP, "restore", url, "-d", fresh_db(c, "pgbd_s3_b")], env)
    with psycopg.connect(src) as conn:
        mid = conn.execute(
            "SELECT oid FROM pg_largeobject_metadata ORDER BY oid OFFSET %s LIMIT 1", (count // 2,)
        ).fetchone()[0]  # type: ignore[index]
    cat = timed([PGBLOBDUMP, "cat", url, str(mid), "-o", str(work / "one.bin")], env)
    label = f"{count:,} x {format_bytes(size)}"
    for what, (sec, rss), base in [
        ("dump to local dir", d_local, d_local[0]),
        ("dump to s3://", d_s3, d_local[0]),
        ("pg_dump -Fc to a local file", d_pg, d_local[0]),
        ("restore from local dir", r_local, r_local[0]),
        ("restore from s3://", r_s3, r_local[0]),
        (f"cat of LO {mid} from s3://", cat, None),
    ]:
        ratio = f"{sec / base:.2f}" if base else ""
        rows.append(f"| {label} | {what} | {sec:.2f} | {ratio} | {rss / 1024:.0f} MB |")
    shutil.rmtree(local, ignore_errors=True)
    custom.unlink(missing_ok=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--major", type=int, default=17)
    ap.add_argument("--scales", default="1M:0,100k:4KiB", help="COUNT:SIZE,...")
    args = ap.parse_args()
    with (
        EmbeddedCluster(args.major, settings=BENCHMARK_WAL) as c,
        LocalS3() as s3,
        tempfile.TemporaryDirectory(prefix="pgbd-s3-bench-", dir="/var/tmp") as tmp,
    ):
        os.chmod(tmp, 0o777)  # the embedded server (another user as root) reads nothing here
        print(f"PostgreSQL {c.tc.version}, SeaweedFS at {s3.endpoint}, {os.cpu_count()} CPUs",
              file=sys.stderr)  # fmt: skip
        print("| LOs | step | seconds | x local | peak RSS |")
        print("|---|---|---:|---:|---:|")
        for spec in args.scales.split(","):
            n, sz = spec.split(":")
            for row in scale(c, s3, parse_count(n), parse_size(sz), Path(tmp)):
                print(row, flush=True)


if __name__ == "__main__":
    main()
