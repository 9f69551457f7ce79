"""State schemas another role could have changed are refused before anything of ours
runs in them: a database owner's trap (a trigger that makes it superuser when a
superuser's pgblobdump writes its state) must not fire, for copy/sync, vacuum, migrate."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.pg.trust import problems
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb

ROLE = "pgbd_trap_owner"


def _trap(db: str, schema: str, table: str, columns: str) -> None:
    """As ROLE (allowed to create in the database): our state table made first, with a
    trigger that would make ROLE superuser."""
    with psycopg.connect(db, autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone():
            c.execute(f"CREATE ROLE {ROLE}")
        c.execute(f"ALTER ROLE {ROLE} NOSUPERUSER")
        c.execute(f"GRANT CREATE ON DATABASE {c.info.dbname} TO {ROLE}")
        c.execute(f"SET ROLE {ROLE}")
        c.execute(f"CREATE SCHEMA {schema}")
        c.execute(f"CREATE TABLE {schema}.{table} ({columns})")
        c.execute(
            f"CREATE FUNCTION {schema}.up() RETURNS trigger LANGUAGE plpgsql AS"
            f" $$BEGIN ALTER ROLE {ROLE} SUPERUSER; RETURN NEW; END$$"
        )
        c.execute(
            f"CREATE TRIGGER up BEFORE INSERT OR UPDATE OR DELETE ON {schema}.{table}"
            f" FOR EACH ROW EXECUTE FUNCTION {schema}.up()"
        )
        c.execute("RESET ROLE")


def _superuser(db: str) -> bool:
    with psycopg.connect(db) as c:
        row = c.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone()
        return bool(row and row[0])


def test_copy_refuses_a_state_schema_another_role_made(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    src, dst = new_db(pg17), new_db(pg17)
    with psycopg.connect(src, autocommit=True) as c:
        c.execute("SELECT lo_from_bytea(1, 'x')")
    _trap(dst, "pgblobdump_sync", "marks", "selection text, mark text")
    for cmd in ("copy", "sync"):
        r = run(cmd, "-d", src, "--target-dbname", dst)
        assert_one_line_error(r, 4, "schema pgblobdump_sync, which another role")
        assert f"belongs to {ROLE}" in r.stderr
    assert not _superuser(dst)
    with psycopg.connect(dst) as c:
        assert c.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)


def test_vacuum_refuses_a_state_schema_another_role_made(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("SELECT lo_create(1)")
    _trap(db, "pgblobdump", "vacuum_horizons",
          "taken_at timestamptz, horizon xid8, system_identifier int8, database oid")  # fmt: skip
    r = run("vacuum", "-d", db)
    assert_one_line_error(r, 4, "schema pgblobdump, which another role")
    assert not _superuser(db)
    with psycopg.connect(db) as c:
        assert c.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (1,)


def test_migrate_refuses_a_state_schema_another_role_made(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("CREATE TABLE files (id int PRIMARY KEY, data oid)")
        c.execute("INSERT INTO files VALUES (1, lo_from_bytea(0, 'x'))")
    _trap(db, "pgblobdump", "migrations", "id bigserial")
    for args in (("run", "files.data"), ("status",)):
        r = run("migrate", args[0], "-d", db, *args[1:])
        assert_one_line_error(r, 4, "schema pgblobdump, which another role")
    assert not _superuser(db)


@pytest.mark.parametrize(
    ("setup", "found"),
    [
        ("", []),  # ours, made by this (super)user: nothing to say
        ("GRANT INSERT ON s.t TO PUBLIC", ["t: PUBLIC has INSERT"]),
        (f"GRANT CREATE ON SCHEMA s TO {ROLE}", [f"{ROLE} may create objects in it"]),
        ("CREATE RULE r AS ON INSERT TO s.t DO ALSO NOTIFY x", ["t has rule r"]),
        ("CREATE POLICY p ON s.t USING (true)", ["t has policy p"]),
    ],
)
def test_problems_name_each_way_in(
    pg17: EmbeddedCluster, new_db: NewDb, setup: str, found: list[str]
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone():
            c.execute(f"CREATE ROLE {ROLE}")
        assert problems(c, "s") == []  # no schema yet
        c.execute("CREATE SCHEMA s")
        c.execute("CREATE TABLE s.t (x int)")
        if setup:
            c.execute(setup)
        assert problems(c, "s") == found
