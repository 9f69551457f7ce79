"""``copy`` database to database on real servers: every byte and attribute across majors,
conflicts refused before anything is written, an LO on the target that no copy made never
touched, a kill -9 finished by running the copy again, SIGTERM cleaned up exactly."""

from __future__ import annotations

import json
import signal

import psycopg
import pytest

from pgblobdump.errors import DatabaseError, NotFound, UsageError
from pgblobdump.packed.restore.request import OnConflict
from pgblobdump.pg.lostream import Selection
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.run import SyncRequest, sync
from pgblobdump.sync.state import SCHEMA
from tests.clirun import assert_one_line_error, run, started, wait_for
from tests.conftest import NewDb
from tests.losets import fill, state
from tests.losets import roles as _roles

DECORATED = {
    oid: (oid % 3000 if oid % 4 else 0, oid % 3, oid % 3, oid % 2 == 0)
    for oid in [*range(20_000, 20_060), 2**31 + 7, 2**32 - 2]
}
"""Empty and small LOs with every kind of owner, ACL (by the owner, by another grantor)
and comment, OIDs past 2^31 too."""


def _scalar(db: str, query: str, *args: object) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(query, args or None).fetchone()
    assert row is not None
    return int(row[0])


def _los(db: str) -> int:
    return _scalar(db, "SELECT count(*) FROM pg_largeobject_metadata")


def _bulk(db: str, first: int, n: int, size: int) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), %s), 'hex')))"
            " FROM generate_series(%s, %s) o",
            (size // 16, first, first + n - 1),
        )


