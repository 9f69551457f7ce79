"""Who reaches a column beyond its own grants, and whose lo_compat_privileges counts:
the widening cases of the third reliability pass, each reproduced on a real server.

- a table with row-level security moved to LOs (an LO's ACL cannot hold a row policy);
- a SECURITY DEFINER function or a view handing the column out, moved to bytea;
- ``lo_compat_privileges`` on for the migrating role only.
"""

from __future__ import annotations

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.conninfo import make_conninfo

from pgblobdump.cli import cli
from pgblobdump.errors import DatabaseError
from pgblobdump.migrate import ColumnPlan, RunOptions, plan, run
from pgblobdump.migrate.reach.paths import Routine, reaching
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb
from tests.migrate.test_access import as_role, col_type

A, B, MIG = "pgbd_reach_a", "pgbd_reach_b", "pgbd_reach_mig"
"""Two readers, and a migrating role that owns the tables (not a superuser)."""


def _roles(conn: psycopg.Connection) -> None:
    for role in (A, B, MIG):
        conn.execute(f"DO $$ BEGIN CREATE ROLE {role} LOGIN; EXCEPTION WHEN duplicate_object"
                     " THEN NULL; END $$")  # fmt: skip


def _docs_plan(conn: psycopg.Connection) -> ColumnPlan:
    """``migrate plan``'s column public.docs.doc."""
    return next(c for c in plan(conn, "test").columns if c.column == "public.docs.doc")


def _go(db: str, spec: str, **opts: object) -> object:
    with psycopg.connect(db, autocommit=True) as conn:
        return run(conn, spec, RunOptions(**opts))  # type: ignore[arg-type]


# -- 1. row-level security, --to lo ---------------------------------------------------


def _rls_table(db: str) -> None:
    """docs(id, who, doc bytea) under a policy: each of A and B sees only its own row."""
    with psycopg.connect(db, autocommit=True) as conn:
        _roles(conn)
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, who text, doc bytea)")
        conn.execute(
            f"INSERT INTO docs VALUES (1, '{A}', 'secret of a'), (2, '{B}', 'secret of b')"
        )
        conn.execute("ALTER TABLE docs ENABLE ROW LEVEL SECURITY")
        conn.execute("CREATE POLICY mine ON docs USING (who = current_user)")
        conn.execute(f"GRANT SELECT ON docs TO {A}, {B}")


def test_to_lo_refuses_a_table_with_row_level_security(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """The reproduction: after the run each reader read the other's secret with lo_get."""
    db = new_db(pg17)
    _rls_table(db)
    with as_role(db, A) as a:  # before: A sees its own row only
        assert a.execute("SELECT doc FROM docs").fetchall() == [(b"secret of a",)]
    with pytest.raises(DatabaseError) as caught:
        _go(db, "docs.doc", to="lo")
    message = str(caught.value)
    assert "row-level security" in message and "--allow-acl-widening" in message
    assert A in message and B in message and "\n" not in message
    assert col_type(db, "docs", "doc") == "bytea"
    with psycopg.connect(db) as conn:  # nothing made: no LO, no new column, no run
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'docs'::regclass AND attnum > 0"
            " AND NOT attisdropped"
        ).fetchone() == (3,)
    # The CLI: one line, the database error's exit code, nothing else on stdout.
    done = CliRunner().invoke(cli, ["migrate", "run", "-d", db, "docs.doc", "--to", "lo"])
    assert done.exit_code == 4, done.output
    assert done.stderr.count("\n") == 1 and "row-level security" in done.stderr
    # Accepted by name, it goes, and does what the refusal said it would.
    r = _go(db, "docs.doc", to="lo", allow_acl_widening=True)
    assert r.phase == "done"  # type: ignore[attr-defined]
    with psycopg.connect(db) as conn:
        b_lo = conn.execute("SELECT doc FROM docs WHERE id = 2").fetchone()[0]  # type: ignore[index]
    with as_role(db, A) as a:
        assert a.execute("SELECT lo_get(%s)", (b_lo,)).fetchone() == (b"secret of b",)


