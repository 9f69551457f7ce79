"""An LO a copy made that was unlinked on the target since is a conflict, "deleted on the
target": listed, counted, never made again unless --force. What copy and sync removed
themselves (sync --delete, a failed run's clean-up) is not: the next sync copies it as
new when the source has it."""

from __future__ import annotations

import json
import subprocess
import sys

import psycopg
from psycopg import conninfo as pgconninfo

from pgblobdump.pg.changes import Scan
from pgblobdump.servers.cluster import SUPERUSER, EmbeddedCluster
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.plan import DELETED_HERE, decide
from pgblobdump.sync.run import SyncRequest, sync
from pgblobdump.sync.state import OURS, Coverage, Held, compact
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.faults.proxy import CutProxy
from tests.losets import roles, state


def _sql(db: str, *statements: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def test_decide_calls_an_lo_copied_then_gone_from_the_target_a_conflict() -> None:
    """Without a server: by transaction ids and by digests alike."""
    made = Coverage([(10, 20)])
    for by_digest in (False, True):
        source = [Scan(o, False, None, "d") for o in (5, 12, 15, 30)]
        target = [Held(15, OURS, None, "d")]
        plan = decide(source, target, False, by_digest, made=made)
        assert plan.new == [5, 30] and plan.deleted_there == [12] and plan.equal == 1
        assert [(c.oid, c.why) for c in plan.conflicts] == [(12, DELETED_HERE)]
        assert plan.segments == [[5, 5, 1], [30, 30, 1]]  # 12 is not read
        forced = decide(source, target, True, by_digest, made=made)
        assert forced.forced == [12] and forced.deleted_there == [12] and not forced.conflicts
        assert forced.segments == [[5, 12, 2], [30, 30, 1]]


def test_an_lo_unlinked_on_the_target_is_not_made_again_unless_forced(
    pg16: EmbeddedCluster, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    roles(pg16, pg17)
    src, dst = new_db(pg16), new_db(pg17)
    _sql(src, "SELECT count(lo_from_bytea(o, 'x')) FROM generate_series(30000, 30019) o")
    copy(src, dst, CopyRequest())
    _sql(dst, "SELECT lo_unlink(30001)", "SELECT lo_unlink(30002)")  # the application's
    _sql(src, "SELECT lo_put(30002, 0, 'changed on the source too')",
         "SELECT lo_unlink(30003)")  # fmt: skip
    with psycopg.connect(dst, autocommit=True) as conn:
        compact(conn, at_least=0)  # compaction keeps what is gone from the target covered
    theirs = state(dst)
    r = sync(src, dst, SyncRequest(delete=True))
    assert r.plan.deleted_there == [30001, 30002] and r.plan.new == []
    assert [(c.oid, c.why) for c in r.plan.conflicts] == [(30001, DELETED_HERE),
                                                          (30002, DELETED_HERE)]  # fmt: skip
    assert r.deleted == 1  # 30003, gone from the source
    del theirs[30003]
    assert state(dst) == theirs

    result = run("sync", "-d", src, "--target-dbname", dst, "--json")
    assert_one_line_error(result, 4, "2 LOs in conflict left as they are")
    assert "copies again those deleted there" in result.stderr
    record = json.loads(result.stdout)
    assert record["deleted_on_target"] == 2 and record["conflicts"] == 2 and record["new"] == 0
    result = run("sync", "-d", src, "--target-dbname", dst, "--dry-run", "--json")
    rows = json.loads(result.stdout)
    assert [(x["oid"], x["action"], x["detail"]) for x in rows] == [
        (30001, "conflict", DELETED_HERE), (30002, "conflict", DELETED_HERE)]  # fmt: skip
    assert state(dst) == theirs

    result = run("sync", "-d", src, "--target-dbname", dst, "--force", "--dry-run", "--json")
    assert {x["action"] for x in json.loads(result.stdout)} == {"copy again (--force)"}
    r = sync(src, dst, SyncRequest(force=True))
    assert r.plan.forced == [30001, 30002] and not r.plan.conflicts
    assert state(dst) == state(src)
    # made again by the sync, they are its own: unlinked there again, a conflict again
    _sql(dst, "SELECT lo_unlink(30001)")
    assert [c.oid for c in sync(src, dst, SyncRequest()).plan.conflicts] == [30001]


def test_what_sync_removed_itself_is_copied_as_new_when_the_source_has_it(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    src, dst = new_db(pg17), new_db(pg17)
    _sql(src, "SELECT count(lo_from_bytea(o, 'x')) FROM generate_series(40000, 40009) o")
    copy(src, dst, CopyRequest())
    # --delete removed it; the source then made an LO at that OID again
    _sql(src, "SELECT lo_unlink(40001)")
    assert sync(src, dst, SyncRequest(delete=True)).deleted == 1
    _sql(src, "SELECT lo_from_bytea(40001, 'again')")
    r = sync(src, dst, SyncRequest())
    assert r.plan.new == [40001] and not r.plan.conflicts

    # a sync cut while copying new LOs: its clean-up removes the batches it committed
    _sql(src, "SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), 512), 'hex')))"
              " FROM generate_series(50000, 52999) o")  # 3,000 of 8 KiB: 3 batches  # fmt: skip
    dbname = pgconninfo.conninfo_to_dict(dst)["dbname"]
    assert isinstance(dbname, str)
    with CutProxy(pg17.info().port, 14 << 20, "rst", heal=True) as proxy:
        done = subprocess.run(
            [sys.executable, "-m", "pgblobdump", "sync", "-d", src, "--target-dbname",
             proxy.conninfo(dbname, SUPERUSER)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    assert proxy.cut_done and done.returncode in (3, 4), done.stderr
    assert "removed the " in done.stderr, done.stderr  # batches committed, then removed
    assert not set(state(dst)) & set(range(50000, 53000))
    r = sync(src, dst, SyncRequest())
    assert len(r.plan.new) == 3000 and not r.plan.conflicts
    assert state(dst) == state(src)
