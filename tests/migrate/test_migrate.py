"""migrate on real servers: tables made by ``generate`` (owners, ACLs, comments), shared and
dangling references, writes during the run, a kill and a resume; every byte compared."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from pgblobdump.errors import DatabaseError, NotFound, UsageError
from pgblobdump.generate import Content, GenerateSpec, SizeSpec
from pgblobdump.generate import generate as make_los
from pgblobdump.migrate import LockPolicy, RunOptions, abort, plan, run, run_in_place
from pgblobdump.migrate import state as mstate
from pgblobdump.migrate.columns import split_name
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb


def generated(db: str, n: int = 120, table: str = "docs", **extra: object) -> None:
    spec = GenerateSpec(
        count=n, size=SizeSpec.parse("0-40KiB"), content=Content.TEXT, table=table, owners=2,
        grant_fraction=0.3, comment_fraction=0.2, seed=7, **extra,  # type: ignore[arg-type]
    )  # fmt: skip
    make_los(db, spec)


def contents(db: str, table: str = "docs", col: str = "lo") -> dict[int, bytes | None]:
    """id -> the bytes a row holds, whatever its column's type is now."""
    with psycopg.connect(db) as conn:
        typ = conn.execute(
            "SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = %s::regclass"
            " AND attname = %s",
            (table, col),
        ).fetchone()[0]  # type: ignore[index]
        expr = (
            col if typ == "bytea" else f"CASE WHEN {col} IS NULL THEN NULL ELSE lo_get({col}) END"
        )
        rows = conn.execute(f"SELECT id, {expr} FROM {table} ORDER BY id").fetchall()
    return {int(i): (bytes(b) if b is not None else None) for i, b in rows}


def lo_count(db: str) -> int:
    with psycopg.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0])  # type: ignore[index]


def columns_of(db: str, table: str = "docs") -> dict[str, tuple[str, bool]]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, NULL), attnotnull FROM pg_attribute"
            " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            (table,),
        ).fetchall()
    return {r[0]: (r[1], bool(r[2])) for r in rows}


COMMENT = (
    "SELECT col_description(attrelid, attnum) FROM pg_attribute"
    " WHERE attrelid = 'docs'::regclass AND attname = 'lo'"
)


def go(db: str, spec: str = "docs.lo", **opts: object) -> object:
    with psycopg.connect(db, autocommit=True) as conn:
        return run(conn, spec, RunOptions(**opts))  # type: ignore[arg-type]


def test_split_name_follows_sql_rules() -> None:
    assert split_name("Docs.Lo") == ["docs", "lo"]
    assert split_name('s."My ""T"".x".c') == ["s", 'My "T".x', "c"]
    for bad in ("a..b", '"open.b', "a. b", 'a"b'):
        with pytest.raises(UsageError):
            split_name(bad)


