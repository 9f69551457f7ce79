"""LOs referenced the way applications really do it (docs/references.md): each schema is
modelled on what the published reports of data loss describe, and vacuum must keep every
LO its rows name, remove only the true orphans, and inspect must name the column.

A live server each; the LOs are made by the server (``lo_from_bytea``), the references
written as the application writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg
import pytest

from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.vacuum import VacuumRequest, vacuum
from tests.clirun import run
from tests.conftest import NewDb

ORPHANS = 3
"""LOs no row names, made beside each application's."""


@dataclass(frozen=True)
class App:
    name: str
    ddl: tuple[str, ...]
    insert: str
    """One row naming LO ``{o}`` (its OID as the application writes it), row ``{i}``."""
    column: str
    pattern: str


APPS = [
    # Hibernate up to 5.6.1: @Lob String -> text; pgjdbc's setClob writes the OID's digits.
    App("jbpm", ("CREATE TABLE task_comment (id bigint PRIMARY KEY, text text)",
                 "CREATE TABLE email_header (id bigint PRIMARY KEY, body text)"),
        "INSERT INTO task_comment VALUES ({i}, '{o}')", "public.task_comment.text", "digits"),
    # Spring Cloud Data Flow: old rows inline text, new rows LO OIDs, in one text column.
    App("scdf", ("CREATE TABLE task_execution_params (id bigint PRIMARY KEY,"
                 " task_param text)",),
        "INSERT INTO task_execution_params VALUES ({i}, CASE WHEN {i} % 2 = 0 THEN '{o}'"
        " ELSE '--spring.profiles.active=' || {i} END)",
        "public.task_execution_params.task_param", "digits"),
    # Odoo's attachment_large_object: ir_attachment.store_fname, varchar, str(oid).
    App("odoo", ("CREATE TABLE ir_attachment (id serial PRIMARY KEY,"
                 " store_fname character varying)",),
        "INSERT INTO ir_attachment (store_fname) VALUES ('{o}')",
        "public.ir_attachment.store_fname", "digits"),
    # pg-lo-storage (Django): a FileField value '<oid>.<ext>'.
    App("django", ("CREATE TABLE docs_document (id serial PRIMARY KEY,"
                   " file character varying(100))",),
        "INSERT INTO docs_document (file) VALUES ('{o}.pdf')",
        "public.docs_document.file", "file name"),
    # cms-dev/cms and refile-postgres: an integer column; an OID of 2^31 or more is stored
    # as oid::int4 makes it, negative.
    App("cms", ("CREATE TABLE fsobjects (id serial PRIMARY KEY, loid integer NOT NULL)",),
        "INSERT INTO fsobjects (loid) VALUES ('{o}'::oid::int4)", "public.fsobjects.loid",
        "integer"),
    # A bigint column and an array of text OIDs (a JSON-ish application's list).
    App("arrays", ("CREATE TABLE bundle (id serial PRIMARY KEY, parts text[], big int8)",),
        "INSERT INTO bundle (parts, big) VALUES (ARRAY['{o}', 'note'], NULL)",
        "public.bundle.parts", "integer"),
]  # fmt: skip


def _make(db: str, app: App, n: int, big: bool = False) -> set[int]:
    """The application's tables with ``n`` rows naming ``n`` LOs (from OID 3000000000 on
    when ``big``), and ORPHANS LOs nothing names; returns the referenced OIDs."""
    with psycopg.connect(db, autocommit=True) as conn:
        for stmt in app.ddl:
            conn.execute(stmt)
        named = set()
        for i in range(1, n + 1):
            want = 3_000_000_000 + i if big else 0
            oid = int(conn.execute("SELECT lo_from_bytea(%s, 'x')", (want,)).fetchone()[0])  # type: ignore[index]
            conn.execute(app.insert.format(i=i, o=oid))
            if app.name != "scdf" or i % 2 == 0:
                named.add(oid)
            else:
                conn.execute("SELECT lo_unlink(%s)", (oid,))  # an inline row names none
        conn.execute("SELECT lo_from_bytea(0, 'orphan') FROM generate_series(1, %s)", (ORPHANS,))
    return named


def _los(db: str) -> set[int]:
    with psycopg.connect(db) as conn:
        return {int(r[0]) for r in conn.execute("SELECT oid FROM pg_largeobject_metadata")}