def test_to_lo_goes_when_row_security_filters_none_of_the_new_readers(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Row security that no reader is under (only the owner reads; or every reader has
    BYPASSRLS) widens nothing: the run goes."""
    db = new_db(pg17)
    _rls_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"REVOKE SELECT ON docs FROM {A}, {B}")
    assert _go(db, "docs.doc", to="lo").phase == "done"  # type: ignore[attr-defined]
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs2 (id int PRIMARY KEY, doc bytea)")
        conn.execute("INSERT INTO docs2 VALUES (1, 'x')")
        conn.execute("ALTER TABLE docs2 ENABLE ROW LEVEL SECURITY")
        conn.execute(f"ALTER ROLE {A} BYPASSRLS")
        conn.execute(f"GRANT SELECT ON docs2 TO {A}")
    try:
        assert _go(db, "docs2.doc", to="lo").phase == "done"  # type: ignore[attr-defined]
    finally:
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(f"ALTER ROLE {A} NOBYPASSRLS")


# -- 2. views and SECURITY DEFINER functions, to bytea --------------------------------


def _api_table(db: str) -> None:
    """docs(id, doc oid) owned by MIG, its LO readable by MIG only; A may not SELECT docs
    but may call api_doc(int), SECURITY DEFINER, owned by MIG."""
    with psycopg.connect(db, autocommit=True) as conn:
        _roles(conn)
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {MIG}")
        conn.execute(f"GRANT CREATE ON DATABASE {_dbname(db)} TO {MIG}")  # the state schema
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, doc oid)")
        conn.execute("INSERT INTO docs VALUES (1, lo_from_bytea(0, 'secret'))")
        conn.execute(f"ALTER TABLE docs OWNER TO {MIG}")
        oid = conn.execute("SELECT doc FROM docs").fetchone()[0]  # type: ignore[index]
        conn.execute(f"ALTER LARGE OBJECT {oid} OWNER TO {MIG}")
        conn.execute(
            "CREATE FUNCTION api_doc(int) RETURNS SETOF docs LANGUAGE sql SECURITY DEFINER"
            " AS $$ SELECT * FROM docs WHERE id = $1 $$"
        )
        conn.execute(f"ALTER FUNCTION api_doc(int) OWNER TO {MIG}")


def _dbname(db: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(db)["dbname"])


def _as_mig(db: str) -> str:
    return make_conninfo(db, user=MIG)


def test_a_security_definer_function_handing_out_the_column_is_a_widening_path(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """The reproduction: A got the OID from api_doc and lo_get refused it; after the run,
    A got the bytes."""
    db = new_db(pg17)
    _api_table(db)
    with as_role(db, A) as a:
        oid = a.execute("SELECT doc FROM api_doc(1)").fetchone()[0]  # type: ignore[index]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            a.execute("SELECT lo_get(%s)", (oid,))
    with psycopg.connect(db, autocommit=True) as conn:
        p = plan(conn, "test")
    col = next(c for c in p.columns if c.column == "public.docs.doc")
    assert col.paths == ["SECURITY DEFINER function api_doc(integer)"]
    assert col.widening is not None and col.widening.los == 1 and col.widening.roles == ()
    # A may call it (and PUBLIC, the default EXECUTE of a new function).
    ((path, who),) = col.widening.through
    assert path == "SECURITY DEFINER function api_doc(integer)" and {"PUBLIC", A} <= set(who)
    assert any("api_doc(integer)" in n and "--allow-acl-widening" in n for n in col.notes)
    with pytest.raises(DatabaseError, match=r"call SECURITY DEFINER function api_doc\(integer\)"):
        _go(_as_mig(db), "docs.doc")
    assert col_type(db, "docs", "doc") == "oid"
    # Revoked from PUBLIC and granted to a role that may read the LO: no path widens.
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("REVOKE EXECUTE ON FUNCTION api_doc(int) FROM PUBLIC")
        conn.execute(f"GRANT EXECUTE ON FUNCTION api_doc(int) TO {B}")
        conn.execute(f"GRANT SELECT ON LARGE OBJECT {oid} TO {B}")
        col = _docs_plan(conn)
    assert col.widening is not None and not col.widening
    assert _go(_as_mig(db), "docs.doc").phase == "done"  # type: ignore[attr-defined]
    with as_role(db, B) as b:
        assert b.execute("SELECT doc FROM api_doc(1)").fetchone() == (b"secret",)


def test_functions_reaching_the_table_through_other_functions_or_dynamic_sql_count(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    _api_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP FUNCTION api_doc(int)")
        for stmt in (
            # not SECURITY DEFINER: runs as its caller, who needs the column itself
            "CREATE FUNCTION inner_doc(i int) RETURNS oid LANGUAGE sql"
            " AS $$ SELECT doc FROM public.docs WHERE id = i $$",
            # SECURITY DEFINER, calls the function above: it reads docs as MIG
            "CREATE FUNCTION outer_doc(i int) RETURNS oid LANGUAGE plpgsql SECURITY DEFINER"
            " AS $$ BEGIN RETURN inner_doc(i); END $$",
            # dynamic SQL: what it reads cannot be told from the body
            "CREATE FUNCTION any_table(t text) RETURNS SETOF record LANGUAGE plpgsql"
            " SECURITY DEFINER AS $$ BEGIN RETURN QUERY EXECUTE 'SELECT * FROM ' || t; END $$",
            # SECURITY DEFINER but reads another table only
            "CREATE TABLE other (x int)",
            "CREATE FUNCTION other_x() RETURNS SETOF int LANGUAGE sql SECURITY DEFINER"
            " AS $$ SELECT x FROM other $$",
            # a name that contains the table's, not the table
            "CREATE TABLE docs_archive (x int)",
            "CREATE FUNCTION archive_x() RETURNS SETOF int LANGUAGE sql SECURITY DEFINER"
            " AS $$ SELECT x FROM docs_archive $$",
        ):
            conn.execute(stmt)
        for fn in ("inner_doc(int)", "outer_doc(int)", "any_table(text)", "other_x()",
                   "archive_x()"):  # fmt: skip
            conn.execute(f"ALTER FUNCTION {fn} OWNER TO {MIG}")
        col = _docs_plan(conn)
    assert col.paths == [
        "SECURITY DEFINER function any_table(text)",
        "SECURITY DEFINER function outer_doc(integer)",
    ]
    assert col.widening is not None and [p for p, _ in col.widening.through] == col.paths


def test_views_over_the_column_are_widening_paths(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """A view hands the column to its readers with its owner's rights: its readers count.
    A whole-row view (which a migration does not block) and a view over a view too; a
    security_invoker view does not (its readers need the column themselves)."""
    db = new_db(pg17)
    _api_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP FUNCTION api_doc(int)")
        conn.execute("CREATE VIEW whole AS SELECT d FROM docs d")
        conn.execute("CREATE VIEW cols AS SELECT id, doc FROM docs")
        conn.execute("CREATE VIEW over_cols AS SELECT * FROM cols")
        conn.execute("CREATE VIEW invoker WITH (security_invoker = true) AS SELECT doc FROM docs")
        conn.execute("CREATE VIEW ids AS SELECT id FROM docs")  # not the column
        conn.execute(f"GRANT SELECT ON whole, over_cols, invoker, ids TO {A}")
        col = _docs_plan(conn)
    assert col.paths == ["view cols", "view over_cols", "view whole"]
    assert col.widening is not None
    assert col.widening.through == (("view over_cols", (A,)), ("view whole", (A,)))
    with as_role(db, A) as a:  # what the whole-row view hands A today: the OID only
        assert a.execute("SELECT (d).doc FROM whole").fetchone()[0] > 0  # type: ignore[index]
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP VIEW over_cols, cols")
    with pytest.raises(DatabaseError, match=rf"{A}, who may read view whole"):
        _go(_as_mig(db), "docs.doc")
    assert col_type(db, "docs", "doc") == "oid"


def test_a_view_made_during_the_run_is_refused_at_the_switch(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    from tests.migrate.test_access import started

    db = new_db(pg17)
    _api_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("REVOKE EXECUTE ON FUNCTION api_doc(int) FROM PUBLIC")
    started(_as_mig(db), "docs.doc")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE VIEW whole AS SELECT d FROM docs d")
        conn.execute(f"GRANT SELECT ON whole TO {B}")
    with pytest.raises(DatabaseError, match=rf"{B}, who may read view whole"):
        _go(_as_mig(db), "docs.doc")
    assert col_type(db, "docs", "doc") == "oid"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP VIEW whole")
    assert _go(_as_mig(db), "docs.doc").phase == "done"  # type: ignore[attr-defined]


def _routine(oid: int, body: str, **kw: object) -> Routine:
    fields: dict[str, object] = {
        "oid": oid, "name": f"f{oid}()", "proname": f"f{oid}", "procedure": False,
        "language": "plpgsql", "body": body, "secdef": True, "owner_reads": True,
        "touches": False,
    }  # fmt: skip
    fields.update(kw)
    return Routine(**fields)  # type: ignore[arg-type]


def test_reaching_routines_offline() -> None:
    """The classification alone: names as whole words, through calls, and what cannot be
    read counts; only SECURITY DEFINER routines whose owner reads the column are paths."""
    rs = [
        _routine(1, "SELECT doc FROM Docs"),  # case folded
        _routine(2, "SELECT x FROM docs_archive"),  # another name
        _routine(3, "RETURN f4(1);"),  # calls one that reads it
        _routine(4, "select 1 from public.docs", secdef=False),
        _routine(5, "EXECUTE 'select 1'"),  # dynamic
        _routine(6, "anything", language="plpython3u"),  # not read: counts
        _routine(7, "docs_lookup", language="c"),  # library code: not read
        _routine(8, "SELECT 1 FROM docs", owner_reads=False),  # its owner may not read it
        _routine(9, "", touches=True),  # a BEGIN ATOMIC body, or RETURNS SETOF docs
        _routine(10, "PERFORM f3(0)"),  # two calls away
    ]
    assert sorted(r.oid for r in reaching(rs, ["docs"])) == [1, 3, 5, 6, 9, 10]
    assert sorted(r.oid for r in reaching(rs, [])) == [5, 6, 9]


# -- 3. lo_compat_privileges as each reader's sessions see it --------------------------


def _compat_table(db: str) -> str:
    """docs(id, doc oid) owned by MIG with A reading the column but not the LO; returns
    the LO's OID."""
    with psycopg.connect(db, autocommit=True) as conn:
        _roles(conn)
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, doc oid)")
        oid = conn.execute("SELECT lo_from_bytea(0, 'secret')").fetchone()[0]  # type: ignore[index]
        conn.execute("INSERT INTO docs VALUES (1, %s)", (oid,))
        conn.execute(f"ALTER TABLE docs OWNER TO {MIG}")
        conn.execute(f"GRANT SELECT ON docs TO {A}")
        conn.execute(f"GRANT CREATE ON DATABASE {_dbname(db)} TO {MIG}")  # the state schema
        return str(oid)


