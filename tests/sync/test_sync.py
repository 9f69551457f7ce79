"""``sync`` on real servers: each kind of change found exactly (and nothing else copied
again), conflicts on the target kept, --dry-run changing nothing, the digest fallback
when the state cannot be used, --watch, and a kill -9 mid-sync finished by the next."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from pgblobdump.errors import UsageError
from pgblobdump.pg.lostream import Selection
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.plan import REPLACED_HERE
from pgblobdump.sync.run import SyncRequest, sync
from pgblobdump.sync.state import SCHEMA
from tests.cli.test_stdout_dash import _on_a_terminal
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import State, fill, state
from tests.losets import roles as _roles

LOS = {oid: (oid % 5000 + 10, oid % 3, oid % 3, oid % 2 == 0) for oid in range(30_000, 30_040)}


def _sql(db: str, *statements: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def _xmins(db: str) -> dict[int, str]:
    """Each LO's metadata xmin: an LO rewritten by a sync gets a new one."""
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT oid::int8, xmin::text FROM pg_largeobject_metadata").fetchall()
    return {int(o): x for o, x in rows}


def _tables(db: str) -> list[tuple[object, ...]]:
    with psycopg.connect(db) as conn:
        return [
            *conn.execute(f"SELECT * FROM {SCHEMA}.made ORDER BY 1, 3").fetchall(),
            *conn.execute(f"SELECT * FROM {SCHEMA}.marks ORDER BY 1, 2").fetchall(),
        ]


@pytest.fixture
def pair(pg16: EmbeddedCluster, pg17: EmbeddedCluster, new_db: NewDb) -> tuple[str, str]:
    """A 16 source with LOS and a 17 target they were copied into."""
    _roles(pg16, pg17)
    src, dst = new_db(pg16), new_db(pg17)
    fill(src, LOS)
    copy(src, dst, CopyRequest())
    return src, dst


CHANGES = {
    30_001: "SELECT lo_put(30001, 3, 'in place')",
    30_002: "SELECT lo_put(30002, 40000, 'appended past the end')",
    30_003: "BEGIN; SELECT lo_truncate(lo_open(30003, 131072), 2048); COMMIT",
    30_004: "BEGIN; SELECT lo_truncate(lo_open(30004, 131072), 5); COMMIT",
    30_005: "SELECT lo_unlink(30005); SELECT lo_from_bytea(30005, 'made again')",
    30_006: "ALTER LARGE OBJECT 30006 OWNER TO pgbd_t_granter",
    30_007: "GRANT UPDATE ON LARGE OBJECT 30007 TO pgbd_t_reader",
    30_008: "COMMENT ON LARGE OBJECT 30008 IS NULL",
    30_009: "COMMENT ON LARGE OBJECT 30009 IS 'a new comment'",
    30_011: "REVOKE ALL ON LARGE OBJECT 30011 FROM pgbd_t_reader",
}
"""One of each kind of change on the source (30008 had a comment; 30011 a grant)."""


def test_each_kind_of_change_is_found_and_nothing_else(pair: tuple[str, str]) -> None:
    src, dst = pair
    _sql(src, "SELECT lo_from_bytea(3000000000, 'new, past 2^31')", "SELECT lo_create(40000)",
         "SELECT lo_unlink(30020)", *CHANGES.values())  # fmt: skip
    before = _xmins(dst)
    r = sync(src, dst, SyncRequest())
    assert r.method.startswith("transaction ids since"), r.method
    assert sorted(r.plan.rewrite) == sorted(CHANGES)
    assert r.plan.new == [40000, 3000000000]
    assert r.plan.gone == [30020] and r.deleted == 0 and not r.plan.conflicts
    after = _xmins(dst)
    untouched = set(LOS) - set(CHANGES) - {30020}
    assert all(after[o] == before[o] for o in untouched)  # not copied again
    expected = state(src)
    got = state(dst)
    assert 30020 in got  # gone from the source, kept without --delete
    del got[30020]
    assert got == expected
    again = sync(src, dst, SyncRequest(delete=True))
    assert again.plan.counts()["rewrite"] == 0 and again.plan.new == []
    assert again.deleted == 1 and state(dst) == expected
    assert sync(src, dst, SyncRequest()).plan.equal == len(expected)


