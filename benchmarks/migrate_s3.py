"""``migrate run --to s3://`` against a plain loop doing the same by hand, in one run, on
SeaweedFS on loopback (issue 40: within 1.5x; memory flat).

For each scale (default 10k and 100k x 4 KiB) a table ``src`` of N rows, each naming its
own LO of 4 KiB, is made once; each contender works on its own copy (``CREATE TABLE t AS
SELECT * FROM src``, keyed by ``id``: the same LOs) and writes under a prefix of its own:

- ``anchor``: one process reads ``SELECT lo, lo_get(lo) FROM t`` (a server-side cursor)
  and puts each LO as the object ``prefix/<oid>`` with obstore, 16 puts in flight (the
  concurrency migrate uses), then switches the column by hand in SQL: ``ALTER TABLE t
  ALTER COLUMN lo TYPE text USING 'prefix/' || lo``. No metadata, no verification, no
  resume, and the ALTER holds ACCESS EXCLUSIVE while it rewrites the table.
- ``migrate``: ``pgblobdump migrate run -d DB t.lo --to s3://bucket/prefix``: objects
  with their sha256 in their metadata, each a conditional PUT (never over an existing
  object), entered in the state as stored, each verified (the LO's sha256 on the
  server; the object's size and ETag as listed), the column moved online (new column,
  triggers, batches, verify, a short switch).

Both run as children under /usr/bin/time (peak RSS). Printed: seconds, the ratio to the
anchor, peak RSS, and migrate's longest exclusive lock.

Usage: .venv/bin/python benchmarks/migrate_s3.py [--scales 10k,100k] [--size 4KiB]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg

from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster
from pgblobdump.servers.seaweed import BUCKET, LocalS3
from pgblobdump.units import format_bytes, parse_count, parse_size

PGBLOBDUMP = os.path.join(os.path.dirname(sys.executable), "pgblobdump")
TARGET = 1.5
IN_FLIGHT = 16


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) and stdout of a child under /usr/bin/time."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "PGBD %M", *argv], capture_output=True,
                       text=True, env=env, check=False)  # fmt: skip
    seconds = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{argv[:4]} failed: {p.stderr[-2000:]}")
    return seconds, int(p.stderr.strip().splitlines()[-1].split()[1]), p.stdout


def fresh_db(c: EmbeddedCluster, name: str) -> str:
    with psycopg.connect(c.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return c.conninfo(name)


def make_src(db: str, n: int, size: int) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE src (id int PRIMARY KEY, lo oid)")
        conn.execute(
            "INSERT INTO src SELECT i, lo_from_bytea(0, substr(decode(repeat(md5(i::text"
            " || random()::text), %s), 'hex'), 1, %s)) FROM generate_series(1, %s) i",
            (size // 16 + 1, size, n),
        )
        conn.execute("VACUUM ANALYZE src")


def copy_table(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS t")
        conn.execute("CREATE TABLE t AS SELECT * FROM src")
        conn.execute("ALTER TABLE t ADD PRIMARY KEY (id)")
        conn.execute("VACUUM ANALYZE t")
        conn.execute("CHECKPOINT")


def anchor(db: str, url: str) -> None:
    """The hand-made loop (run as a child: ``--anchor DB URL``)."""
    from pgblobdump.files.s3objects import S3Objects

    place = S3Objects(url)
    ob, store = place._ob, place.prefix.store
    prefix = place.prefix.url.prefix
    slots = threading.BoundedSemaphore(IN_FLIGHT)
    failed: list[BaseException] = []

    def put(key: str, data: bytes) -> None:
        try:
            ob.put(store, key, data)
        except BaseException as e:
            failed.append(e)
        finally:
            slots.release()

    with (
        psycopg.connect(db, autocommit=True) as conn,
        ThreadPoolExecutor(IN_FLIGHT) as pool,
    ):
        with conn.transaction(), conn.cursor(name="los") as cur:
            cur.itersize = 1000
            cur.execute("SELECT lo, lo_get(lo) FROM t WHERE lo IS NOT NULL")
            for oid, data in cur:
                slots.acquire()
                pool.submit(put, f"{prefix}/{oid}", bytes(data))
        pool.shutdown(wait=True)
        if failed:
            raise failed[0]
        conn.execute(f"ALTER TABLE t ALTER COLUMN lo TYPE text USING '{prefix}/' || lo::text")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", default="10k,100k")
    ap.add_argument("--size", default="4KiB")
    ap.add_argument("--anchor", nargs=2, metavar=("DB", "URL"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.anchor:
        anchor(*args.anchor)
        return
    size = parse_size(args.size)
    rows = []
    with EmbeddedCluster(17, settings=BENCHMARK_WAL) as c, LocalS3() as s3:
        env = {**os.environ, **s3.env()}
        for scale in args.scales.split(","):
            n = parse_count(scale)
            db = fresh_db(c, "pgbd_s3mig")
            make_src(db, n, size)
            stamp = time.time_ns()
            copy_table(db)
            a = timed([sys.executable, __file__, "--anchor", db,
                       f"s3://{BUCKET}/anchor-{n}-{stamp}"], env)  # fmt: skip
            copy_table(db)
            m = timed([PGBLOBDUMP, "migrate", "run", "-d", db, "t.lo", "--to",
                       f"s3://{BUCKET}/migrate-{n}-{stamp}", "--json"], env)  # fmt: skip
            lock = json.loads(m[2])["lock_ms"]
            label = f"{n:,} x {format_bytes(size)}"
            rows.append((label, "anchor (obstore put loop + ALTER TYPE text)", a[0], 1.0, a[1], ""))
            rows.append((label, "migrate run --to s3://", m[0], m[0] / a[0], m[1],
                         f"{lock} ms"))  # fmt: skip
    print("| scale | contender | seconds | x anchor | peak RSS | longest exclusive lock |")
    print("|---|---|---|---|---|---|")
    for label, what, sec, ratio, rss, lock in rows:
        print(f"| {label} | {what} | {sec:.2f} | {ratio:.2f}x | {rss / 1024:.0f} MB | {lock} |")
    for label, what, _sec, ratio, _rss, _lock in rows:
        if what.startswith("migrate"):
            verdict = "met" if ratio <= TARGET else "missed"
            print(f"{label}: migrate {ratio:.2f}x the anchor (target {TARGET}x): {verdict}")


if __name__ == "__main__":
    main()
