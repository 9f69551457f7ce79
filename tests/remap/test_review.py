"""A hostile review of ``restore --remap`` (issue 39), on a real server: what the target's
other roles and tables can make a remapped restore do. Each test failed before its fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgblobdump.remap.store import SCHEMA
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import state
from tests.remap.test_remap_resume import WAITING, _hold, _kill, _start, _wait_for

FIRST = 410_000
COUNT = 10


def _archive(pg17: EmbeddedCluster, new_db: NewDb, path: Path) -> Path:
    """An archive of COUNT LOs at FIRST.. (bytes ``B<g>``)."""
    src = new_db(pg17)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute(f"SELECT lo_from_bytea({FIRST} + g, convert_to('B' || g, 'UTF8'))"
                     f" FROM generate_series(0, {COUNT - 1}) g")  # fmt: skip
    assert run("dump", "-d", src, "-o", str(path)).exit_code == 0
    return path


def _target(pg17: EmbeddedCluster, new_db: NewDb) -> str:
    """A database whose LOs (another tenant's, bytes ``A<g>``) have the archive's OIDs,
    and a table of the archive's rows, loaded before the restore (naming the old OIDs)."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"SELECT lo_from_bytea({FIRST} + g, convert_to('A' || g, 'UTF8'))"
                     f" FROM generate_series(0, {COUNT - 1}) g")  # fmt: skip
        conn.execute(
            "CREATE TABLE b_docs (id int PRIMARY KEY, lo oid);"
            f" INSERT INTO b_docs SELECT g, {FIRST} + g FROM generate_series(0, {COUNT - 1}) g"
        )
    return db


def _nothing_written(
    db: str, before: dict[int, tuple[bytes, str, list[str] | None, str | None]]
) -> None:
    assert state(db) == before
    with psycopg.connect(db) as conn:
        schema = conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (SCHEMA,)).fetchone()
        rows = conn.execute("SELECT lo::int8 FROM b_docs ORDER BY id").fetchall()
    assert schema == (False,)
    assert [r[0] for r in rows] == list(range(FIRST, FIRST + COUNT))


@pytest.mark.parametrize("where", ["table", "partition", "moved"])
def test_a_trigger_on_the_rewritten_table_is_refused(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, where: str
) -> None:
    """A trigger that fires on the rewrite's UPDATE runs as the restoring role and sees
    each row's old OID, which in the target is another tenant's LO: lo_manage-style, it
    unlinks it. Was: the rewrite ran, and tenant A's LOs were gone. Now refused before
    anything is written, naming the trigger (also one on a partition of the table)."""
    archive = _archive(pg17, new_db, tmp_path / "b")
    target = _target(pg17, new_db)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION unlink_old() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF TG_OP = 'DELETE' THEN PERFORM lo_unlink(OLD.lo); RETURN OLD; END IF;"
            " IF OLD.lo IS DISTINCT FROM NEW.lo THEN PERFORM lo_unlink(OLD.lo); END IF;"
            " RETURN NEW; END $$"
        )
        if where == "moved":  # partitioned by the column: the rewrite moves each row
            conn.execute(  # from b_docs_1 to b_docs_2, firing b_docs_1's DELETE triggers
                "ALTER TABLE b_docs RENAME TO b_old;"
                " CREATE TABLE b_docs (id int, lo oid) PARTITION BY RANGE (lo);"
                " CREATE TABLE b_docs_1 PARTITION OF b_docs"
                f" FOR VALUES FROM (0) TO ({FIRST + COUNT});"
                " CREATE TABLE b_docs_2 PARTITION OF b_docs"
                f" FOR VALUES FROM ({FIRST + COUNT}) TO (MAXVALUE);"
                " INSERT INTO b_docs SELECT * FROM b_old; DROP TABLE b_old;"
                " CREATE TRIGGER manage BEFORE DELETE ON b_docs_1 FOR EACH ROW"
                " EXECUTE FUNCTION unlink_old()"
            )
        elif where == "table":
            conn.execute("CREATE TRIGGER manage BEFORE UPDATE ON b_docs FOR EACH ROW"
                         " EXECUTE FUNCTION unlink_old()")  # fmt: skip
        else:
            conn.execute(
                "ALTER TABLE b_docs RENAME TO b_old;"
                " CREATE TABLE b_docs (id int, lo oid) PARTITION BY RANGE (id);"
                " CREATE TABLE b_docs_1 PARTITION OF b_docs FOR VALUES FROM (0) TO (1000);"
                " INSERT INTO b_docs SELECT * FROM b_old; DROP TABLE b_old;"
                " CREATE TRIGGER manage BEFORE UPDATE ON b_docs_1 FOR EACH ROW"
                " EXECUTE FUNCTION unlink_old()"
            )
    before = state(target)
    result = run("restore", str(archive), "-d", target, "--remap", "--referenced-by", "b_docs.lo")
    assert_one_line_error(result, 4, "trigger manage")
    _nothing_written(target, before)
    # as the message says: the trigger disabled for the restore, the rows rewritten
    on = "b_docs" if where == "table" else "b_docs_1"
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {on} DISABLE TRIGGER manage")
    again = run("restore", str(archive), "-d", target, "--remap", "--referenced-by", "b_docs.lo")
    assert again.exit_code == 0, again.stderr
    now = state(target)
    assert {o: now[o][0] for o in before} == {o: before[o][0] for o in before}
    with psycopg.connect(target) as conn:
        got = conn.execute("SELECT id, lo_get(lo) FROM b_docs ORDER BY id").fetchall()
    assert got == [(g, f"B{g}".encode()) for g in range(COUNT)]


