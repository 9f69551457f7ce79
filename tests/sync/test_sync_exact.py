"""``sync`` where a reviewer found it inexact: a write made in a savepoint of a
transaction open at the mark, a --referenced-by selection that changes over time, --force
against an LO someone else made at an OID a copy once used, and a target-side write
committed between the plan and the removal."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.pg.lostream import Selection
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.plan import CHANGED_HERE, REPLACED_HERE
from pgblobdump.sync.run import SyncRequest, sync
from pgblobdump.sync.state import replace, unlink
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import roles, state


def _sql(db: str, *statements: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def _bytes(db: str, oid: int) -> bytes:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT lo_get(%s::int8::oid)", (oid,)).fetchone()
    assert row is not None
    return bytes(row[0])


@pytest.fixture
def pair(pg17: EmbeddedCluster, new_db: NewDb) -> tuple[str, str]:
    """A source with LOs 5000, 8000, 8001 and a target they were copied into."""
    src, dst = new_db(pg17), new_db(pg17)
    _sql(src, "SELECT lo_from_bytea(5000, 'first'), lo_from_bytea(8000, 'eight thousand'),"
              " lo_from_bytea(8001, 'eight thousand one')")  # fmt: skip
    copy(src, dst, CopyRequest())
    return src, dst


def test_a_write_in_a_savepoint_of_a_transaction_open_at_the_mark(pair: tuple[str, str]) -> None:
    src, dst = pair
    assert sync(src, dst, SyncRequest()).plan.equal == 3
    with psycopg.connect(src) as a:  # open at the next sync's mark, its write in a savepoint
        a.execute("SELECT txid_current()")
        a.execute("SAVEPOINT a")
        a.execute("SELECT lo_put(5000, 0, 'THIRD!!!')")
        a.execute("RELEASE a")
        _sql(src, "SELECT txid_current()")  # a later xid committed: the mark's xmax passes it
        r = sync(src, dst, SyncRequest())
        assert r.plan.equal == 3 and _bytes(dst, 5000) == b"first"
        a.commit()
    r = sync(src, dst, SyncRequest())
    assert r.method.startswith("transaction ids since"), r.method
    assert r.plan.rewrite == [5000]
    assert _bytes(dst, 5000) == b"THIRD!!!" and state(dst) == state(src)


def test_referenced_by_finds_newly_referenced_los_and_deletes_only_what_the_source_lost(
    pair: tuple[str, str],
) -> None:
    src, dst = pair
    refs = Selection(referenced_by=(("t", "o"),))
    _sql(src, "CREATE TABLE t (o oid)", "INSERT INTO t VALUES (8001)",
         "SELECT lo_put(8000, 0, 'EIGHT')")  # fmt: skip
    r = sync(src, dst, SyncRequest(refs))
    assert r.method.startswith("digests computed on each server: --referenced-by"), r.method
    assert r.plan.gone == [] and r.plan.equal == 1 and not r.plan.conflicts
    _sql(src, "INSERT INTO t VALUES (8000)")  # newly referenced, changed before the mark
    r = sync(src, dst, SyncRequest(refs))
    assert r.plan.rewrite == [8000] and r.plan.equal == 1
    assert _bytes(dst, 8000) == _bytes(src, 8000) == b"EIGHT thousand"
    r = sync(src, dst, SyncRequest(refs, delete=True))  # 5000: on the source, unreferenced
    assert r.plan.gone == [] and r.deleted == 0 and _bytes(dst, 5000) == b"first"
    _sql(src, "SELECT lo_unlink(5000)")  # gone from the source at all: deleted
    r = sync(src, dst, SyncRequest(refs, delete=True))
    assert r.plan.gone == [5000] and r.deleted == 1
    assert state(dst) == state(src)


def test_force_never_overwrites_an_lo_whose_metadata_row_is_not_ours(
    pair: tuple[str, str], pg17: EmbeddedCluster
) -> None:
    src, dst = pair
    roles(pg17)
    _sql(
        dst,
        "SELECT lo_unlink(5000)",
        "SELECT lo_from_bytea(5000, 'FOREIGN')",  # someone's
        "ALTER LARGE OBJECT 8000 OWNER TO pgbd_t_owner",  # another owner on the target
        "SELECT lo_put(8001, 0, 'theirs')",
    )  # only its bytes: --force may overwrite it
    theirs = state(dst)
    r = sync(src, dst, SyncRequest(force=True))
    assert r.plan.forced == [8001]
    assert [(c.oid, c.why) for c in r.plan.conflicts] == [(5000, REPLACED_HERE),
                                                          (8000, REPLACED_HERE)]  # fmt: skip
    got = state(dst)
    assert got[5000] == theirs[5000] and got[8000] == theirs[8000]
    assert got[8001] == state(src)[8001]
    with psycopg.connect(dst) as conn:  # the removal checks it again itself
        assert replace(conn, [], [5000, 8000], pages=True) == []
    assert state(dst) == got
    result = run("sync", "-d", src, "--target-dbname", dst, "--force")
    assert_one_line_error(result, 4, "2 LOs in conflict left as they are")


def test_the_removal_checks_pages_and_comment_again(pair: tuple[str, str]) -> None:
    """A write on the target committed between the plan and the removal (here: after the
    copy, before ``unlink``) keeps its LO: the removing statement checks what held() did."""
    _src, dst = pair
    _sql(dst, "SELECT lo_put(8001, 0, 'theirs')", "COMMENT ON LARGE OBJECT 8000 IS 'theirs'")
    theirs = state(dst)
    with psycopg.connect(dst, autocommit=True) as conn:
        assert unlink(conn, [5000, 8000, 8001]) == 1  # 5000: ours, unchanged
        assert state(dst) == {o: v for o, v in theirs.items() if o != 5000}
    with psycopg.connect(dst) as conn:  # a rewrite's removal checks the same
        assert replace(conn, [8000, 8001], [], pages=True) == []
        assert replace(conn, [], [8000, 8001], pages=True) == [8000, 8001]  # --force
    assert state(dst) == {}


def test_a_target_side_write_in_a_savepoint_is_a_change_there(pair: tuple[str, str]) -> None:
    """The target side compares xmins with the copy's own top-level xid for equality: a
    subtransaction's xid is another one, so a write made in a savepoint counts."""
    src, dst = pair
    with psycopg.connect(dst) as conn:
        conn.execute("SAVEPOINT a")
        conn.execute("SELECT lo_put(8001, 0, 'theirs')")
        conn.execute("COMMENT ON LARGE OBJECT 5000 IS 'theirs'")
        conn.execute("RELEASE a")
    r = sync(src, dst, SyncRequest())
    assert [(c.oid, c.why) for c in r.plan.conflicts] == [(5000, CHANGED_HERE),
                                                          (8001, CHANGED_HERE)]  # fmt: skip
    with psycopg.connect(dst, autocommit=True) as conn:
        assert unlink(conn, [5000, 8000, 8001]) == 1
