"""vacuum never removes a referenced LO: every reference kind, the refusals, the unlink
right, --min-age and a concurrent writer, on a real server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from pgblobdump.errors import NotFound, UnsafeToRemove
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.vacuum import VacuumRequest, vacuum
from tests.conftest import NewDb

NOW = VacuumRequest(min_age=0)
ROLE = "pgbd_vac_r"
OTHER = "pgbd_vac_o"


def los(db: str) -> set[int]:
    with psycopg.connect(db, autocommit=True) as c:
        return {int(r[0]) for r in c.execute("SELECT oid::int8 FROM pg_largeobject_metadata")}


def setup(db: str, *stmts: str, n: int = 20) -> None:
    with psycopg.connect(db, autocommit=True) as c:
        c.execute(f"SELECT lo_create(i) FROM generate_series(1, {n}) i")
        for s in stmts:
            c.execute(s)


def as_role(db: str, role: str) -> str:
    return db.replace("user=postgres", f"user={role}")


def roles(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as c:
        for r in (ROLE, OTHER):
            c.execute(f"DO $$ BEGIN CREATE ROLE {r} LOGIN; EXCEPTION WHEN duplicate_object"
                      " THEN NULL; END $$")  # fmt: skip


def test_every_reference_kind_keeps_its_lo(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    setup(
        db,
        "CREATE EXTENSION lo",
        "CREATE DOMAIN doid AS oid; CREATE DOMAIN dlos AS lo[]",
        "CREATE TABLE a (x oid, y lo, z oid[], w lo[], d doid, e dlos)",
        "INSERT INTO a VALUES (1, 2, '{3,NULL,4}', '{5}', 6, '{7}'),"
        " (NULL, NULL, NULL, NULL, NULL, NULL)",
        "CREATE TABLE p (k int, x oid) PARTITION BY RANGE (k)",
        "CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10)",
        "INSERT INTO p VALUES (1, 8)",
        "CREATE MATERIALIZED VIEW mv AS SELECT 9::oid AS x",
        "CREATE TABLE t (s text, j jsonb)",
        "INSERT INTO t VALUES ('see 10 and 0011', '{\"a\": [12, \"13\"]}')",
        "CREATE TABLE n (v int8)",  # dismissed after review: its 14 protects nothing
        "INSERT INTO n VALUES (14)",
    )
    result = vacuum(db, VacuumRequest(min_age=0, references=(("t", "s"), ("public.t", "j")),
                                      not_references=(("n", "v"),)))  # fmt: skip
    assert los(db) == set(range(1, 14))
    assert result.removed == 7 and result.orphans == 7


def test_text_and_integer_columns_holding_oids_count_unless_dismissed(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Hibernate's CLOB digits in a text column, a file name, an int8: suspected
    references, kept (vacuumlo deletes them); dismissed, they protect nothing."""
    db = new_db(pg17)
    setup(db, "CREATE TABLE t (s text, f varchar(40), n int8)",
          "INSERT INTO t VALUES ('1', '2.png', 3)", n=5)  # fmt: skip
    r = vacuum(db, NOW)
    assert los(db) == {1, 2, 3}
    assert r.kept_only_by_suspects == 3 and [s["column"] for s in r.suspects] == [
        "public.t.s",
        "public.t.f",
        "public.t.n",
    ]
    vacuum(db, VacuumRequest(min_age=0, not_references=(("t", "s"), ("public.t", "n"))))
    assert los(db) == {2}