@pytest.fixture
def mallory(pg17: EmbeddedCluster) -> Iterator[str]:
    """A role that may create schemas in the databases of the test, nothing more."""
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS remap_mallory; CREATE ROLE remap_mallory LOGIN")
    yield "remap_mallory"
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS remap_mallory")


def test_a_state_schema_another_role_made_is_refused(
    pg17: EmbeddedCluster, mallory: str, new_db: NewDb, tmp_path: Path
) -> None:
    """Another role makes schema pgblobdump_remap first, its tables with a trigger calling
    its own function: a superuser's restore --remap inserts into them and runs that
    function as the superuser. Was: it did (the role made itself a superuser). Now
    refused before anything is written, as sync's and migrate's state schemas are."""
    archive = _archive(pg17, new_db, tmp_path / "b")
    target = _target(pg17, new_db)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(f"GRANT CREATE ON DATABASE {conn.info.dbname} TO {mallory}")
    sneaky = psycopg.conninfo.make_conninfo(target, user=mallory)
    with psycopg.connect(sneaky, autocommit=True) as conn:
        conn.execute(
            f"CREATE SCHEMA {SCHEMA};"
            f" CREATE TABLE {SCHEMA}.runs (run text PRIMARY KEY, archive text NOT NULL,"
            "  source text NOT NULL, mode text NOT NULL, plan jsonb NOT NULL,"
            "  phase text NOT NULL DEFAULT 'los', started timestamptz NOT NULL DEFAULT now(),"
            "  finished timestamptz);"
            f" CREATE TABLE {SCHEMA}.map (run text NOT NULL, old oid NOT NULL, new oid NOT NULL,"
            "  PRIMARY KEY (run, old));"
            f" CREATE TABLE {SCHEMA}.rewrites (run text NOT NULL, relid oid NOT NULL,"
            "  col name NOT NULL, qualified text NOT NULL, rows int8 NOT NULL,"
            "  dangling int8 NOT NULL, examples int8[] NOT NULL,"
            "  done timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (run, relid, col));"
            f" CREATE FUNCTION {SCHEMA}.promote() RETURNS trigger LANGUAGE plpgsql AS $$"
            f" BEGIN EXECUTE 'ALTER ROLE {mallory} SUPERUSER'; RETURN NULL;"
            " EXCEPTION WHEN OTHERS THEN RETURN NULL; END $$;"
            f" CREATE TRIGGER promote AFTER INSERT ON {SCHEMA}.runs"
            f" FOR EACH STATEMENT EXECUTE FUNCTION {SCHEMA}.promote()"
        )
    before = state(target)
    result = run("restore", str(archive), "-d", target, "--remap", "all")
    with psycopg.connect(target) as conn:
        superuser = conn.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = %s", (mallory,)
        ).fetchone()
    assert superuser == (False,)
    assert_one_line_error(result, 4, SCHEMA)
    assert state(target) == before