def test_there_and_back_keeps_every_byte_and_column_property(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    generated(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION lo")
        conn.execute("CREATE TRIGGER t_lo BEFORE UPDATE OR DELETE ON docs"
                     " FOR EACH ROW EXECUTE FUNCTION lo_manage(lo)")  # fmt: skip
        conn.execute("COMMENT ON COLUMN docs.lo IS 'the file'")
        conn.execute("DO $$ BEGIN CREATE ROLE pgbd_col_reader; EXCEPTION WHEN duplicate_object"
                     " THEN NULL; END $$")  # fmt: skip
        conn.execute("GRANT SELECT (lo) ON docs TO pgbd_col_reader")
        # A second row naming the same LO: each row gets its copy.
        conn.execute("INSERT INTO docs SELECT 100000, lo, size, 'again' FROM docs WHERE id = 3")
    before = contents(db)
    los_before = lo_count(db)
    r = go(db, batch_rows=17, storage="external")
    assert r.phase == "done" and r.rows == 121 and r.lock_ms < 1000  # type: ignore[attr-defined]
    assert contents(db) == before
    assert columns_of(db)["lo"] == ("bytea", True)
    assert "lo_lo" not in columns_of(db)
    with psycopg.connect(db) as conn:
        assert conn.execute(COMMENT).fetchone()[0] == "the file"  # type: ignore[index]
        assert conn.execute(
            "SELECT has_column_privilege('pgbd_col_reader', 'docs', 'lo', 'SELECT')"
        ).fetchone()[0]  # type: ignore[index]
        assert not conn.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'docs'::regclass"
                                " AND NOT tgisinternal").fetchone()[0]  # type: ignore[index]  # fmt: skip
        storage = conn.execute("SELECT attstorage FROM pg_attribute WHERE attrelid ="
                               " 'docs'::regclass AND attname = 'lo'").fetchone()[0]  # type: ignore[index]  # fmt: skip
        assert storage == "e"
    assert lo_count(db) == los_before  # no --unlink: every LO is still there
    r = go(db, to="lo", batch_rows=13)
    assert contents(db) == before
    assert columns_of(db)["lo"] == ("oid", True)
    assert lo_count(db) == los_before + 121  # each row got an LO of its own


def test_unlink_removes_only_what_nothing_else_references(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    generated(db, n=60)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE other (id int PRIMARY KEY, ref oid)")
        conn.execute("INSERT INTO other SELECT id, lo FROM docs WHERE id <= 5")
        stranger = conn.execute("SELECT lo_from_bytea(0, 'not ours')").fetchone()[0]  # type: ignore[index]
    before = contents(db)
    r = go(db, unlink=True)
    assert contents(db) == before
    assert r.unlinked == 55 and r.kept_referenced == 5  # type: ignore[attr-defined]
    with psycopg.connect(db) as conn:
        left = {int(o) for (o,) in conn.execute("SELECT oid FROM pg_largeobject_metadata")}
        kept = {int(o) for (o,) in conn.execute("SELECT ref FROM other")}
    assert left == kept | {int(stranger)}


def test_unlink_refuses_when_it_cannot_see_every_reference(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A table of oids the migrating role may not read, or only partly (row security),
    could reference the LOs: --unlink unlinks nothing and says which."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DO $$ BEGIN CREATE ROLE pgbd_mig_unl; EXCEPTION WHEN duplicate_object"
                     " THEN NULL; END $$")  # fmt: skip
        conn.execute(f"GRANT CREATE ON DATABASE {conn.info.dbname} TO pgbd_mig_unl")
        conn.execute("GRANT CREATE ON SCHEMA public TO pgbd_mig_unl")
        conn.execute("SET ROLE pgbd_mig_unl")
        conn.execute("CREATE TABLE mine (id int PRIMARY KEY, b oid)")
        conn.execute(
            "INSERT INTO mine SELECT g, lo_from_bytea(0, 'x') FROM generate_series(1, 4) g"
        )
        conn.execute("RESET ROLE")
        conn.execute("CREATE TABLE hidden (ref oid)")
        conn.execute("INSERT INTO hidden SELECT b FROM mine WHERE id = 1")
        conn.execute("SET ROLE pgbd_mig_unl")
        with pytest.raises(
            DatabaseError, match=r"all of them \(public\.hidden\.ref \(the role may"
        ):
            run(conn, "mine.b", RunOptions(unlink=True))
        conn.execute("RESET ROLE")
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0] == 4  # type: ignore[index]
        # Row security that applies to the role hides rows just as well.
        conn.execute("GRANT SELECT ON hidden TO pgbd_mig_unl")
        conn.execute("ALTER TABLE hidden ENABLE ROW LEVEL SECURITY")
        conn.execute("SET ROLE pgbd_mig_unl")
        with pytest.raises(DatabaseError, match="row-level security"):
            run(conn, "mine.b", RunOptions(unlink=True))
        conn.execute("RESET ROLE")
        conn.execute("ALTER TABLE hidden DISABLE ROW LEVEL SECURITY")
        conn.execute("SET ROLE pgbd_mig_unl")
        r = run(conn, "mine.b", RunOptions(unlink=True))
        conn.execute("RESET ROLE")
        assert (r.unlinked, r.kept_referenced) == (3, 1)
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0] == 1  # type: ignore[index]