def test_copy_16_to_17_owners_acls_comments_foreign_lo_untouched(
    pg16: EmbeddedCluster, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    _roles(pg16, pg17)
    src, dst = new_db(pg16), new_db(pg17)
    fill(src, DECORATED)
    _bulk(src, 100_000, 3000, 2048)
    with psycopg.connect(src, autocommit=True) as conn:  # one LO over the reader's memory
        conn.execute("SELECT lo_from_bytea(50000, decode(repeat('ab', 20000000), 'hex'))")
    fill(dst, {90_000: (100, 1, 1, True)})  # the target's own LO, outside the selection
    foreign = state(dst)
    r = copy(src, dst, CopyRequest(jobs=2))
    assert r.los == len(DECORATED) + 3001 and r.kept == r.skipped == 0
    after = state(dst)
    assert after[90_000] == foreign[90_000]
    del after[90_000]
    assert after == state(src)


def test_a_conflict_is_refused_before_anything_is_written(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    _roles(pg17)
    src, dst = new_db(pg17), new_db(pg17)
    fill(src, DECORATED)
    fill(dst, {20_010: (7, 0, 0, False)})
    theirs = state(dst)
    with pytest.raises(DatabaseError, match="LO 20010 already exists in the target"):
        copy(src, dst, CopyRequest(jobs=2))
    assert state(dst) == theirs
    assert _scalar(dst, "SELECT count(*) FROM pg_namespace WHERE nspname = %s", SCHEMA) == 0
    r = copy(src, dst, CopyRequest(on_conflict=OnConflict.SKIP))
    assert r.skipped == 1 and r.los == len(DECORATED) - 1
    after = state(dst)
    assert after[20_010] == theirs[20_010]  # kept, not overwritten
    expected = state(src)
    del expected[20_010], after[20_010]
    assert after == expected
    # copied again: every LO is one a copy made, or the foreign one (refused again)
    with pytest.raises(DatabaseError, match="LO 20010 already exists"):
        copy(src, dst, CopyRequest())
    r = copy(src, dst, CopyRequest(on_conflict=OnConflict.SKIP))
    assert r.los == 0 and r.kept == len(DECORATED) - 1 and r.skipped == 1


def test_a_changed_lo_on_the_target_is_not_taken_for_ours(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """An LO a copy made that another session then changed (a GRANT there), or removed
    and made again at the same OID: no longer the copy's, so a conflict."""
    _roles(pg17)
    src, dst = new_db(pg17), new_db(pg17)
    fill(src, DECORATED)
    copy(src, dst, CopyRequest())
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute("GRANT SELECT ON LARGE OBJECT 20001 TO PUBLIC")
        conn.execute("SELECT lo_unlink(20002)")
        conn.execute("SELECT lo_create(20002)")
    with pytest.raises(DatabaseError, match=r"LO 20001 already exists in the target \(and 20002"):
        copy(src, dst, CopyRequest())


def test_selection_parts_and_bad_input(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    _roles(pg17)
    src = new_db(pg17)
    fill(src, DECORATED)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int, body oid)")
        conn.execute("INSERT INTO docs VALUES (1, 20003), (2, 20005), (3, 99)")
    dst = new_db(pg17)
    r = copy(src, dst, CopyRequest(Selection(referenced_by=(("docs", "body"),))))
    assert r.los == 2 and sorted(state(dst)) == [20003, 20005]
    dst = new_db(pg17)
    assert copy(src, dst, CopyRequest(Selection(20_050, 2**31 + 7))).los == 11
    dst = new_db(pg17)
    results = [copy(src, dst, CopyRequest(part=(k, 3), jobs=2)) for k in (1, 2, 3)]
    assert sum(r.los for r in results) == len(DECORATED)
    assert state(dst) == state(src)
    with pytest.raises(UsageError, match="same database"):
        copy(src, src, CopyRequest())
    with pytest.raises(NotFound, match="no table nope"):
        copy(src, new_db(pg17), CopyRequest(Selection(referenced_by=(("nope", "x"),))))
    with pytest.raises(UsageError, match="--jobs"):
        CopyRequest(jobs=0)


def test_missing_roles_across_clusters(
    pg16: EmbeddedCluster, pg18: EmbeddedCluster, new_db: NewDb
) -> None:
    src, dst = new_db(pg16), new_db(pg18)
    with psycopg.connect(src, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'pgbd_sync_only16'").fetchone():
            conn.execute("CREATE ROLE pgbd_sync_only16")
        conn.execute("SELECT lo_create(30000)")
        conn.execute("ALTER LARGE OBJECT 30000 OWNER TO pgbd_sync_only16")
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS pgbd_sync_only16")
    result = run("copy", "-d", src, "--target-dbname", dst)
    assert_one_line_error(result, 4, "roles missing on the target: pgbd_sync_only16")
    assert _los(dst) == 0
    assert _scalar(dst, "SELECT count(*) FROM pg_namespace WHERE nspname = %s", SCHEMA) == 0


def test_cli_copy_json_and_refusals(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    _roles(pg17)
    src, dst = new_db(pg17), new_db(pg17)
    fill(src, DECORATED)
    result = run("copy", "-d", src, "--target-dbname", dst, "--jobs", "2", "--json")
    assert result.exit_code == 0, result.output
    assert '"los": 62' in result.stdout and '"oids": "0..4294967295"' in result.stdout
    table = run("copy", "-d", src, "--target-dbname", new_db(pg17)).stdout
    # for people: the range that restricts nothing said so, bytes in binary units
    assert "│ OIDs " in table and "all OIDs" in table and "4294967295" not in table, table
    assert "│ LOs " in table and " KiB " in table and " s " in table, table
    assert_one_line_error(run("copy", "-d", src), 2, "--target-dbname")
    assert_one_line_error(run("copy", "-d", src, "--target-dbname", src), 2, "same database")
    assert_one_line_error(run("copy", "-d", src, "--target-dbname", dst, "--part", "3/2"), 2,
                          "--part")  # fmt: skip


@pytest.fixture
def big(pg17: EmbeddedCluster, new_db: NewDb) -> str:
    """60,062 LOs (2 KiB each, but the decorated ones): a copy commits batches over
    seconds."""
    _roles(pg17)
    src = new_db(pg17)
    fill(src, DECORATED)
    _bulk(src, 200_000, 60_000, 2048)
    return src


def test_kill_9_mid_copy_then_rerun_completes(big: str, pg17: EmbeddedCluster,
                                              new_db: NewDb) -> None:  # fmt: skip
    dst = new_db(pg17)
    fill(dst, {90_000: (10, 0, 0, False)})  # the target's own: never touched
    theirs = state(dst)[90_000]
    args = ["copy", "-d", big, "--target-dbname", dst, "--jobs", "2"]
    with started(*args) as proc:
        wait_for(proc, lambda: _los(dst) > 5000, "the copy")
        proc.kill()
        proc.communicate()
    left = _los(dst)
    assert 1 < left < 60_063
    with started(*args) as proc:
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "resuming:" in err
    after = state(dst)
    assert after.pop(90_000) == theirs
    assert after == state(big)


def test_sigterm_mid_copy_removes_exactly_what_it_made(big: str, pg17: EmbeddedCluster,
                                                       new_db: NewDb) -> None:  # fmt: skip
    dst = new_db(pg17)
    fill(dst, {90_000: (10, 0, 0, False)})
    before = state(dst)
    with started("copy", "-d", big, "--target-dbname", dst, "--jobs", "2") as proc:
        wait_for(proc, lambda: _los(dst) > 5000, "the copy")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: copy interrupted by SIGTERM"), err
    assert "removed the" in lines[0], err
    assert state(dst) == before


def test_writers_on_the_source_during_copy_then_sync_picks_them_up(
    big: str, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """The copy equals its snapshot: a write committed on the source while it runs (to
    the last LO, not copied yet, and a new LO) is not in it; the next sync brings it."""
    dst = new_db(pg17)
    last = 200_000 + 59_999
    old = state(big)[last]
    with started("copy", "-d", big, "--target-dbname", dst) as proc:
        wait_for(proc, lambda: _los(dst) > 1000, "the copy")
        with psycopg.connect(big, autocommit=True) as conn:
            conn.execute(f"SELECT lo_put({last}, 0, 'written during the copy')")
            conn.execute("SELECT lo_from_bytea(300000, 'made during the copy')")
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    got = state(dst)
    assert got[last] == old and 300_000 not in got
    r = sync(big, dst, SyncRequest())
    assert r.plan.rewrite == [last] and r.plan.new == [300_000]
    assert state(dst) == state(big)


def test_source_backends_terminated_mid_copy_then_rerun(
    big: str, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    dst = new_db(pg17)
    with started("copy", "-d", big, "--target-dbname", dst, "--jobs", "2") as proc:
        wait_for(proc, lambda: _los(dst) > 2000, "the copy")
        with psycopg.connect(big, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname ="
                " current_database() AND pid <> pg_backend_pid()"
            )
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "lost the connection to the server" in lines[0], err
    assert "reading the source" in lines[0] or "on the source" in lines[0], err
    assert "removed the" in lines[0], err
    assert _los(dst) == 0  # exactly what it made, removed
    with started("copy", "-d", big, "--target-dbname", dst, "--jobs", "2") as proc:
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert state(dst) == state(big)


def test_a_bare_target_dbname_is_on_the_source_server_given_by_a_string(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """-d as a connection string, --target-dbname a bare name: the target is that database
    on the source's server (its host, port and user), not on libpq's default server."""
    src, dst = new_db(pg17), new_db(pg17)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(31000, 'here')")
    name = psycopg.conninfo.conninfo_to_dict(dst)["dbname"]
    result = run("copy", "-d", src, "--target-dbname", str(name))
    assert result.exit_code == 0, result.output
    assert _los(dst) == 1


def test_a_part_after_the_last_oid_is_empty(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """The only LO at OID 4294967295: part 1/2 copies it, part 2/2 copies nothing (its
    range used to start at 2^32: "OID out of range", exit 4)."""
    src, dst = new_db(pg17), new_db(pg17)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(4294967295, 'the last')")
    results = [run("copy", "-d", src, "--target-dbname", dst, "--part", p, "--json")
               for p in ("2/2", "1/2")]  # fmt: skip
    assert [r.exit_code for r in results] == [0, 0], [r.output for r in results]
    assert [json.loads(r.stdout)["los"] for r in results] == [0, 1]
    assert state(dst) == state(src)