def test_a_failure_after_the_los_names_the_run_left(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """A rewrite that fails (the new OIDs break a CHECK) leaves the run's LOs, with
    their mapping, and the run: a remainder that --resume finishes. Was: the error named
    only the CHECK, and nothing left behind. Now it names the run, what it left and
    --resume; resumed (the CHECK dropped), the rows are rewritten, each LO once."""
    archive = _archive(pg17, new_db, tmp_path / "b")
    target = _target(pg17, new_db)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE b_docs ADD CONSTRAINT small CHECK (lo < {FIRST + COUNT})")
    args = ["restore", str(archive), "-d", target, "--remap", "--referenced-by", "b_docs.lo"]
    result = run(*args)
    error = result.stderr.strip().splitlines()[-1]
    assert result.exit_code == 4 and error.startswith("Error: ") and "small" in error
    with psycopg.connect(target, autocommit=True) as conn:
        left = conn.execute(f"SELECT run FROM {SCHEMA}.runs WHERE finished IS NULL").fetchall()
        mapped = conn.execute(f"SELECT count(*) FROM {SCHEMA}.map").fetchone()
        conn.execute("ALTER TABLE b_docs DROP CONSTRAINT small")
    assert len(left) == 1 and mapped == (COUNT,)
    assert f"run {left[0][0]} is left in the target with {COUNT} LOs" in error
    assert "--resume" in error
    again = run(*args, "--resume")
    assert again.exit_code == 0, again.stderr
    with psycopg.connect(target) as conn:
        got = conn.execute("SELECT id, lo_get(lo) FROM b_docs ORDER BY id").fetchall()
        n = conn.execute(f"SELECT count(*) FROM {SCHEMA}.map").fetchone()
    assert got == [(g, f"B{g}".encode()) for g in range(COUNT)]
    assert n == (COUNT,) and len(state(target)) == 2 * COUNT


def test_a_bad_map_out_is_refused_before_anything_is_written(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """--map-out is written once the run is finished. Was: a file that cannot be written
    (no such folder) failed the command after every LO was restored and every row
    rewritten (run again, it restores a second copy), and one inside the archive was
    written into it. Now both are refused before anything is written."""
    archive = _archive(pg17, new_db, tmp_path / "b")
    target = _target(pg17, new_db)
    before = state(target)
    args = ["restore", str(archive), "-d", target, "--remap", "--referenced-by", "b_docs.lo"]
    assert_one_line_error(run(*args, "--map-out", str(tmp_path / "no" / "map.csv")), 11, "no")
    _nothing_written(target, before)
    assert_one_line_error(run(*args, "--map-out", str(archive / "map.csv")), 2, "the input")
    assert_one_line_error(run(*args, "--map-out", "-"), 2, "give a file")
    _nothing_written(target, before)
    assert not (archive / "map.csv").exists()


def test_a_resume_naming_other_columns_is_refused(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """The columns a run rewrites are chosen when it starts. Was: --resume rewrote the
    columns it was given, not the first run's: another column's rows rewritten that the
    first run never meant to touch, or one of the first run's left out and the run
    finished. Now a resume naming other columns is refused, nothing written."""
    archive = _archive(pg17, new_db, tmp_path / "b")
    target = _target(pg17, new_db)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE b_docs ADD CONSTRAINT small CHECK (lo < {FIRST + COUNT})")
        conn.execute("CREATE TABLE c_docs AS SELECT * FROM b_docs")
    args = ["restore", str(archive), "-d", target, "--remap"]
    assert run(*args, "--referenced-by", "b_docs.lo").exit_code == 4  # the run is left
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("ALTER TABLE b_docs DROP CONSTRAINT small")
    before = state(target)
    for cols in (["b_docs.lo", "c_docs.lo"], [], ["c_docs.lo"]):
        named = [a for c in cols for a in ("--referenced-by", c)]
        assert_one_line_error(run(*args, *named, "--resume"), 2, "public.b_docs.lo")
    assert state(target) == before
    with psycopg.connect(target) as conn:
        rows = conn.execute("SELECT lo::int8 FROM b_docs UNION ALL SELECT lo::int8 FROM c_docs")
        assert sorted(r[0] for r in rows) == sorted(list(range(FIRST, FIRST + COUNT)) * 2)
    again = run(*args, "--referenced-by", "b_docs.lo", "--resume")
    assert again.exit_code == 0, again.stderr
    with psycopg.connect(target) as conn:
        got = conn.execute("SELECT id, lo_get(lo) FROM b_docs ORDER BY id").fetchall()
        theirs = conn.execute("SELECT id, lo_get(lo) FROM c_docs ORDER BY id").fetchall()
    assert got == [(g, f"B{g}".encode()) for g in range(COUNT)]
    assert theirs == [(g, f"A{g}".encode()) for g in range(COUNT)]


def test_a_numeric_column_too_narrow_is_refused_first(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """A numeric(p, s) column holds numbers of at most p - s digits. Was: the new OIDs'
    overflow met only in the UPDATE, after every LO was written. Now refused before
    anything is written, as a smallint or a short varchar is."""
    archive = _archive(pg17, new_db, tmp_path / "b")
    target = _target(pg17, new_db)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("ALTER TABLE b_docs ALTER lo TYPE numeric(8, 2) USING lo::text::numeric")
    before = state(target)
    result = run("restore", str(archive), "-d", target, "--remap", "--oid-range",
                 "1000000-1000099", "--referenced-by", "b_docs.lo")  # fmt: skip
    assert_one_line_error(result, 2, "numeric(8,2)")
    assert state(target) == before
    with psycopg.connect(target) as conn:
        schema = conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (SCHEMA,)).fetchone()
    assert schema == (False,)
    # six digits fit: the default block, just above the target's LOs
    result = run("restore", str(archive), "-d", target, "--remap", "--referenced-by", "b_docs.lo")
    assert result.exit_code == 0, result.stderr


def test_a_run_in_progress_is_not_taken_for_an_interrupted_one(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """A run still going is unfinished in ``runs`` as a killed one is. Was: a second run
    of the archive was told to add --resume, and the resume wrote the same run beside the
    live one (nothing reserved: no OID taken, none new). Now both are refused, naming
    the run in progress."""
    archive = _archive(pg17, new_db, tmp_path / "b")
    target = new_db(pg17)
    held = _hold(target, FIRST + 5)  # the run's one batch waits
    args = ["restore", str(archive), "-d", target, "--remap"]
    proc = _start(*args)
    try:
        _wait_for(target, WAITING)
        assert_one_line_error(run(*args), 4, "in progress")
        assert_one_line_error(run(*args, "--resume"), 4, "in progress")
    finally:
        _kill(proc, target)
        held.close()
    result = run(*args, "--resume")  # killed: now it is an interrupted run
    assert result.exit_code == 0, result.stderr
    assert sorted(state(target)) == list(range(FIRST, FIRST + COUNT))
