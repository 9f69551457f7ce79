"""copy and sync of large and sparse LOs on real servers: an LO over 1 GB with holes
copied and synced (by OID list) in 1 MiB ranges, its holes left missing on the target,
the client's memory flat; and a sync cut in the middle of rewriting an LO leaves the
target's old copy of it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable

import psycopg
from psycopg import conninfo as pgconninfo

from pgblobdump.packed.read.items import Item, LoPiece, WholeLos
from pgblobdump.pg.lostream import BIG, Selection
from pgblobdump.servers.cluster import SUPERUSER, EmbeddedCluster
from pgblobdump.sync import feed
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.run import SyncRequest, sync
from tests.conftest import NewDb
from tests.faults.proxy import CutProxy
from tests.losets import state

HUGE = 70_000
"""An LO of FAR + 8 bytes, nearly all of it one hole."""
FAR = 1_300_000_000
"""Where its last bytes are: past lo_get's 1 GB, past a bytea's."""
SMALL = 70_001
"""An LO of 600 KB with a hole of 290 pages (restore's batched path for holes)."""
DENSE = 70_002
"""A dense LO of 3 MiB (ranges, no hole)."""

PEAK_MIB = 150
"""The client's peak RSS allowed for a copy or sync of them: about three times what it
takes (51 MiB here, the interpreter and its imports), a ninth of the huge LO's bytes."""


def _sql(db: str, *statements: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def _lo(db: str, oid: int) -> tuple[int, int, bytes, bytes]:
    """(size, pages in pg_largeobject, first 8 bytes, last 8 bytes) of LO ``oid``."""
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT lo_lseek64(fd, 0, 2), (SELECT count(*) FROM pg_largeobject WHERE loid = %s),"
            " lo_get(%s, 0, 8), lo_get(%s, lo_lseek64(fd, 0, 2) - 8, 8)"
            " FROM (SELECT lo_open(%s, 262144) AS fd) f",
            (oid, oid, oid, oid),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), bytes(row[2]), bytes(row[3])


def _measured(*args: str) -> tuple[int, str, int]:
    """``python -m pgblobdump ARGS`` run by a process that runs nothing else and reads its
    peak RSS with getrusage(RUSAGE_CHILDREN): (exit, stderr, peak RSS in MiB)."""
    wrapper = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-m', 'pgblobdump', *sys.argv[1:]],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)\n"
        "sys.stderr.write(p.stderr)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    done = subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True,
                          text=True, timeout=600, check=True)  # fmt: skip
    code, kib = done.stdout.split()
    return int(code), done.stderr, int(kib) // 1024


def _handed_on(items: Iterable[Item]) -> tuple[int, int]:
    """(largest item's bytes, all items' bytes) of what a feed hands restore's writer."""
    largest = total = 0
    for item in items:
        assert isinstance(item, WholeLos | LoPiece)
        datas = item.datas if isinstance(item, WholeLos) else [item.data]
        for d in datas:
            largest = max(largest, len(d))
            total += len(d)
    return largest, total


def test_a_sparse_lo_over_1_gb_copied_then_synced_stays_sparse_in_flat_memory(
    pg16: EmbeddedCluster, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    src, dst = new_db(pg16), new_db(pg17)
    _sql(src, f"SELECT lo_from_bytea({HUGE}, 'head-v1!')",
         f"SELECT lo_put({HUGE}, {FAR}, 'tail-v1!')", f"SELECT lo_from_bytea({SMALL}, 'small-v1')",
         f"SELECT lo_put({SMALL}, 600000, 'end')",
         f"SELECT lo_from_bytea({DENSE}, decode(repeat(md5('x'), {3 << 16}), 'hex'))")  # fmt: skip
    huge = _lo(src, HUGE)
    assert huge[:2] == (FAR + 8, 2)  # two pages at the source: the rest is a hole

    # what copy's feed hands restore's writer: ranges of at most 1 MiB, holes left out
    with psycopg.connect(src) as conn:
        largest, total = _handed_on(feed.items(conn, Selection()))
    assert largest <= BIG and total < (4 << 20), (largest, total)

    code, err, peak = _measured("copy", "-d", src, "--target-dbname", dst)
    assert code == 0, err
    assert peak < PEAK_MIB, peak
    for oid in (HUGE, SMALL, DENSE):
        assert _lo(dst, oid) == _lo(src, oid), oid  # same size, bytes, and as few pages
    assert _lo(dst, HUGE)[2:] == (b"head-v1!", b"tail-v1!")

    _sql(src, f"SELECT lo_put({HUGE}, 0, 'head-v2!')", f"SELECT lo_put({HUGE}, {FAR}, 'tail-v2!')")
    # sync's by-OID-list path (one LO changed): the same ranges
    with psycopg.connect(src) as conn:
        largest, total = _handed_on(feed.listed_items(conn, [HUGE]))
    assert largest <= BIG and total < (4 << 20), (largest, total)

    code, err, peak = _measured("sync", "-d", src, "--target-dbname", dst)
    assert code == 0, err
    assert peak < PEAK_MIB, peak
    assert _lo(dst, HUGE) == _lo(src, HUGE) == (FAR + 8, 2, b"head-v2!", b"tail-v2!")
    r = sync(src, dst, SyncRequest())
    assert r.plan.counts()["equal"] == 3 and not r.plan.rewrite


def test_a_sync_cut_while_rewriting_an_lo_leaves_the_old_copy(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    src, dst = new_db(pg17), new_db(pg17)
    # 60000: 4 MiB, written in 1 MiB ranges in a transaction of its own; then small ones
    _sql(src, "SELECT lo_from_bytea(60000, decode(repeat(md5('old'), 262144), 'hex'))",
         "SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), 64), 'hex')))"
         " FROM generate_series(60001, 60100) o")  # fmt: skip
    copy(src, dst, CopyRequest())
    old = state(dst)
    _sql(src, "SELECT lo_put(60000, 0, decode(repeat(md5('new'), 262144), 'hex'))",
         "SELECT count(lo_put(o, 0, 'new')) FROM generate_series(60001, 60100) o")  # fmt: skip
    new = state(src)
    dbname = pgconninfo.conninfo_to_dict(dst)["dbname"]
    assert isinstance(dbname, str)
    # cut when about 3 of its 4 MiB have gone to the target
    with CutProxy(pg17.info().port, 3 << 20, "rst") as proxy:
        done = subprocess.run(
            [sys.executable, "-m", "pgblobdump", "sync", "-d", src, "--target-dbname",
             proxy.conninfo(dbname, SUPERUSER)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert proxy.cut_done, done.stderr
    lines = done.stderr.strip().splitlines()
    assert done.returncode in (3, 4) and lines[-1].startswith("Error: "), done.stderr
    got = state(dst)
    assert got.keys() == old.keys()  # no LO is missing
    assert got[60000] == old[60000]  # the one being rewritten: its old copy
    assert all(got[o] in (old[o], new[o]) for o in got)
    r = sync(src, dst, SyncRequest())
    assert not r.plan.conflicts and state(dst) == new