def test_lo_compat_privileges_of_the_migrator_alone_does_not_hide_a_widening(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """The reproduction: on for the migrating role in this database, the check saw no
    widening and moved an LO that A could not read."""
    db = new_db(pg17)
    oid = _compat_table(db)
    name = _dbname(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"ALTER ROLE {MIG} IN DATABASE {name} SET lo_compat_privileges = on")
    with psycopg.connect(_as_mig(db), autocommit=True) as conn:
        assert conn.execute("SHOW lo_compat_privileges").fetchone() == ("on",)
        col = _docs_plan(conn)
    assert col.widening is not None and col.widening.roles == (A,)
    with pytest.raises(DatabaseError, match=rf"{oid}.*{A}.*--allow-acl-widening"):
        _go(_as_mig(db), "docs.doc")
    with as_role(db, A) as a, pytest.raises(psycopg.errors.InsufficientPrivilege):
        a.execute("SELECT lo_get(%s::oid)", (oid,))


@pytest.mark.parametrize(
    "setting",
    [
        "ALTER ROLE {a} SET lo_compat_privileges = 'True'",
        "ALTER ROLE {a} IN DATABASE {db} SET lo_compat_privileges = yes",
        "ALTER DATABASE {db} SET lo_compat_privileges = on",
    ],
)
def test_a_reader_whose_sessions_read_every_lo_widens_nothing(
    pg17: EmbeddedCluster, new_db: NewDb, setting: str
) -> None:
    """On for the reader (its role, its role in this database, or the database): it reads
    the LO today, so moving it widens nothing for it; a role-and-database off wins over a
    database-wide on."""
    db = new_db(pg17)
    oid = _compat_table(db)
    name = _dbname(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON LARGE OBJECT {oid} TO {MIG}")  # A alone may not
        conn.execute(setting.format(a=A, db=name))
        try:
            col = _docs_plan(conn)
            assert col.widening is not None and not col.widening, col.widening
            conn.execute(f"ALTER ROLE {A} IN DATABASE {name} SET lo_compat_privileges = off")
            col = _docs_plan(conn)
            assert col.widening is not None and col.widening.roles == (A,)
        finally:
            conn.execute(f"ALTER ROLE {A} RESET ALL")
            conn.execute(f"ALTER ROLE {A} IN DATABASE {name} RESET ALL")


# -- what a second review found --------------------------------------------------------


def test_reaching_offline_calls_quoted_names_query_runners_and_owner_chains() -> None:
    rs = [
        _routine(1, "", language="sql", calls=frozenset({2})),  # BEGIN ATOMIC calling 2
        _routine(2, "SELECT doc FROM docs", secdef=False),
        _routine(3, 'SELECT 1 FROM "We""ird Docs"'),  # a quoted name with a quote in it
        _routine(4, "SELECT schema_to_xml('public', true, false, '')", language="sql"),
        _routine(5, "SELECT f6()", owner_reads=False),  # its owner may call 6
        _routine(6, "SELECT doc FROM docs"),
        _routine(7, "SELECT f6()", owner_reads=False),  # its owner may not
    ]
    may = {5: True, 7: False}
    found = reaching(
        rs, ["docs", 'we"ird docs'], lambda r, ps: may[r.oid] and 6 in {p.oid for p in ps}
    )
    assert sorted(r.oid for r in found) == [1, 3, 4, 5, 6]


def test_views_naming_the_whole_row_and_other_columns_count_and_counting_ones_do_not(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """``SELECT d FROM docs d WHERE d.id > 0`` names the whole row and a column: pg_depend
    records only the column; ``SELECT count(*) FROM docs`` names no column and hands out
    nothing."""
    db = new_db(pg17)
    _api_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP FUNCTION api_doc(int)")
        conn.execute("CREATE VIEW mine AS SELECT d FROM docs d WHERE d.id > 0")
        conn.execute("CREATE VIEW counted AS SELECT count(*) FROM docs")
        conn.execute("CREATE VIEW as_json AS SELECT row_to_json(d) AS j, d.id FROM docs d")
        conn.execute(f"GRANT SELECT ON mine, counted, as_json TO {A}")
        col = _docs_plan(conn)
    assert col.paths == ["view as_json", "view mine"]
    with pytest.raises(DatabaseError, match=rf"{A}, who may read view as_json; by {A}, who"):
        _go(_as_mig(db), "docs.doc")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP VIEW mine, as_json")
    assert _go(_as_mig(db), "docs.doc").phase == "done"  # type: ignore[attr-defined]


def test_definer_chains_atomic_bodies_and_xml_exports_are_paths(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    _api_table(db)
    api = "pgbd_reach_api"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP FUNCTION api_doc(int)")
        conn.execute(f"DO $$ BEGIN CREATE ROLE {api} NOLOGIN; EXCEPTION WHEN duplicate_object"
                     " THEN NULL; END $$")  # fmt: skip
        for stmt in (
            # A SQL-standard body calling a plain function that reads docs
            "CREATE FUNCTION doc_text(i int) RETURNS text LANGUAGE sql STABLE"
            " AS $$ SELECT doc::text FROM docs WHERE id = i $$",
            "CREATE FUNCTION atomic_doc(i int) RETURNS text LANGUAGE sql SECURITY DEFINER"
            " BEGIN ATOMIC SELECT doc_text(i); END",
            # the server's XML export of a whole schema
            "CREATE FUNCTION export_all() RETURNS xml LANGUAGE sql SECURITY DEFINER"
            " AS $$ SELECT schema_to_xml('public', true, false, '') $$",
            # a definer that only api may call, and api's own definer over it
            "CREATE FUNCTION get_doc(i int) RETURNS text LANGUAGE sql SECURITY DEFINER"
            " AS $$ SELECT doc::text FROM public.docs WHERE id = i $$",
        ):
            conn.execute(stmt)
        for fn in ("doc_text(int)", "atomic_doc(int)", "export_all()", "get_doc(int)"):
            conn.execute(f"ALTER FUNCTION {fn} OWNER TO {MIG}")
        conn.execute("REVOKE EXECUTE ON FUNCTION get_doc(int), atomic_doc(int), export_all()"
                     " FROM PUBLIC")  # fmt: skip
        conn.execute(f"GRANT EXECUTE ON FUNCTION get_doc(int) TO {api}")
        conn.execute(f"GRANT CREATE ON SCHEMA public TO {api}")
        conn.execute(f"SET ROLE {api}")
        conn.execute("CREATE FUNCTION api_doc(i int) RETURNS text LANGUAGE sql SECURITY DEFINER"
                     " AS $$ SELECT get_doc(i) $$")  # fmt: skip
        conn.execute("RESET ROLE")
        conn.execute(f"GRANT EXECUTE ON FUNCTION atomic_doc(int), export_all() TO {A}")
        col = _docs_plan(conn)
    assert col.paths == [
        "SECURITY DEFINER function api_doc(integer)",
        "SECURITY DEFINER function atomic_doc(integer)",
        "SECURITY DEFINER function export_all()",
        "SECURITY DEFINER function get_doc(integer)",
    ]
    assert col.widening is not None
    through = dict(col.widening.through)
    assert A in through["SECURITY DEFINER function atomic_doc(integer)"]
    assert A in through["SECURITY DEFINER function export_all()"]
    assert "PUBLIC" in through["SECURITY DEFINER function api_doc(integer)"]
    with pytest.raises(DatabaseError, match=r"call SECURITY DEFINER function api_doc"):
        _go(_as_mig(db), "docs.doc")


def test_a_quoted_table_name_is_found_in_function_bodies(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        _roles(conn)
        conn.execute('CREATE TABLE "We""ird Docs" (id int PRIMARY KEY, "Da ta" oid)')
        conn.execute("""INSERT INTO "We""ird Docs" VALUES (1, lo_from_bytea(0, 'x'))""")
        conn.execute(
            "CREATE FUNCTION get_it(i int) RETURNS oid LANGUAGE sql SECURITY DEFINER"
            ' AS $$ SELECT "Da ta" FROM "We""ird Docs" WHERE id = i $$'
        )
        col = next(c for c in plan(conn, "test").columns if c.column.endswith('"Da ta"'))
    assert col.paths == ["SECURITY DEFINER function get_it(integer)"]
    assert col.widening is not None and col.widening.los == 1


def test_to_lo_owner_under_row_security_and_bypassrls_of_a_group_are_refused(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """--owner A on an RLS table: A would own, so read, every row's LO. And BYPASSRLS is
    not inherited: a group with it, whose member may not SET ROLE to it, does not lift
    the policy for the member."""
    db = new_db(pg17)
    _rls_table(db)
    grp = "pgbd_reach_grp"
    with pytest.raises(DatabaseError, match=rf"row-level security.*{A}"):
        _go(db, "docs.doc", to="lo", owner=A)
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)
        conn.execute(f"REVOKE SELECT ON docs FROM {A}, {B}")
        conn.execute(f"DO $$ BEGIN CREATE ROLE {grp} NOLOGIN BYPASSRLS; EXCEPTION WHEN"
                     " duplicate_object THEN NULL; END $$")  # fmt: skip
        conn.execute(f"GRANT {grp} TO {B} WITH SET FALSE")
        conn.execute(f"GRANT SELECT ON docs TO {grp}")
    with as_role(db, B) as b:  # B reads through the group's grant, under the policy
        assert b.execute("SELECT doc FROM docs").fetchall() == [(b"secret of b",)]
    try:
        with pytest.raises(DatabaseError, match=rf"row-level security.*{grp}"):
            _go(db, "docs.doc", to="lo")
    finally:
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(f"REVOKE {grp} FROM {B}")
            conn.execute(f"REVOKE SELECT ON docs FROM {grp}")


def test_a_view_made_after_the_verify_pass_read_the_paths_is_refused_at_the_switch(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verify pass reads the column's paths when it re-copies a row; the switch reads
    them again, as they are then."""
    from pgblobdump.migrate.runner import Runner
    from tests.migrate.test_access import started

    db = new_db(pg17)
    _api_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("REVOKE EXECUTE ON FUNCTION api_doc(int) FROM PUBLIC")
        oid = conn.execute("SELECT doc FROM docs").fetchone()[0]  # type: ignore[index]
    started(_as_mig(db), "docs.doc")
    fill, verify = Runner.fill, Runner.verify

    def then_a_write(self: Runner) -> None:
        fill(self)
        with psycopg.connect(db, autocommit=True) as conn:  # the verify pass re-copies it
            conn.execute("SELECT lo_put(%s, 0, 'S')", (oid,))

    def then_a_view(self: Runner) -> None:
        verify(self)
        assert self._reach is not None  # read by the re-copy
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("CREATE VIEW whole AS SELECT d FROM docs d")
            conn.execute(f"GRANT SELECT ON whole TO {B}")

    monkeypatch.setattr(Runner, "fill", then_a_write)
    monkeypatch.setattr(Runner, "verify", then_a_view)
    with pytest.raises(DatabaseError, match=rf"{B}, who may read view whole"):
        _go(_as_mig(db), "docs.doc")
    assert col_type(db, "docs", "doc") == "oid"


def test_every_roles_setting_counts(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """``ALTER ROLE ALL SET`` comes between the database's setting and the server's."""
    db = new_db(pg17)
    oid = _compat_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON LARGE OBJECT {oid} TO {MIG}")
        conn.execute("ALTER ROLE ALL SET lo_compat_privileges = on")
        try:
            col = _docs_plan(conn)
            assert col.widening is not None and not col.widening, col.widening
        finally:
            conn.execute("ALTER ROLE ALL RESET lo_compat_privileges")
        col = _docs_plan(conn)
        assert col.widening is not None and col.widening.roles == (A,)
