"""Load: 8 concurrent ``restore --part K/8`` of one packed archive into one database,
while 4 writers create, write and unlink LOs of their own there and a ``dump`` of that
database runs. Every LO of the archive arrives, no writer's LO is touched, nobody runs
out of shared memory, and a deadlock is retried or named, never left to a traceback."""

from __future__ import annotations

import contextlib
import hashlib
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb
from tests.faults.conftest import Snapshot, run_tool, snapshot

PARTS = 8
WRITERS = 4
WRITER_FIRST = 3_000_000_000
"""Writers' OIDs: WRITER_FIRST + writer * 1,000,000 + n, far from the archive's."""
WRITER_MAX = 3000
"""LOs a writer creates at most."""
WRITER_SECONDS = 60.0
"""A writer stops after this long even if the restores still run."""


@dataclass
class Writer:
    """One writer's LOs: what it made (oid -> md5 of what it wrote) and what it unlinked
    itself; ``errors`` holds anything the server said to it."""

    k: int
    made: dict[int, str] = field(default_factory=dict)
    unlinked: set[int] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def _write(db: str, w: Writer, stop: threading.Event) -> None:
    """lo_create / lo_put / (every 5th) lo_unlink, one short transaction each, until
    ``stop``, WRITER_MAX LOs or WRITER_SECONDS."""
    rnd = random.Random(w.k)
    t0 = time.monotonic()
    with psycopg.connect(db, autocommit=True) as conn:
        for n in range(WRITER_MAX):
            if stop.is_set() or time.monotonic() - t0 > WRITER_SECONDS:
                return
            oid = WRITER_FIRST + w.k * 1_000_000 + n
            data = rnd.randbytes(rnd.randrange(0, 20_000))
            try:
                with conn.transaction():
                    conn.execute("SELECT lo_create(%s::int8::oid)", (oid,))
                    conn.execute("SELECT lo_put(%s::int8::oid, 0, %s)", (oid, data))
                w.made[oid] = hashlib.md5(data).hexdigest()
                if n % 5 == 4:
                    victim = rnd.choice(sorted(set(w.made) - w.unlinked))
                    conn.execute("SELECT lo_unlink(%s::int8::oid)", (victim,))
                    w.unlinked.add(victim)
            except psycopg.Error as e:
                w.errors.append(f"{type(e).__name__}: {e}")


def _sample_locks(db: str, stop: threading.Event, peak: list[int]) -> None:
    """The most LO locks (``object`` locks on pg_largeobject) held at once, sampled."""
    with psycopg.connect(db, autocommit=True) as conn:
        while not stop.wait(0.05):
            row = conn.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'object'"
                " AND classid = 'pg_largeobject'::regclass"
            ).fetchone()
            assert row is not None
            peak[0] = max(peak[0], int(row[0]))


def _writers_left(db: str) -> dict[int, str]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT oid::int8, md5(lo_get(oid)) FROM pg_largeobject_metadata"
            " WHERE oid >= %s::int8::oid",
            (WRITER_FIRST,),
        ).fetchall()
    return {int(o): str(h) for o, h in rows}


def _archive_part(snap: Snapshot) -> Snapshot:
    return {o: v for o, v in snap.items() if o < WRITER_FIRST}