def test_dangling_references_follow_missing(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    generated(db, n=20)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("ALTER TABLE docs ALTER COLUMN lo DROP NOT NULL")
        conn.execute("INSERT INTO docs VALUES (500, 4000000001, 0, 'gone'), (501, NULL, 0, 'none')")
    with pytest.raises(DatabaseError, match="4000000001"):
        go(db)
    assert columns_of(db)["lo"][0] == "oid"  # refused before anything changed
    go(db, missing="skip")
    cols = columns_of(db)
    assert cols["lo"][0] == "bytea" and cols["lo_lo"][0] == "oid"  # skip keeps the OIDs
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT lo, lo_lo FROM docs WHERE id = 500").fetchone()
    assert row == (None, 4000000001)


def test_bad_input_is_refused_before_anything_changes(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "Odd S"')
        conn.execute('CREATE TABLE "Odd S"."My T" ("Blob Col" oid, n int)')
        conn.execute(
            'INSERT INTO "Odd S"."My T" SELECT lo_from_bytea(0, convert_to(g::text, \'UTF8\')), g'
            " FROM generate_series(1, 30) g"
        )
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, b oid, s text, j jsonb)")
        conn.execute("INSERT INTO t VALUES (1, lo_from_bytea(0, 'x'), 'a')")
        conn.execute("CREATE VIEW v AS SELECT b FROM t")
    spec = '"Odd S"."My T"."Blob Col"'
    with pytest.raises(DatabaseError, match=r"no primary key.*--in-place"):
        go(db, spec)
    with pytest.raises(UsageError, match="jsonb: --to bytea takes oid or lo"):
        go(db, "t.j")
    with pytest.raises(DatabaseError, match=r"hold values that name no LO.*\('a'\)"):
        go(db, "t.s")
    with pytest.raises(NotFound, match="no column"):
        go(db, "t.nope")
    with pytest.raises(NotFound, match="no table"):
        go(db, "nope.b")
    with pytest.raises(UsageError, match="view v"):
        go(db, "t.b")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP VIEW v")
        # A rule of the application's on another column, partial on this one: dropping
        # the old column would drop it too.
        conn.execute("CREATE UNIQUE INDEX one_s ON t (s) WHERE b IS NOT NULL")
        conn.execute("CREATE INDEX plain_b ON t (b)")  # goes with the column, harmlessly
    with pytest.raises(UsageError, match="index one_s") as refused:
        go(db, "t.b")
    assert "plain_b" not in str(refused.value)
    before = lo_count(db)
    with psycopg.connect(db) as conn:
        want = sorted(
            bytes(r[0]) for r in conn.execute('SELECT lo_get("Blob Col") FROM "Odd S"."My T"')
        )
    with psycopg.connect(db, autocommit=True) as conn:
        r = run_in_place(conn, spec, RunOptions(unlink=True))
    assert r.phase == "done" and r.unlinked == 30
    with psycopg.connect(db) as conn:
        got = sorted(bytes(r[0]) for r in conn.execute('SELECT "Blob Col" FROM "Odd S"."My T"'))
    assert got == want and lo_count(db) == before - 30


def test_a_role_that_may_not_read_the_los_is_refused(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DO $$ BEGIN CREATE ROLE pgbd_mig_weak; EXCEPTION WHEN duplicate_object"
                     " THEN NULL; END $$")  # fmt: skip
        conn.execute("CREATE TABLE w (id int PRIMARY KEY, b oid)")
        conn.execute("INSERT INTO w VALUES (1, lo_from_bytea(0, 'secret'))")
        conn.execute("ALTER TABLE w OWNER TO pgbd_mig_weak")
        conn.execute("SET ROLE pgbd_mig_weak")
        with pytest.raises(DatabaseError, match="GRANT CREATE ON DATABASE"):
            run(conn, "w.b", RunOptions())
        conn.execute("RESET ROLE")
        conn.execute(f"GRANT CREATE ON DATABASE {conn.info.dbname} TO pgbd_mig_weak")
        conn.execute("GRANT CREATE ON SCHEMA public TO pgbd_mig_weak")
        conn.execute("SET ROLE pgbd_mig_weak")
        with pytest.raises(DatabaseError, match="may not read the LOs of 1 rows"):
            run(conn, "w.b", RunOptions())
        # Its own LOs it may read; their sizes come from lo_lseek64 (no pg_largeobject).
        conn.execute("CREATE TABLE mine (id int PRIMARY KEY, b oid)")
        conn.execute("INSERT INTO mine SELECT g, lo_from_bytea(0, repeat('x', g * 1000)::bytea)"
                     " FROM generate_series(1, 3) g")  # fmt: skip
        p = plan(conn, "test")
        mine = next(c for c in p.columns if c.column == "public.mine.b")
        assert mine.stats is not None and mine.stats.total_bytes == 6000
        conn.execute("RESET ROLE")
        assert conn.execute("SELECT format_type(atttypid, NULL) FROM pg_attribute WHERE"
                            " attrelid = 'w'::regclass AND attname = 'b'").fetchone()[0] == "oid"  # type: ignore[index]  # fmt: skip


def test_plan_reports_columns_dangling_orphans_and_storage(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    generated(db, n=40)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("ALTER TABLE docs ALTER COLUMN lo DROP NOT NULL")
        conn.execute("INSERT INTO docs VALUES (900, 3999999999, 0, 'gone')")
        conn.execute("SELECT lo_from_bytea(0, 'orphan')")
        conn.execute("CREATE TABLE cat (id int, r oid)")
        conn.execute("INSERT INTO cat VALUES (1, 'pg_class'::regclass)")
        p = plan(conn, "test")
    by = {c.column: c for c in p.columns}
    docs, cat = by["public.docs.lo"], by["public.cat.r"]
    assert docs.confirmed and not cat.confirmed
    assert docs.stats is not None and docs.stats.present == 40 and docs.stats.dangling == 1
    assert docs.stats.dangling_sample == (3999999999,)
    assert p.orphans == 1 and p.lz4
    assert docs.storage is not None and docs.storage.storage == "EXTENDED"  # text compresses
    assert docs.storage.compression == "lz4"
    assert any("--missing" in n for n in docs.notes)


def test_writes_during_the_run_end_up_right(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    generated(db, n=300)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        """An application that names its columns; it stops at the switch, when its
        statements (OIDs into what is now bytea) start failing as they should."""
        try:
            with psycopg.connect(db, autocommit=True) as conn:
                i = 0
                while not stop.is_set():
                    i += 1
                    with conn.transaction():
                        # The row first, its LO's bytes after, in one transaction.
                        oid = conn.execute("SELECT lo_create(0)").fetchone()[0]  # type: ignore[index]
                        conn.execute(
                            "INSERT INTO docs (id, lo, size, name) VALUES (%s, %s, 0, 'w')",
                            (10_000 + i, oid),
                        )
                        conn.execute("SELECT lo_put(%s, 0, %s)", (oid, f"late {i}".encode()))
                    with conn.transaction():
                        new = conn.execute(
                            "SELECT lo_from_bytea(0, %s)", (f"upd {i}".encode(),)
                        ).fetchone()[0]  # type: ignore[index]
                        conn.execute("UPDATE docs SET lo = %s WHERE id = %s", (new, 1 + i % 300))
                    with conn.transaction():
                        # A new LO, then a new key, in one transaction: the copy queued
                        # under the old key finds no row; the one under the new key must.
                        new = conn.execute(
                            "SELECT lo_from_bytea(0, %s)", (f"moved {i}".encode(),)
                        ).fetchone()[0]  # type: ignore[index]
                        conn.execute(
                            "UPDATE docs SET lo = %s WHERE id = %s", (new, 1 + (i * 3) % 300)
                        )
                        conn.execute(
                            "UPDATE docs SET id = %s WHERE id = %s", (20_000 + i, 1 + (i * 3) % 300)
                        )
                    conn.execute("DELETE FROM docs WHERE id = %s", (1 + (i * 7) % 300,))
                    time.sleep(0.002)
        except psycopg.errors.DatatypeMismatch:
            switched.set()
        except BaseException as e:
            errors.append(e)

    switched = threading.Event()
    t = threading.Thread(target=writer)
    with psycopg.connect(db, autocommit=True) as conn:
        t.start()
        try:
            time.sleep(0.3)
            r = run(conn, "docs.lo", RunOptions(batch_rows=7, keep_old=True))
            time.sleep(0.2)
        finally:
            stop.set()
            t.join()
    assert not errors, errors
    assert r.phase == "done" and switched.is_set()
    with psycopg.connect(db) as conn:
        n, late, wrong, null = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE id > 10000),"
            " count(*) FILTER (WHERE lo IS DISTINCT FROM lo_get(lo_lo)),"
            " count(*) FILTER (WHERE lo IS NULL) FROM docs"
        ).fetchone()  # type: ignore[misc]
        bad_late = conn.execute(
            "SELECT count(*) FROM docs WHERE id BETWEEN 10001 AND 19999"
            " AND lo <> convert_to('late ' || (id - 10000), 'UTF8')"
        ).fetchone()[0]  # type: ignore[index]
        moved = conn.execute("SELECT count(*) FROM docs WHERE id > 20000").fetchone()[0]  # type: ignore[index]
    # Every row holds the bytes of the LO it named when the switch came, including rows
    # whose LO was written after the row in the same transaction, and rows whose key
    # changed after their LO did.
    assert late > 0 and moved > 0, (late, moved)
    assert wrong == 0 and null == 0 and bad_late == 0, (n, late, wrong, null)


def _during_run(
    db: str, write: Callable[[psycopg.Connection, int], None], **opts: object
) -> object:
    """Run the migration of docs.lo while ``write(conn, i)`` runs in a loop on another
    connection, until the switch makes its statements fail."""
    stop, errors = threading.Event(), []

    def writer() -> None:
        try:
            with psycopg.connect(db, autocommit=True) as conn:
                i = 0
                while not stop.is_set():
                    i += 1
                    write(conn, i)
                    time.sleep(0.002)
        except (psycopg.errors.DatatypeMismatch, psycopg.errors.UndefinedColumn):
            pass  # the switch: the column has another type now
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(0.2)
        r = go(db, **opts)
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    return r


def test_rows_the_trigger_cannot_copy_are_recopied_at_the_switch(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A row naming no LO, written during the run, is logged by the sync trigger and
    re-copied (NULL, with --missing null) before the switch; the log ends empty."""
    db = new_db(pg17)
    generated(db, n=200)
    with psycopg.connect(db) as conn:
        conn.execute("ALTER TABLE docs ALTER COLUMN lo DROP NOT NULL")

    def write(conn: psycopg.Connection, i: int) -> None:
        conn.execute(
            "INSERT INTO docs (id, lo, size, name) VALUES (%s, %s, 0, 'dangling')",
            (30_000 + i, 4_000_000_000 - i),
        )

    r = _during_run(db, write, batch_rows=5, missing="null", keep_old=True)
    assert r.phase == "done"  # type: ignore[attr-defined]
    with psycopg.connect(db) as conn:
        dangling, not_null = conn.execute(
            "SELECT count(*), count(lo) FROM docs WHERE name = 'dangling'"
        ).fetchone()  # type: ignore[misc]
        wrong = conn.execute(
            "SELECT count(*) FROM docs"
            " WHERE name <> 'dangling' AND lo IS DISTINCT FROM lo_get(lo_lo)"
        ).fetchone()[0]  # type: ignore[index]
        logged = conn.execute("SELECT count(*) FROM pgblobdump.migration_redo").fetchone()[0]  # type: ignore[index]
    assert dangling > 0 and not_null == 0 and wrong == 0 and logged == 0


def test_to_lo_rows_copied_whole_get_los_of_their_own(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """Back to LOs while the application copies rows whole (INSERT ... SELECT *, the new
    column included): each copy gets a new LO, and no row loses the LO it names."""
    db = new_db(pg17)
    generated(db, n=150)
    go(db)  # to bytea first

    def write(conn: psycopg.Connection, i: int) -> None:
        # Every column, the run's new one included, with only the key changed; until the
        # switch (after it the application's copies share OIDs, as they always did).
        conn.execute(
            "INSERT INTO docs SELECT (jsonb_populate_record(d, jsonb_build_object('id', %s))).*"
            " FROM docs d WHERE id = %s AND pg_typeof(d.lo) = 'bytea'::regtype",
            (40_000 + i, 1 + i % 150),
        )

    r = _during_run(db, write, to="lo", batch_rows=5, keep_old=True)
    assert r.phase == "done"  # type: ignore[attr-defined]
    with psycopg.connect(db) as conn:
        copies, dangling, shared, wrong = conn.execute(
            "SELECT count(*) FILTER (WHERE id > 40000),"
            " count(*) FILTER (WHERE lo IS NOT NULL AND NOT EXISTS"
            "  (SELECT 1 FROM pg_largeobject_metadata m WHERE m.oid = lo)),"
            " count(*) - count(DISTINCT lo), count(*) FILTER (WHERE lo_get(lo) <> lo_bytea)"
            " FROM docs"
        ).fetchone()  # type: ignore[misc]
    assert copies > 0 and dangling == 0 and shared == 0 and wrong == 0


def _argv(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "pgblobdump", "migrate", "run", "-d", db, *args]


def _phase(db: str) -> tuple[str, int] | None:
    with psycopg.connect(db) as conn:
        if not conn.execute("SELECT to_regclass('pgblobdump.migrations')").fetchone()[0]:  # type: ignore[index]
            return None
        row = conn.execute(
            "SELECT phase, rows_done FROM pgblobdump.migrations ORDER BY id DESC LIMIT 1"
        ).fetchone()
    return (row[0], int(row[1])) if row else None


def _kill_when_filled(db: str, rows: int, *args: str) -> None:
    """Run ``migrate run`` and kill -9 it once it has filled ``rows`` rows; fail, saying
    so, when it ends first (one connection polls, so a loaded machine does not make the
    poll slower than the run)."""
    with (
        subprocess.Popen(
            _argv(db, *args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,
        ) as proc,
        psycopg.connect(db, autocommit=True) as conn,
    ):  # fmt: skip
        deadline = time.monotonic() + 60
        state = "SELECT to_regclass('pgblobdump.migrations') IS NOT NULL"
        last = "SELECT phase, rows_done FROM pgblobdump.migrations ORDER BY id DESC LIMIT 1"
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                row = None
                if conn.execute(state).fetchone()[0]:  # type: ignore[index]
                    row = conn.execute(last).fetchone()
                if row is not None and row[0] == "filling" and int(row[1]) >= rows:
                    break
                time.sleep(0.01)
            else:
                err = proc.stderr.read().decode() if proc.stderr else ""  # type: ignore[union-attr]
                pytest.fail(f"the run ended (or never filled {rows} rows) before the kill: {err}")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("to", ["bytea", "lo"])
def test_kill_9_mid_fill_leaves_the_old_column_and_a_rerun_finishes(
    pg17: EmbeddedCluster, new_db: NewDb, to: str
) -> None:
    db = new_db(pg17)
    generated(db, n=400)
    if to == "lo":
        go(db)  # start from bytea
    before = contents(db)
    los = lo_count(db)
    _kill_when_filled(db, 30, "docs.lo", "--to", to, "--batch-rows", "3")
    p = _phase(db)
    assert p is not None and p[0] == "filling", p
    assert contents(db) == before  # the old column is intact
    assert columns_of(db)["lo"][0] == ("oid" if to == "bytea" else "bytea")
    done = subprocess.run(_argv(db, "docs.lo", "--to", to, "--json"), capture_output=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"resuming run" in done.stderr
    assert contents(db) == before
    assert columns_of(db)["lo"][0] == ("bytea" if to == "bytea" else "oid")
    if to == "lo":
        assert lo_count(db) == los + 400  # no LO of the killed batch leaked


def test_abort_before_the_switch_gives_the_table_back(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    generated(db, n=200)
    go(db)
    before, los = contents(db), lo_count(db)
    _kill_when_filled(db, 20, "docs.lo", "--to", "lo", "--batch-rows", "2")
    assert lo_count(db) > los  # the killed run had created some
    # Another session may neither drive nor abort a run that one is driving: here the
    # holder is a session that claims the run as a driver does.
    with psycopg.connect(db, autocommit=True) as holder:
        mig = mstate.active(holder, "pgblobdump", split_relid(holder, "docs"), "lo")
        assert mig is not None
        mstate.claim(holder, mig.id)
        with psycopg.connect(db, autocommit=True) as conn:
            with pytest.raises(DatabaseError, match="going on in another session"):
                run(conn, "docs.lo", RunOptions(to="lo"))
            with pytest.raises(DatabaseError, match="going on in another session"):
                abort(conn, "docs.lo", "pgblobdump", LockPolicy())
    with psycopg.connect(db, autocommit=True) as conn:
        mig = abort(conn, "docs.lo", "pgblobdump", LockPolicy())
    assert mig.phase == "aborted"
    assert contents(db) == before and lo_count(db) == los
    assert set(columns_of(db)) == {"id", "lo", "size", "name"}
    with psycopg.connect(db) as conn:
        assert not conn.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'docs'::regclass"
                                " AND NOT tgisinternal").fetchone()[0]  # type: ignore[index]  # fmt: skip


def split_relid(conn: psycopg.Connection, table: str) -> int:
    return int(conn.execute("SELECT %s::regclass::oid", (table,)).fetchone()[0])  # type: ignore[index]


@pytest.mark.parametrize("major", [16, 18])
def test_both_ways_on_16_and_18(major: int, request: pytest.FixtureRequest, new_db: NewDb) -> None:
    db = new_db(request.getfixturevalue(f"pg{major}"))
    generated(db, n=50)
    before = contents(db)
    r = go(db, unlink=True)
    assert r.phase == "done" and contents(db) == before  # type: ignore[attr-defined]
    assert lo_count(db) == 0
    go(db, to="lo")
    assert contents(db) == before and lo_count(db) == 50


@pytest.mark.parametrize("probe", ["per row", "whole index"])
def test_an_lo_over_1gb_is_refused_and_named(
    pg17: EmbeddedCluster, new_db: NewDb, probe: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pgblobdump.migrate import refs

    monkeypatch.setattr(refs, "PROBE_SECONDS", 0.0 if probe == "per row" else 1.0)
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE big (id int PRIMARY KEY, b oid)")
        small = conn.execute("SELECT lo_from_bytea(0, 'small')").fetchone()[0]  # type: ignore[index]
        # A sparse LO: one page at 1.1 GB, so it is over the bytea limit yet cheap to make.
        huge = conn.execute("SELECT lo_create(0)").fetchone()[0]  # type: ignore[index]
        conn.execute("SELECT lo_put(%s, 1100000000, 'x')", (huge,))
        conn.execute("INSERT INTO big VALUES (1, %s), (2, %s)", (small, huge))
        conn.execute("ANALYZE big")
        with pytest.raises(UsageError, match=f"over 1 GB.*{huge}"):
            run(conn, "big.b", RunOptions())
        p = plan(conn, "test")
    st = next(c for c in p.columns if c.column == "public.big.b").stats
    assert st is not None and st.over_1gb == (int(huge),) and st.largest == 1_100_000_001
    assert columns_of(db, "big")["b"][0] == "oid"


def test_plan_measure_advises_from_the_server(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    generated(db, n=30)  # text: compresses
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE bin (id int PRIMARY KEY, b oid)")
        conn.execute("INSERT INTO bin SELECT g, lo_from_bytea(0, decode(string_agg(md5(g::text"
                     " || r::text), ''), 'hex')) FROM generate_series(1, 20) g,"
                     " generate_series(1, 300) r GROUP BY g")  # fmt: skip
        p = plan(conn, "test", measure=True)
    by = {c.column: c.storage for c in p.columns if c.storage}
    docs, binary = by["public.docs.lo"], by["public.bin.b"]
    assert docs.storage == "EXTENDED" and docs.reason.startswith("measured")
    assert binary.storage == "EXTERNAL" and "saves under a quarter" in binary.reason