def test_a_named_column_that_does_not_exist_is_refused(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    setup(db, "CREATE TABLE t (s text)", n=2)
    with pytest.raises(NotFound, match=r"no column t\.nope"):
        vacuum(db, VacuumRequest(min_age=0, references=(("t", "nope"),)))


def test_a_composite_holding_oids_is_read_through_its_attributes(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    setup(db, "CREATE TYPE pair AS (a int, o oid)", "CREATE TABLE c (v pair)",
          "INSERT INTO c VALUES (ROW(1, 2))", n=3)  # fmt: skip
    vacuum(db, VacuumRequest(min_age=0, dry_run=True))
    assert los(db) == {1, 2, 3}
    vacuum(db, NOW)
    assert los(db) == {2}  # its oid attribute, exactly
    setup(db, "SELECT lo_create(1)", n=0)
    vacuum(db, VacuumRequest(min_age=0, references=(("c", "v"),)))
    assert los(db) == {1, 2}  # named: every number in (1,2) counts, never too few


def test_a_table_the_role_cannot_read_is_refused(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    roles(db)
    setup(db, "CREATE TABLE secret (x oid)", "INSERT INTO secret VALUES (1)",
          f"ALTER LARGE OBJECT 1 OWNER TO {ROLE}", f"ALTER LARGE OBJECT 2 OWNER TO {ROLE}",
          n=2)  # fmt: skip
    with pytest.raises(UnsafeToRemove, match=r"public\.secret\.x \(the role may not read it\)"):
        vacuum(as_role(db, ROLE), NOW)
    assert los(db) == {1, 2}
    with psycopg.connect(db, autocommit=True) as c:
        c.execute(f"GRANT SELECT (x) ON secret TO {ROLE}")  # a column grant reads it
    assert vacuum(as_role(db, ROLE), VacuumRequest(min_age=0, dry_run=True)).removable == 1
    with pytest.raises(UnsafeToRemove, match=r"secret\.x \(the role may not lock its table"):
        vacuum(as_role(db, ROLE), NOW)  # but cannot hold writers off while it unlinks
    with psycopg.connect(db, autocommit=True) as c:
        c.execute(f"GRANT UPDATE ON secret TO {ROLE}")
    vacuum(as_role(db, ROLE), NOW)
    assert los(db) == {1}


@pytest.mark.parametrize("owner, force, refused", [
    (False, False, True), (True, False, False), (True, True, True),
])  # fmt: skip
def test_row_level_security_that_applies_is_refused(
    pg17: EmbeddedCluster, new_db: NewDb, owner: bool, force: bool, refused: bool
) -> None:
    db = new_db(pg17)
    roles(db)
    setup(db, "CREATE TABLE r (x oid, mine bool)", "INSERT INTO r VALUES (1, false), (2, true)",
          "ALTER TABLE r ENABLE ROW LEVEL SECURITY", "CREATE POLICY p ON r USING (mine)",
          f"GRANT SELECT ON r TO {ROLE}",
          *(f"ALTER LARGE OBJECT {i} OWNER TO {ROLE}" for i in (1, 2, 3)), n=3)  # fmt: skip
    with psycopg.connect(db, autocommit=True) as c:
        if owner:
            c.execute(f"ALTER TABLE r OWNER TO {ROLE}")
        if force:
            c.execute("ALTER TABLE r FORCE ROW LEVEL SECURITY")
    if refused:
        with pytest.raises(UnsafeToRemove, match="row-level security applies"):
            vacuum(as_role(db, ROLE), NOW)
        assert los(db) == {1, 2, 3}
    else:
        vacuum(as_role(db, ROLE), NOW)
        assert los(db) == {1, 2}  # LO 1, in a row the policy hides, is kept


def test_only_what_the_role_may_unlink_goes(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    roles(db)
    setup(db, f"ALTER LARGE OBJECT 1 OWNER TO {ROLE}", f"ALTER LARGE OBJECT 2 OWNER TO {OTHER}",
          n=3)  # fmt: skip
    r = vacuum(as_role(db, ROLE), NOW)
    assert los(db) == {2, 3}
    assert (r.removed, r.not_owned, r.not_owned_sample) == (1, 2, (2, 3))
    with psycopg.connect(db, autocommit=True) as c:
        c.execute(f"ALTER DATABASE {c.info.dbname} SET lo_compat_privileges = on")
    r = vacuum(as_role(db, ROLE), NOW)  # everyone may unlink now, as lo_unlink says
    assert los(db) == set() and r.removed == 2


def test_min_age_keeps_young_los_until_a_horizon_sample_is_old_enough(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    setup(db, n=2)
    first = vacuum(db, VacuumRequest(min_age=3600))
    assert first.young == 2 and los(db) == {1, 2}
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("SELECT lo_create(3)")  # after the first run's sample
        c.execute("UPDATE pgblobdump.vacuum_horizons SET taken_at = now() - interval '2 hours'")
    second = vacuum(db, VacuumRequest(min_age=3600))
    assert los(db) == {3} and second.removed == 2 and second.young == 1
    with psycopg.connect(db, autocommit=True) as c:
        # A sample from another database proves nothing here.
        c.execute("UPDATE pgblobdump.vacuum_horizons SET taken_at = now() - interval '2 hours',"
                  " database = 1")  # fmt: skip
    assert vacuum(db, VacuumRequest(min_age=3600)).removed == 0 and los(db) == {3}


def test_an_lo_of_an_open_transaction_is_never_seen(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    setup(db, "CREATE TABLE t (x oid)", n=1)
    with psycopg.connect(db) as w:
        w.execute("SELECT lo_create(50)")
        vacuum(db, NOW)
        w.execute("INSERT INTO t VALUES (50)")
        w.commit()
    assert los(db) == {50}


@contextmanager
def writer_holding(db: str, stmt: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db) as w:
        w.execute(stmt)
        yield w


def _waiting_on_lock(db: str) -> bool:
    with psycopg.connect(db, autocommit=True) as c:
        row = c.execute("SELECT count(*) FROM pg_locks WHERE NOT granted"
                        " AND relation = 't'::regclass").fetchone()  # fmt: skip
        return bool(row and row[0])


def test_a_reference_inserted_while_vacuum_runs_keeps_its_lo(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """The writer has inserted (not committed) a row naming orphan 7 when vacuum finds the
    orphans; vacuum's lock waits for it, the re-check then sees the row: 7 stays."""
    db = new_db(pg17)
    setup(db, "CREATE TABLE t (x oid)", n=10)
    errors: list[BaseException] = []
    with writer_holding(db, "INSERT INTO t VALUES (7)") as w:

        def run() -> None:
            try:
                vacuum(db, NOW)
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        th = threading.Thread(target=run)
        th.start()
        deadline = time.monotonic() + 30
        while not _waiting_on_lock(db):
            assert time.monotonic() < deadline and th.is_alive(), "vacuum never waited"
            time.sleep(0.05)
        w.commit()
        th.join(60)
    assert not errors, errors
    assert los(db) == {7}


@pytest.mark.pg
def test_min_age_from_commit_timestamps() -> None:
    """With track_commit_timestamp on, an LO's age comes from its commit time: no
    horizon sample needed (dry runs record none)."""
    try:
        cluster = EmbeddedCluster(17, settings={"track_commit_timestamp": "on"})
    except Exception as e:  # pragma: no cover - a machine without the 17 wheel
        pytest.skip(str(e))
    with cluster as c:
        db = c.conninfo()
        setup(db, n=1)
        req = VacuumRequest(min_age=2, dry_run=True)
        first = vacuum(db, req)
        assert (first.young, first.removable) == (1, 0) and "commit timestamps" in first.age
        time.sleep(2.5)
        assert vacuum(db, req).removable == 1


def test_a_writer_holding_an_orphan_and_waiting_for_our_lock_is_no_hang(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A writer that changed orphan 7 (GRANT ON LARGE OBJECT: its metadata row) and then
    inserts a row naming it waits for the guard's lock while our batch waits for that
    row: the batch gives up after its lock timeout, the round is undone, the writer's
    row lands, 7 stays. Without the timeout each waits for the other forever (the server
    sees no deadlock: the guard waits for its client)."""
    db = new_db(pg17)
    setup(db, "CREATE TABLE t (x oid)", n=10)
    errors: list[BaseException] = []
    with psycopg.connect(db) as w:
        w.execute("SET lock_timeout = '20s'")  # without the fix: an error, not a hung test
        w.execute("GRANT SELECT ON LARGE OBJECT 7 TO PUBLIC")  # holds 7's row to commit

        def run() -> None:
            try:
                vacuum(db, VacuumRequest(min_age=0, jobs=1))
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        th = threading.Thread(target=run)
        th.start()
        deadline = time.monotonic() + 30
        while True:  # our batch waits for LO 7's lock
            with psycopg.connect(db, autocommit=True) as c:
                row = c.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
            if row and row[0]:
                break
            assert time.monotonic() < deadline and th.is_alive(), "vacuum never waited for 7"
            time.sleep(0.05)
        w.execute("INSERT INTO t VALUES (7)")  # waits for the guard until the round is undone
        w.commit()
        th.join(60)
        assert not th.is_alive(), "vacuum hangs"
    assert not errors, errors
    assert los(db) == {7}