@pytest.mark.scale  # ~20 s on 2 cores (80k LOs generated, dumped, restored in 8 parts)
def test_parallel_parts_with_writers_and_a_dump(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src, dst = new_db(pg17), new_db(pg17)
    # Every LO commented and a third granted: each commits locks until its batch ends,
    # so 8 restores at once press on the one lock table (64 x 50 at these settings).
    code, err, _ = run_tool("generate", "-d", src, "-n", "80k", "--size", "0-4KiB",
                            "--owners", "2", "--grants", "0.3", "--comments", "1")  # fmt: skip
    assert code == 0, err
    archive = tmp_path / "a"
    code, err, _ = run_tool("dump", "-d", src, "-o", str(archive), "--jobs", "2")
    assert code == 0, err
    expected = snapshot(src)

    writers = [Writer(k) for k in range(WRITERS)]
    stop = threading.Event()
    threads = [threading.Thread(target=_write, args=(dst, w, stop)) for w in writers]
    peak = [0]
    threads.append(threading.Thread(target=_sample_locks, args=(dst, stop, peak)))
    for t in threads:
        t.start()
    time.sleep(0.3)  # writers under way
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "pgblobdump", "restore", str(archive), "-d", dst, "--part"]
    with contextlib.ExitStack() as stack:
        restores = [
            stack.enter_context(
                subprocess.Popen(
                    [*argv, f"{k}/{PARTS}"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
            for k in range(1, PARTS + 1)
        ]
        time.sleep(1.0)  # the restores under way, then a dump of the database they fill
        dumped = tmp_path / "during"
        code, dump_err, _ = run_tool("dump", "-d", dst, "-o", str(dumped), "--jobs", "2")
        ends = [(p.wait(300), p.communicate()[1]) for p in restores]
    restored_in = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join(120)

    with psycopg.connect(dst) as conn:
        row = conn.execute(
            "SELECT current_setting('max_locks_per_transaction')::int"
            " * current_setting('max_connections')::int"
        ).fetchone()
    table = row[0] if row else "?"
    print(f"\n8 restores took {restored_in:.1f} s; peak LO locks {peak[0]:,} (table {table})")
    print(f"dump during the restores: exit {code} {dump_err.strip()}")
    for k, (rc, err) in enumerate(ends, 1):
        print(f"restore --part {k}/{PARTS}: exit {rc} {err.strip()}")
    for w in writers:
        print(f"writer {w.k}: made {len(w.made)}, unlinked {len(w.unlinked)}, errors {w.errors}")
    said = [dump_err, *(e for _, e in ends), *(x for w in writers for x in w.errors)]
    everything = " ".join(said)
    assert "out of shared memory" not in everything
    # the 8 parts together held no more LO locks than one restore's batch may (a quarter
    # of the table); before each part took 1/8 of that, 1,866 to 3,200 were seen here
    assert row is not None and peak[0] <= row[0] // 4, peak
    assert "Traceback" not in everything
    assert all(rc == 0 for rc, _ in ends), ends
    assert code == 0, dump_err
    assert not any(w.errors for w in writers)
    # every LO of the archive arrived, as in the source
    assert _archive_part(snapshot(dst)) == expected
    # every writer's LO is intact, and only the writer itself unlinked any
    left = _writers_left(dst)
    for w in writers:
        for oid, digest in w.made.items():
            if oid in w.unlinked:
                assert oid not in left, oid
            else:
                assert left.get(oid) == digest, oid
    assert set(left) <= {o for w in writers for o in w.made}
    # the dump made meanwhile is a whole archive
    code, err, _ = run_tool("verify", str(dumped))
    assert code == 0, err


def _free_locks(db: str) -> int:
    """How many more locks the server's lock table takes right now, to 100: advisory
    locks (they live in the same table as LO locks) taken 100 at a time in one
    transaction until "out of shared memory" (the transaction's end frees them)."""
    with psycopg.connect(db) as conn:
        taken = 0
        try:
            while taken < 1_000_000:
                conn.execute(
                    "SELECT count(pg_advisory_xact_lock(g))"
                    " FROM generate_series(%s::int8, %s::int8) g",
                    (taken + 1, taken + 100),
                )
                taken += 100
        except psycopg.errors.OutOfMemory:
            conn.rollback()
    return taken


def test_a_part_leaves_the_lock_table_to_the_other_parts(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """``restore --part 1/8`` while the lock table is nearly full, as when the other 7
    parts hold their batches' comment locks: its batches take an eighth of one restore's
    share (here 100 of 800 locks), so it fits in what is left, where a batch sized for a
    restore alone ran out of shared memory."""
    src, dst = new_db(pg17), new_db(pg17)
    code, err, _ = run_tool("generate", "-d", src, "-n", "8000", "--comments", "1")
    assert code == 0, err
    archive = tmp_path / "a"
    code, err, _ = run_tool("dump", "-d", src, "-o", str(archive))
    assert code == 0, err
    free = _free_locks(dst)
    with psycopg.connect(dst) as others:
        # the other parts' locks: all the table but 400 (a batch of 100 fits, of 800 not)
        others.execute(
            "SELECT count(pg_advisory_xact_lock(g)) FROM generate_series(1, %s::int8) g",
            (free - 400,),
        )
        code, err, _ = run_tool("restore", str(archive), "-d", dst, "--part", "1/8")
        others.rollback()
    assert code == 0, err
    assert "out of shared memory" not in err
    with psycopg.connect(dst) as conn:
        row = conn.execute(
            "SELECT count(*), count(obj_description(oid, 'pg_largeobject'))"
            " FROM pg_largeobject_metadata"
        ).fetchone()
    assert row == (1000, 1000), row
