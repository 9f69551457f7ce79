"""What a second review of the reference model found, each a reproduction on a live
server: LOs a column still named were removed, or a run stopped on an odd name."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.migrate import RunOptions, run
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.vacuum import VacuumRequest, vacuum
from tests.conftest import NewDb

NOW = VacuumRequest(min_age=0)


def _los(db: str) -> set[int]:
    with psycopg.connect(db) as conn:
        return {int(r[0]) for r in conn.execute("SELECT oid FROM pg_largeobject_metadata")}


def _lo(conn: psycopg.Connection, data: str = "x") -> int:
    return int(conn.execute("SELECT lo_from_bytea(0, %s)", (data,)).fetchone()[0])  # type: ignore[index]


def test_a_serial_key_holding_oids_keeps_them(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """refile-postgres before 1.3.0: Rails' serial ``id`` is the OID itself."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE refile_attachments (id serial PRIMARY KEY,"
                     " namespace varchar NOT NULL)")  # fmt: skip
        files = {_lo(conn, "one"), _lo(conn, "two")}
        for o in files:
            conn.execute("INSERT INTO refile_attachments VALUES (%s, 'store')", (o,))
        _lo(conn, "orphan")
        conn.execute("ANALYZE")
    vacuum(db, NOW)
    assert _los(db) == files


def test_file_names_with_any_suffixes_keep_their_los(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """pg-lo-storage keeps every suffix of the original name."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs_document (id serial PRIMARY KEY, file varchar(100))")
        named = set()
        for ext in (".tar.gz", ".min.js", ".backup-2024", ".jpg_large", ".2024.01.jpg"):
            o = _lo(conn)
            named.add(o)
            conn.execute("INSERT INTO docs_document (file) VALUES (%s)", (f"{o}{ext}",))
        _lo(conn, "orphan")
    vacuum(db, VacuumRequest(min_age=0, not_references=(("docs_document", "id"),)))
    assert _los(db) == named


def test_a_foreign_key_not_validated_or_bypassed_still_counts(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE attachment (k text PRIMARY KEY)")
        conn.execute("CREATE TABLE task_comment (id int GENERATED ALWAYS AS IDENTITY, body text)")
        o = _lo(conn)
        conn.execute("INSERT INTO task_comment (body) VALUES (%s)", (str(o),))
        conn.execute("ALTER TABLE task_comment ADD CONSTRAINT fk FOREIGN KEY (body)"
                     " REFERENCES attachment (k) NOT VALID")  # fmt: skip
        _lo(conn, "orphan")
    vacuum(db, NOW)
    assert _los(db) == {o}


def test_names_with_a_dot_or_a_percent(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "Sch ema"')
        conn.execute('CREATE TABLE "app.files" (id int GENERATED ALWAYS AS IDENTITY,'
                     " store_fname varchar)")  # fmt: skip
        conn.execute('CREATE TABLE "Sch ema"."50% off" (id int GENERATED ALWAYS AS IDENTITY,'
                     " code text, blob bytea)")  # fmt: skip
        a, b = _lo(conn), _lo(conn)
        conn.execute('INSERT INTO "app.files" (store_fname) VALUES (%s)', (str(a),))
        conn.execute('INSERT INTO "Sch ema"."50%% off" (code) VALUES (%s)', (str(b),))
        _lo(conn, "orphan")
    vacuum(db, NOW)
    assert _los(db) == {a, b}
    r = vacuum(db, VacuumRequest(min_age=0, dry_run=True,
                                 not_references=(('"app.files"', "store_fname"),)))  # fmt: skip
    assert r.removable == 1


def test_char_columns_are_screened_by_their_statistics(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (c char(12))")
        o = _lo(conn)
        conn.execute("INSERT INTO a SELECT %s FROM generate_series(1, 50)", (str(o),))
        conn.execute("ANALYZE a")
    r = vacuum(db, VacuumRequest(min_age=0, dry_run=True))
    assert [s["column"] for s in r.suspects] == ["public.a.c"]
    assert r.suspects[0]["screened"] == "statistics"


def test_migrate_unlink_keeps_what_typed_columns_of_every_kind_name(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """migrate --unlink read oid columns only: an oid[], a composite, a range over oid, a
    materialized view or another session's temporary table naming the LO lost it."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE clob (id int PRIMARY KEY, body text)")
        los = [_lo(conn, f"text {i}") for i in range(6)]
        for i, o in enumerate(los):
            conn.execute("INSERT INTO clob VALUES (%s, %s)", (i, str(o)))
        conn.execute("CREATE TYPE att AS (name text, lo oid)")
        conn.execute("CREATE TYPE oidspan AS RANGE (subtype = oid)")
        conn.execute("CREATE TABLE other (a oid[], c att, r oidspan)")
        conn.execute("INSERT INTO other VALUES (ARRAY[%s::oid], ROW('n', %s)::att,"
                     " oidspan(%s, %s, '[]'))", (los[0], los[1], los[2], los[2]))  # fmt: skip
        conn.execute(f"CREATE MATERIALIZED VIEW mv AS SELECT {los[3]}::oid AS o")
    with psycopg.connect(db, autocommit=True) as other:
        other.execute("CREATE TEMP TABLE staging (lo oid)")
        other.execute("INSERT INTO staging VALUES (%s)", (los[4],))
        with (
            psycopg.connect(db, autocommit=True) as conn,
            pytest.raises(Exception, match="another session's temporary table"),
        ):
            run(conn, "clob.body", RunOptions(to="text", unlink=True))
    assert set(los) <= _los(db)  # the run switched, then refused to unlink: nothing gone
    with psycopg.connect(db, autocommit=True) as conn:
        r = run(conn, "clob.body", RunOptions(to="text", unlink=True))
    assert (r.unlinked, r.kept_referenced) == (2, 4)
    assert _los(db) == set(los[:4])


def test_migrate_unlink_with_an_application_schema_as_state_schema(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA app")
        conn.execute("CREATE TABLE app.task_comment (id int PRIMARY KEY, body text)")
        conn.execute("CREATE TABLE app.attachment (id int GENERATED ALWAYS AS IDENTITY,"
                     " store_fname varchar)")  # fmt: skip
        o = _lo(conn)
        conn.execute("INSERT INTO app.task_comment VALUES (1, %s)", (str(o),))
        conn.execute("INSERT INTO app.attachment (store_fname) VALUES (%s)", (f"{o}.pdf",))
        r = run(conn, "app.task_comment.body", RunOptions(to="text", unlink=True, schema="app"))
    assert (r.unlinked, r.kept_referenced) == (0, 1)
    assert _los(db) == {o}
