"""migrate never lets a role read bytes it could not read before, and a resumed run never
does half of what each set of options asked: reproductions on a real server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from pgblobdump.errors import DatabaseError, NotFound, UsageError
from pgblobdump.migrate import RunOptions, plan, run, run_in_place
from pgblobdump.migrate import columns as mcolumns
from pgblobdump.migrate import state as mstate
from pgblobdump.migrate.locking import LockClock
from pgblobdump.migrate.reach.access import Widening
from pgblobdump.migrate.runner import Runner
from pgblobdump.migrate.start import start
from pgblobdump.report.reporter import QUIET
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb

W, R, APP = "pgbd_acl_w", "pgbd_acl_r", "pgbd_acl_app"
"""W may read the table but not the secret LO; R may read both; APP owns tables."""


def _roles(conn: psycopg.Connection) -> None:
    for role in (W, R, APP):
        conn.execute(f"DO $$ BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object"
                     " THEN NULL; END $$")  # fmt: skip


def secret_table(db: str) -> None:
    """t(id, lo): row 1 and 2 name LO 777778, which W may read; LO 777777 is secret to W
    and readable by R. W and R may SELECT and UPDATE t."""
    with psycopg.connect(db, autocommit=True) as conn:
        _roles(conn)
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, lo oid)")
        conn.execute("SELECT lo_from_bytea(777777, 'secret'), lo_from_bytea(777778, 'open')")
        conn.execute(f"GRANT SELECT ON LARGE OBJECT 777778 TO {W}, {R}")
        conn.execute(f"GRANT SELECT ON LARGE OBJECT 777777 TO {R}")
        conn.execute("INSERT INTO t VALUES (1, 777778), (2, 777778)")
        conn.execute(f"GRANT SELECT, UPDATE ON t TO {W}, {R}")


@contextmanager
def as_role(db: str, role: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"SET ROLE {role}")
        yield conn


def started(db: str, spec: str, opts: RunOptions | None = None) -> None:
    """A run started (new column, sync triggers) and left for a later `run` to resume."""
    opts = opts or RunOptions()
    with psycopg.connect(db, autocommit=True) as conn:
        mstate.ensure(conn, opts.schema)
        start(conn, mcolumns.resolve(conn, spec), opts, QUIET, LockClock())


def go(db: str, spec: str, **opts: object) -> object:
    with psycopg.connect(db, autocommit=True) as conn:
        return run(conn, spec, RunOptions(**opts))  # type: ignore[arg-type]


def col_type(db: str, table: str, col: str) -> str:
    with psycopg.connect(db) as conn:
        return str(
            conn.execute(
                "SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid ="
                " %s::regclass AND attname = %s",
                (table, col),
            ).fetchone()[0]  # type: ignore[index]
        )


def test_plan_names_and_run_refuses_los_a_reader_of_the_column_may_not_read(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    secret_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("UPDATE t SET lo = 777777 WHERE id = 1")  # before any run
        p = plan(conn, "test")
    col = next(c for c in p.columns if c.column == "public.t.lo")
    assert col.widening == Widening(1, (777777,), (W,))
    assert any("777777" in n and W in n for n in col.notes)
    with pytest.raises(DatabaseError, match=rf"777777.*{W}.*--allow-acl-widening"):
        go(db, "t.lo")
    assert col_type(db, "t", "lo") == "oid"  # refused before anything changed
    with as_role(db, W) as w, pytest.raises(psycopg.errors.InsufficientPrivilege):
        w.execute("SELECT lo_get(777777)")
    r = go(db, "t.lo", allow_acl_widening=True)
    assert r.phase == "done"  # type: ignore[attr-defined]
    with as_role(db, W) as w:  # what the user accepted, by name
        assert w.execute("SELECT lo FROM t WHERE id = 1").fetchone()[0] == b"secret"  # type: ignore[index]


def test_public_readers_of_the_column_count(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    secret_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("GRANT SELECT ON LARGE OBJECT 777778 TO PUBLIC")
        conn.execute("GRANT SELECT (lo) ON t TO PUBLIC")
        p = plan(conn, "test")
        assert next(c for c in p.columns if c.column == "public.t.lo").widening == Widening(
            0, (), ()
        )
        conn.execute("UPDATE t SET lo = 777777 WHERE id = 2")
        p = plan(conn, "test")
    wider = next(c for c in p.columns if c.column == "public.t.lo").widening
    # PUBLIC, and so every role of the cluster but R (and superusers) is named.
    assert wider is not None and wider.los == 1 and wider.sample == (777777,)
    assert {"PUBLIC", W} <= set(wider.roles) and R not in wider.roles


def test_a_write_during_the_run_naming_an_lo_the_writer_may_not_read_fails(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """The reported hole: W points a row at LO 777777 while the run goes; the deferred copy
    ran as the migrating role and W then read the secret from the bytea column."""
    db = new_db(pg17)
    secret_table(db)
    started(db, "t.lo")
    with (
        as_role(db, W) as w,
        pytest.raises(
            psycopg.errors.InsufficientPrivilege, match="permission denied for large object 777777"
        ),
    ):
        w.execute("UPDATE t SET lo = 777777 WHERE id = 1")
    r = go(db, "t.lo")
    assert r.phase == "done"  # type: ignore[attr-defined]
    with as_role(db, W) as w:
        assert [bytes(b) for (b,) in w.execute("SELECT lo FROM t ORDER BY id")] == [b"open"] * 2


def test_a_write_by_a_reader_of_the_lo_is_not_copied_for_readers_who_may_not(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """R may read LO 777777 and points a row at it during the run: copying it would let W
    read it, so the row is logged and the run refuses it by name; allowed, it goes on."""
    db = new_db(pg17)
    secret_table(db)
    started(db, "t.lo")
    with as_role(db, R) as r:
        r.execute("UPDATE t SET lo = 777777 WHERE id = 1")
    with psycopg.connect(db) as conn:
        logged = conn.execute("SELECT error FROM pgblobdump.migration_redo").fetchall()
    assert len(logged) == 1 and "777777" in logged[0][0] and W in logged[0][0]
    with pytest.raises(DatabaseError, match=rf"777777.*{W}.*--allow-acl-widening"):
        go(db, "t.lo")
    assert col_type(db, "t", "lo") == "oid"
    r2 = go(db, "t.lo", allow_acl_widening=True)
    assert r2.phase == "done"  # type: ignore[attr-defined]
    with as_role(db, R) as r:
        assert r.execute("SELECT lo FROM t WHERE id = 1").fetchone()[0] == b"secret"  # type: ignore[index]


def _lo_rows(db: str, table: str) -> list[tuple[str, str | None, bytes]]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            f"SELECT pg_get_userbyid(m.lomowner), m.lomacl::text, lo_get(x.v) FROM {table} x"
            " JOIN pg_largeobject_metadata m ON m.oid = x.v ORDER BY x.id"
        ).fetchall()
    return [(o, a, bytes(b)) for o, a, b in rows]


def test_to_lo_gives_the_new_los_the_tables_owner_and_readers_and_leaks_none(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        _roles(conn)
        conn.execute("CREATE TABLE b (id int PRIMARY KEY, v bytea)")
        conn.execute("INSERT INTO b SELECT g, convert_to('v' || g, 'UTF8')"
                     " FROM generate_series(1, 6) g")  # fmt: skip
        conn.execute(f"ALTER TABLE b OWNER TO {APP}")
        conn.execute(f"GRANT SELECT ON b TO {R}")
    started(db, "b.v", RunOptions(to="lo"))
    with psycopg.connect(db, autocommit=True) as conn:
        # Rows changed during the run get an LO at commit; deleting them (or truncating
        # the table) must take those along: nothing else can name them.
        conn.execute("UPDATE b SET v = 'changed' WHERE id IN (2, 3)")
        conn.execute("DELETE FROM b WHERE id = 2")
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0] == 1  # type: ignore[index]
    r = go(db, "b.v", to="lo")
    assert r.phase == "done"  # type: ignore[attr-defined]
    rows = _lo_rows(db, "b")
    assert [b for _, _, b in rows] == [b"v1", b"changed", b"v4", b"v5", b"v6"]
    for owner, acl, _ in rows:
        assert owner == APP and acl is not None and f"{R}=r/{APP}" in acl, (owner, acl)
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0] == 5  # type: ignore[index]
    with as_role(db, R) as r:
        assert r.execute("SELECT lo_get(v) FROM b WHERE id = 1").fetchone()[0] == b"v1"  # type: ignore[index]
    with psycopg.connect(db) as conn:
        one = conn.execute("SELECT v FROM b WHERE id = 1").fetchone()[0]  # type: ignore[index]
    with as_role(db, W) as w, pytest.raises(psycopg.errors.InsufficientPrivilege):
        w.execute("SELECT lo_get(%s)", (one,))


def test_to_lo_owner_option_and_in_place(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        _roles(conn)
        for t in ("b", "c"):
            conn.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v bytea)")
            conn.execute(f"INSERT INTO {t} VALUES (1, 'one'), (2, 'two')")
            conn.execute(f"GRANT SELECT (id, v) ON {t} TO {W}")
        with pytest.raises(NotFound, match="no role pgbd_nosuch"):
            run(conn, "b.v", RunOptions(to="lo", owner="pgbd_nosuch"))
        # An LO's owner reads it: R, who may not read b.v, may not own its bytes.
        with pytest.raises(DatabaseError, match=rf"owner {R} may not read every row of"):
            run(conn, "b.v", RunOptions(to="lo", owner=R))
        conn.execute(f"GRANT SELECT (id, v) ON b TO {R}")
        run(conn, "b.v", RunOptions(to="lo", owner=R))
        run_in_place(conn, "c.v", RunOptions(to="lo"))
    b, c = _lo_rows(db, "b"), _lo_rows(db, "c")
    assert [(o, b_) for o, _, b_ in b] == [(R, b"one"), (R, b"two")]
    me = pg17.conninfo().split("user=")[1].split()[0]
    assert all(a is not None and f"{W}=r/{R}" in a for _, a, _ in b)
    assert [(o, b_) for o, _, b_ in c] == [(me, b"one"), (me, b"two")]
    assert all(a is not None and f"{W}=r/{me}" in a for _, a, _ in c)
    with pytest.raises(UsageError, match="--owner goes with --to lo"):
        RunOptions(owner=R)


def test_partitioned_tables_and_partitions_are_refused_by_name(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE p (id int PRIMARY KEY, lo oid) PARTITION BY RANGE (id)")
        conn.execute("CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (100)")
        conn.execute("INSERT INTO p VALUES (1, lo_from_bytea(0, 'x'))")
        with pytest.raises(UsageError, match=r"public\.p is a partitioned table"):
            run(conn, "p.lo", RunOptions())
        with pytest.raises(UsageError, match=r"public\.p1 is a partition of p"):
            run(conn, "p1.lo", RunOptions())
        with pytest.raises(UsageError, match="partitioned table"):
            run_in_place(conn, "p.lo", RunOptions())
    assert col_type(db, "p", "lo") == "oid"


def _to_switched(db: str, spec: str, opts: RunOptions) -> None:
    """Start a run and drive it through fill, verify and switch, stopping before finish
    (where a kill after the switch would leave it)."""
    with psycopg.connect(db, autocommit=True) as conn:
        mstate.ensure(conn, opts.schema)
        col = mcolumns.resolve(conn, spec)
        mig = start(conn, col, opts, QUIET, LockClock())
        runner = Runner(conn, mcolumns.describe(conn, col.relid, col.name), mig, opts, QUIET)
        runner.fill()
        runner.verify()
        runner.switch()


def test_resumed_options_apply_before_the_switch_and_are_refused_after(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        for t in ("a", "b", "c"):
            conn.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, lo oid)")
            conn.execute(f"INSERT INTO {t} SELECT g, lo_from_bytea(0, 'x') FROM"
                         " generate_series(1, 5) g")  # fmt: skip
    # Before the switch: the new options are the run's from now on, both of them.
    started(db, "a.lo")
    go(db, "a.lo", missing="skip")  # skip keeps the old column (its OIDs)
    assert "lo_lo" in {c for c in _columns(db, "a")}
    # After the switch: what it was asked to keep is settled; another value is refused.
    _to_switched(db, "b.lo", RunOptions())
    with pytest.raises(UsageError, match="switched with no --keep-old"):
        go(db, "b.lo", keep_old=True)
    assert go(db, "b.lo").phase == "done"  # type: ignore[attr-defined]
    assert "lo_lo" not in {c for c in _columns(db, "b")}
    started(db, "c.lo", RunOptions(storage="external"))
    with pytest.raises(UsageError, match="--storage external"):
        go(db, "c.lo", storage="extended")
    assert go(db, "c.lo", storage="external").phase == "done"  # type: ignore[attr-defined]


def _columns(db: str, table: str) -> list[str]:
    with psycopg.connect(db) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
                " AND NOT attisdropped",
                (table,),
            )
        ]


def test_bytes_written_into_an_lo_after_its_row_was_verified_are_not_lost(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """lo_put into an LO touches no row, so no trigger sees it; after the verify pass read
    the row, only the pages' xmin says so. The run keeps the old column and unlinks
    nothing rather than lose those bytes."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id int PRIMARY KEY, lo oid)")
        conn.execute("INSERT INTO a SELECT g, lo_from_bytea(0, 'x') FROM generate_series(1, 5) g")
    opts = RunOptions(unlink=True)
    with psycopg.connect(db, autocommit=True) as conn:
        mstate.ensure(conn, opts.schema)
        col = mcolumns.resolve(conn, "a.lo")
        mig = start(conn, col, opts, QUIET, LockClock())
        runner = Runner(conn, mcolumns.describe(conn, col.relid, col.name), mig, opts, QUIET)
        runner.fill()
        runner.verify()
        late = conn.execute("SELECT lo FROM a WHERE id = 3").fetchone()[0]  # type: ignore[index]
        conn.execute("SELECT lo_put(%s, 0, 'late')", (late,))
        runner.switch()
    r = go(db, "a.lo", unlink=True)
    assert r.phase == "done" and any(str(late) in n for n in r.notes)  # type: ignore[attr-defined]
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT lo_get(lo_lo) FROM a WHERE id = 3").fetchone()[0] == b"late"  # type: ignore[index]
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0] == 5  # type: ignore[index]