@pytest.mark.parametrize("app", APPS, ids=[a.name for a in APPS])
def test_vacuum_keeps_every_lo_an_application_names(
    pg17: EmbeddedCluster, new_db: NewDb, app: App
) -> None:
    db = new_db(pg17)
    named = _make(db, app, 40, big=app.name == "cms")
    r = run("inspect", "-d", db, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    found = {s["column"]: s for s in doc["suspects"]}
    assert app.column in found, doc["suspects"]
    s = found[app.column]
    assert s["live"] == len(named) and s["dangling"] == 0
    if app.name != "arrays":
        assert s["pattern"] == app.pattern
    assert doc["kept_only_by_suspects"] == len(named)  # what vacuumlo would delete
    result = vacuum(db, VacuumRequest(min_age=0))
    assert _los(db) == named
    assert result.removed == ORPHANS and result.kept_only_by_suspects == len(named)


def test_one_oid_among_many_rows_is_found_before_removal(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Statistics and a sample miss one OID among 100,000 rows; the check against every
    candidate column before removing does not."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
        conn.execute("INSERT INTO notes SELECT g, 'plain text ' || g FROM"
                     " generate_series(1, 100000) g")  # fmt: skip
        conn.execute("ANALYZE notes")
        one = int(conn.execute("SELECT lo_from_bytea(0, 'keep')").fetchone()[0])  # type: ignore[index]
        conn.execute("UPDATE notes SET body = %s WHERE id = 77777", (str(one),))
        gone = int(conn.execute("SELECT lo_from_bytea(0, 'orphan')").fetchone()[0])  # type: ignore[index]
    result = vacuum(db, VacuumRequest(min_age=0, not_references=(("notes", "id"),)))
    assert _los(db) == {one}
    assert result.removed == 1 and result.kept_by_candidates == 1
    assert result.candidate_check is not None
    assert result.candidate_check["kept"] == {"public.notes.body": 1}
    assert gone not in _los(db)


def test_a_number_column_that_only_happens_to_equal_oids_is_low_confidence_and_kept(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        first = int(conn.execute("SELECT lo_from_bytea(0, 'a')").fetchone()[0])  # type: ignore[index]
        conn.execute("SELECT lo_from_bytea(0, 'b')")
        conn.execute("CREATE TABLE amounts (id serial PRIMARY KEY, cents numeric)")
        conn.execute("INSERT INTO amounts (cents) SELECT g FROM"
                     " generate_series(%s - 40, %s + 40) g", (first, first))  # fmt: skip
    r = run("inspect", "-d", db, "--json")
    s = {x["column"]: x for x in json.loads(r.stdout)["suspects"]}["public.amounts.cents"]
    assert s["confidence"] == "low" and s["live"] == 2
    vacuum(db, VacuumRequest(min_age=0, not_references=(("amounts", "id"),)))
    assert len(_los(db)) == 2  # kept unless dismissed
    vacuum(db, VacuumRequest(min_age=0, not_references=(("amounts", "id"),
                                                        ("amounts", "cents"))))  # fmt: skip
    assert _los(db) == set()


def test_an_oid_looking_value_naming_no_lo_is_dangling(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        live = int(conn.execute("SELECT lo_from_bytea(0, 'a')").fetchone()[0])  # type: ignore[index]
        conn.execute("CREATE TABLE clob (id int PRIMARY KEY, text text)")
        conn.execute("INSERT INTO clob VALUES (1, %s), (2, '4000000000'), (3, 'hello')",
                     (str(live),))  # fmt: skip
    r = run("inspect", "-d", db, "--json")
    s = {x["column"]: x for x in json.loads(r.stdout)["suspects"]}["public.clob.text"]
    assert (s["values"], s["live"], s["dangling"]) == (3, 1, 1)


def test_a_text_column_the_role_cannot_read_is_refused_until_dismissed(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A text column the vacuuming role may not read may hold OIDs: refused, named, nothing
    removed; row-level security the same; dismissed after review, the run goes."""
    from pgblobdump.errors import UnsafeToRemove
    from tests.vacuum.test_safety import ROLE, as_role, roles

    db = new_db(pg17)
    roles(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE secret (id int GENERATED ALWAYS AS IDENTITY, body text)")
        conn.execute("CREATE TABLE shown (id int GENERATED ALWAYS AS IDENTITY, body text)")
        conn.execute("ALTER TABLE shown ENABLE ROW LEVEL SECURITY")
        conn.execute(f"GRANT SELECT, UPDATE ON shown TO {ROLE}")
        oid = int(conn.execute("SELECT lo_from_bytea(0, 'x')").fetchone()[0])  # type: ignore[index]
        conn.execute(f"ALTER LARGE OBJECT {oid} OWNER TO {ROLE}")
    who = as_role(db, ROLE)
    with pytest.raises(UnsafeToRemove, match=r"public\.secret\.body \(the role may not read"):
        vacuum(who, VacuumRequest(min_age=0))
    with pytest.raises(UnsafeToRemove, match=r"public\.shown\.body \(row-level security"):
        vacuum(who, VacuumRequest(min_age=0, not_references=(("secret", "body"),)))
    assert _los(db) == {oid}
    every = tuple((t, c) for t in ("secret", "shown") for c in ("id", "body"))
    vacuum(who, VacuumRequest(min_age=0, not_references=every))
    assert _los(db) == set()