def test_target_side_changes_are_conflicts_unless_forced(
    pair: tuple[str, str], pg17: EmbeddedCluster
) -> None:
    src, dst = pair
    _sql(dst, "SELECT lo_put(30001, 0, 'theirs')", "GRANT SELECT ON LARGE OBJECT 30002 TO PUBLIC",
         "COMMENT ON LARGE OBJECT 30004 IS NULL",  # a comment removed on the target
         "SELECT lo_from_bytea(50000, 'a foreign LO')")  # fmt: skip
    _sql(src, "SELECT lo_create(50000)", "SELECT lo_put(30001, 0, 'ours')")
    theirs = state(dst)
    r = sync(src, dst, SyncRequest(delete=True))
    assert sorted((c.oid, c.why.split(":")[0]) for c in r.plan.conflicts) == [
        (30001, "changed on the target since it was copied"),
        (30002, REPLACED_HERE.split(":")[0]),
        (30004, "its comment was removed"),
        (50000, "exists on the target and no copy or sync made it"),
    ]
    assert state(dst) == theirs  # nothing touched
    result = run("sync", "-d", src, "--target-dbname", dst)
    assert_one_line_error(result, 4, "4 LOs in conflict left as they are")
    r = sync(src, dst, SyncRequest(force=True, delete=True))
    assert sorted(r.plan.forced) == [30001, 30004]
    # its metadata row not ours (ACL changed there), never ours: even --force keeps them
    assert [c.oid for c in r.plan.conflicts] == [30002, 50000]
    got = state(dst)
    assert got.pop(50000) == theirs[50000] and got.pop(30002) == theirs[30002]
    expected = state(src)
    del expected[50000], expected[30002]
    assert got == expected


