"""vacuum killed or interrupted mid-run: the batches done are removed, nothing is
half-removed, and a rerun removes the rest (and only the orphans)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psycopg
import pytest

from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb
from tests.vacuum.test_safety import los

N = 20_000
BATCH = 100


def _count(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as c:
        row = c.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGKILL, -9), (signal.SIGINT, 130),
                                           (signal.SIGTERM, 143)])  # fmt: skip
def test_killed_mid_run_removes_whole_batches_and_a_rerun_finishes(
    pg17: EmbeddedCluster, new_db: NewDb, sig: signal.Signals, code: int
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("SELECT count(lo_create(i)) FROM generate_series(1, %s) i", (N,))
        c.execute("CREATE TABLE t (x oid)")
        c.execute("INSERT INTO t SELECT i FROM generate_series(1, %s, 2) i", (N,))
    args = ["vacuum", "-d", db, "--min-age", "0", "--jobs", "1", "--batch-size", str(BATCH)]
    argv = [sys.executable, "-m", "pgblobdump", *args]
    pipe = subprocess.PIPE
    with subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True) as proc:
        deadline = time.monotonic() + 60
        while _count(db) > N - 5 * BATCH:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    left = _count(db)
    assert left > N // 2, "finished before the signal: make N larger"
    assert (N - left) % BATCH == 0  # whole batches only: odd OIDs are kept, even go 100 a time
    done = subprocess.run([sys.executable, "-m", "pgblobdump", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert los(db) == set(range(1, N + 1, 2))


def _when_removing(db: str, stmts: list[str], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while _count(db) > N - 3 * BATCH:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with psycopg.connect(db, autocommit=True) as c, c.transaction():
        for s in stmts:
            c.execute(s)


@pytest.mark.parametrize("change", ["create", "drop"])
def test_a_table_created_or_dropped_during_the_run(
    pg17: EmbeddedCluster, new_db: NewDb, change: str
) -> None:
    """A table created mid-run naming the last orphan keeps it (the next look reads the
    new column); a referencing table dropped mid-run (it waits for the round's lock)
    is no error, and its LOs, orphans only since, wait for the next run."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("SELECT count(lo_create(i)) FROM generate_series(1, %s) i", (N,))
        c.execute("CREATE TABLE t (x oid)")
        c.execute("INSERT INTO t SELECT i FROM generate_series(1, %s, 2) i", (N,))
    args = ["vacuum", "-d", db, "--min-age", "0", "--jobs", "1", "--batch-size", str(BATCH)]
    stmts = (["CREATE TABLE late (x oid)", f"INSERT INTO late VALUES ({N})"]
             if change == "create" else ["DROP TABLE t"])  # fmt: skip
    argv = [sys.executable, "-m", "pgblobdump", *args]
    pipe = subprocess.PIPE
    with subprocess.Popen(argv, stdout=pipe, stderr=pipe, text=True) as proc:
        _when_removing(db, stmts, proc)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    odd = set(range(1, N + 1, 2))
    assert los(db) == (odd | {N} if change == "create" else odd)