def test_dry_run_lists_and_changes_nothing(pair: tuple[str, str]) -> None:
    src, dst = pair
    _sql(src, *CHANGES.values(), "SELECT lo_unlink(30020)", "SELECT lo_create(40000)")
    before, tables = state(dst), _tables(dst)
    result = run("sync", "-d", src, "--target-dbname", dst, "--dry-run", "--delete", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    actions = {r["oid"]: r["action"] for r in rows}
    assert actions == {**dict.fromkeys(CHANGES, "rewrite"), 40000: "new", 30020: "delete"}
    assert ("sync would copy 1 new LO and 10 changed; 1 LO gone from the source, deleted;"
            in result.stderr), result.stderr  # fmt: skip
    assert state(dst) == before and _tables(dst) == tables


def test_dry_run_on_a_terminal_is_a_table(pair: tuple[str, str]) -> None:
    """As every listing: aligned columns on a terminal (it printed tab-separated lines
    there), tab-separated into a pipe."""
    src, dst = pair
    _sql(src, "SELECT lo_unlink(30020)", "SELECT lo_create(40000)")
    shown = _on_a_terminal("sync", "-d", src, "--target-dbname", dst, "--dry-run").splitlines()
    assert "\t" not in "".join(shown), shown
    head, rule, *rows = shown
    assert head.split() == ["oid", "action", "detail"] and set(rule) == {"-", " "}
    assert any(r.split()[:2] == ["40000", "new"] for r in rows), rows
    assert any(r.split()[:2] == ["30020", "gone"] and r.endswith("--delete removes it")
               for r in rows), rows  # fmt: skip
    piped = run("sync", "-d", src, "--target-dbname", dst, "--dry-run")
    assert piped.stdout.splitlines()[0] == "oid\taction\tdetail", piped.stdout
    assert "1 LO gone from the source, kept (--delete removes it)" in piped.stderr


def test_digests_when_the_state_cannot_be_used(pair: tuple[str, str], pg17: EmbeddedCluster,
                                               new_db: NewDb) -> None:  # fmt: skip
    src, dst = pair
    result = run("sync", "--target-dbname", dst, "--forget")
    assert result.exit_code == 0 and "dropped schema pgblobdump_sync" in result.stderr
    _sql(src, "SELECT lo_put(30001, 0, 'changed')")
    r = sync(src, dst, SyncRequest())
    # no state: every LO on the target is foreign, so a conflict, never overwritten
    assert r.method.startswith("digests computed on each server: no earlier copy")
    assert len(r.plan.conflicts) == len(LOS)
    # another source: a copy of the same LOs in a 17 database, changed there
    other, dst2 = new_db(pg17), new_db(pg17)
    copy(src, other, CopyRequest())
    copy(src, dst2, CopyRequest())
    _sql(other, "SELECT lo_put(30002, 0, 'changed')", "COMMENT ON LARGE OBJECT 30003 IS 'x'")
    with pytest.raises(UsageError, match="--source-changed"):  # not unless on purpose
        sync(other, dst2, SyncRequest())
    r = sync(other, dst2, SyncRequest(source_changed=True))
    assert r.method.startswith("digests computed on each server: the last sync read another")
    assert sorted(r.plan.rewrite) == [30002, 30003] and not r.plan.conflicts
    assert state(dst2) == state(other)
    with pytest.raises(UsageError, match="same database"):
        sync(src, src, SyncRequest())


def test_a_role_that_may_not_read_pg_largeobject(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """The lo_get path: changes found by digests (the pages' xids are out of reach)."""
    _roles(pg17)
    src, dst = new_db(pg17), new_db(pg17)
    _sql(src, "DROP ROLE IF EXISTS pgbd_sync_plain", "CREATE ROLE pgbd_sync_plain LOGIN")
    fill(src, {oid: (oid % 900, 0, 0, oid % 2 == 0) for oid in range(30_000, 30_010)})
    _sql(src, "ALTER LARGE OBJECT 30003 OWNER TO pgbd_sync_plain",
         "GRANT SELECT ON LARGE OBJECT " + ", ".join(map(str, range(30_000, 30_010)))
         + " TO pgbd_sync_plain")  # fmt: skip
    plain = f"{src} user=pgbd_sync_plain"
    copy(plain, dst, CopyRequest())
    assert state(dst) == state(src)
    _sql(src, "SELECT lo_put(30004, 0, 'x')")
    r = sync(plain, dst, SyncRequest())
    assert "may not read pg_largeobject" in r.method
    assert r.plan.rewrite == [30004] and state(dst) == state(src)


def test_watch_picks_up_changes_until_interrupted(pair: tuple[str, str]) -> None:
    src, dst = pair
    args = [sys.executable, "-m", "pgblobdump", "sync", "-d", src, "--target-dbname", dst,
            "--watch", "1"]  # fmt: skip
    lines: list[str] = []
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert p.stderr is not None
        reader = threading.Thread(target=lambda: lines.extend(p.stderr or ()), daemon=True)
        reader.start()
        _sql(src, "SELECT lo_from_bytea(45000, 'watched')")
        deadline = time.monotonic() + 60
        while not any(": copied 1 new LO;" in line for line in lines):  # a run that copied it
            assert p.poll() is None, lines
            assert time.monotonic() < deadline, lines
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        p.wait(60)
        reader.join(10)
    err = "".join(lines)
    assert p.returncode == 130, err
    assert lines[-1].startswith("Error: ") and "interrupted by SIGINT" in lines[-1], err
    assert state(dst) == state(src)


def test_kill_9_mid_sync_then_the_next_sync_completes(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    src, dst = new_db(pg17), new_db(pg17)
    _sql(src, "SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), 128), 'hex')))"
              " FROM generate_series(200000, 259999) o")  # fmt: skip
    copy(src, dst, CopyRequest())
    _sql(src, "SELECT count(lo_put(o, 100, 'changed')) FROM generate_series(200000, 259999) o")
    args = [sys.executable, "-m", "pgblobdump", "sync", "-d", src, "--target-dbname", dst,
            "--jobs", "2"]  # fmt: skip

    copied = sorted(set(_xmins(dst).values()))

    def rewritten() -> int:
        with psycopg.connect(dst) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_largeobject_metadata WHERE xmin::text <> ALL(%s)",
                (copied,),
            ).fetchone()
        return int(row[0]) if row else 0

    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        deadline = time.monotonic() + 60
        while rewritten() < 5000:
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        p.kill()
        p.communicate()
    expected: State = state(src)
    assert state(dst) != expected
    r = sync(src, dst, SyncRequest())
    assert not r.plan.conflicts and state(dst) == expected


def test_sigterm_mid_sync_leaves_every_lo_there_and_the_next_sync_completes(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A rewrite removes the target's copy in the transaction that writes the new one: cut
    short, a sync leaves each LO old or new, never absent."""
    src, dst = new_db(pg17), new_db(pg17)
    _sql(src, "SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), 128), 'hex')))"
              " FROM generate_series(200000, 259999) o")  # fmt: skip
    copy(src, dst, CopyRequest())
    old = state(dst)
    copied = sorted(set(_xmins(dst).values()))
    _sql(src, "SELECT count(lo_put(o, 100, 'changed')) FROM generate_series(200000, 259999) o")
    new = state(src)
    args = [sys.executable, "-m", "pgblobdump", "sync", "-d", src, "--target-dbname", dst]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        deadline = time.monotonic() + 60
        while not set(_xmins(dst).values()) - set(copied):  # a batch was rewritten
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        p.send_signal(signal.SIGTERM)
        _out, err = p.communicate(timeout=60)
    lines = err.strip().splitlines()
    assert p.returncode == 143, err
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "absent" not in lines[0], err
    got = state(dst)
    assert got.keys() == old.keys()  # none missing
    rewritten = {o for o in got if got[o] == new[o]}
    assert rewritten and len(rewritten) < len(got)
    assert all(got[o] == old[o] for o in got.keys() - rewritten)
    r = sync(src, dst, SyncRequest())
    assert not r.plan.conflicts and state(dst) == new


def test_sync_of_what_a_column_references(pair: tuple[str, str]) -> None:
    src, dst = pair
    _sql(src, "CREATE TABLE docs (body oid)", "INSERT INTO docs VALUES (30001), (30002)",
         "SELECT lo_put(30001, 0, 'x')", "SELECT lo_put(30003, 0, 'x')")  # fmt: skip
    r = sync(src, dst, SyncRequest(Selection(referenced_by=(("docs", "body"),)), delete=True))
    # 30001 changed and is referenced: copied again; 30003 changed too but no row
    # references it: out of the selection, and still on the source: not gone, kept
    assert r.plan.rewrite == [30001] and r.plan.new == [] and r.method.startswith("digests")
    assert r.plan.gone == [] and r.deleted == 0 and not r.plan.conflicts
    assert state(dst)[30003] != state(src)[30003]
