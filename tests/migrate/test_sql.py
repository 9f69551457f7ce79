"""The SQL migrate generates (migrate/move.py, migrate/reach/access.py), rendered with no server:
the properties its safety rests on, checked on the text it sends.

Names are chosen to need quoting (a space, a double quote, capitals): a name that reaches
the SQL unquoted shows up outside every quoted identifier.
"""

from __future__ import annotations

import re

import pytest
from psycopg import sql

from pgblobdump.migrate import move
from pgblobdump.migrate.columns import Key
from pgblobdump.migrate.reach.access import NewLoAccess, Reach, lo_maker_ddl

SCHEMA = "pgbd State"
RUN = 7
RELID = 16400
TABLE = sql.Identifier("My Schema", 'Odd"Table')
SRC, DST = "Lo Col", 'new"Col'
KEY = Key(("Id", "part no"), ("integer", "text"))
ODD_NAMES = ("My Schema", "Odd", "Table", "Lo Col", "Col", "Id", "part no", "State")
"""Pieces of the names above that may appear only inside quoted identifiers."""

SEARCH_PATH = "SET search_path = pg_catalog, pg_temp"

_IDENT = r'(?:"(?:[^"]|"")*"|[a-z_][a-z0-9_$]*)'
NAME = rf"({_IDENT}(?:\.{_IDENT})?)"
"""A (qualified) name as psycopg renders it, captured."""


def _move(to: str) -> move.Move:
    return move.Move(to, TABLE, SRC, DST, KEY, SCHEMA, RUN)


def _text(statements: list[sql.Composed]) -> list[str]:
    return [s.as_string(None) for s in statements]


def _outside_quotes(text: str) -> str:
    """``text`` without its quoted identifiers and string literals (read left to right,
    as the server's lexer does: a quote inside the other kind is plain text)."""
    return re.sub(r'"(?:[^"]|"")*"|\'(?:[^\']|\'\')*\'', " ", text)


def _create(texts: list[str], name: str) -> str:
    """The CREATE FUNCTION statement of function ``name`` of the run's schema."""
    head = f'CREATE FUNCTION "pgbd State"."{name}"('
    found = [t for t in texts if t.startswith(head)]
    assert len(found) == 1, (name, texts)
    return found[0]


def _ddl(to: str) -> list[str]:
    m = _move(to)
    made = move.trigger_ddl(m, SCHEMA, RUN, Reach(RELID, SRC))
    if to == "lo":
        made += lo_maker_ddl(m.lo_fn, NewLoAccess('Own"er', ("PUBLIC", "Ro Le")))
    return _text(made)


def test_before_function_is_the_writers_and_reads_only_an_existing_lo() -> None:
    before = _create(_ddl("bytea"), move.names(RUN)[0])
    assert " SECURITY INVOKER " in before and "SECURITY DEFINER" not in before
    assert SEARCH_PATH in before
    # the writer's own read of the LO (its permission error is the server's), and only
    # when the LO exists: a dangling OID is the --missing policy's, not an error here
    assert before.count("lo_get(") == 1
    assert (
        'IF NEW."Lo Col" IS NOT NULL AND EXISTS (SELECT 1 FROM'
        ' pg_catalog.pg_largeobject_metadata m WHERE m.oid = NEW."Lo Col") THEN'
        ' PERFORM pg_catalog.lo_get(NEW."Lo Col", 0, 0); END IF;'
    ) in before


def test_deferred_function_runs_as_the_migrating_role_with_search_path_pinned() -> None:
    for to in ("bytea", "lo"):
        texts = _ddl(to)
        after = _create(texts, move.names(RUN)[1])
        assert " SECURITY DEFINER " in after and "SECURITY INVOKER" not in after
        assert SEARCH_PATH in after
        # a copy it cannot make is logged, never failing the writer's transaction
        assert "EXCEPTION WHEN OTHERS THEN" in after
        assert 'INSERT INTO "pgbd State".migration_redo' in after
        for t in texts:  # no function of the run trusts the caller's search_path
            if t.startswith("CREATE FUNCTION"):
                assert SEARCH_PATH in t, t


def test_forward_copy_checks_that_the_lo_exists_and_the_deferred_one_its_readers() -> None:
    m = _move("bytea")
    copy = m.copy().as_string(None)
    assert copy == (
        'CASE WHEN "Lo Col" IS NULL THEN NULL WHEN EXISTS (SELECT 1 FROM'
        ' pg_catalog.pg_largeobject_metadata m WHERE m.oid = "Lo Col")'
        ' THEN pg_catalog.lo_get("Lo Col") END'
    )
    assert m.equal("x").as_string(None).startswith('("x"."new""Col" IS NOT DISTINCT FROM CASE')
    after = _create(_ddl("bytea"), move.names(RUN)[1])
    assert Reach(RELID, SRC).any_readers_not_of(sql.SQL("cur")).as_string(None) in after
    assert "allow_widening" in after


@pytest.mark.parametrize("to", ["bytea", "lo"])
def test_every_name_is_quoted_and_every_function_qualified(to: str) -> None:
    m = _move(to)
    texts = _ddl(to) + _text(move.drop_triggers_ddl(m, SCHEMA, RUN))
    texts += [m.fill(sql.SQL("true")).as_string(None), m.repair(sql.SQL("true")).as_string(None)]
    for t in texts:
        bare = _outside_quotes(t)
        for piece in ODD_NAMES:
            assert piece not in bare, (piece, t)
        # lo_* called unqualified would run whatever a writer's search_path finds first
        for fn in ("lo_get", "lo_unlink", "lo_from_bytea"):
            assert len(re.findall(rf"\b{fn}\(", t)) == t.count(f"pg_catalog.{fn}("), (fn, t)


def _created(texts: list[str]) -> tuple[set[tuple[str, str]], set[str]]:
    triggers = {
        (m[1], m[2])
        for t in texts
        if (m := re.match(rf"CREATE (?:CONSTRAINT )?TRIGGER {NAME} .* ON {NAME} ", t))
    }
    functions = set()
    for t in texts:
        if f := re.match(rf"CREATE FUNCTION {NAME}\(([^)]*)\)", t):
            types = ", ".join(arg.split()[-1] for arg in f[2].split(",") if arg.strip())
            functions.add(f"{f[1]}({types})")
    return triggers, functions


def _dropped(texts: list[str]) -> tuple[set[tuple[str, str]], set[str]]:
    triggers = {
        (m[1], m[2])
        for t in texts
        if (m := re.fullmatch(rf"DROP TRIGGER IF EXISTS {NAME} ON {NAME}", t))
    }
    functions = {
        m[1]
        for t in texts
        if (m := re.fullmatch(rf"DROP FUNCTION IF EXISTS ({_IDENT}\.{_IDENT}\([^)]*\))", t))
    }
    return triggers, functions


@pytest.mark.parametrize("to", ["bytea", "lo"])
def test_drop_names_every_trigger_and_function_the_create_makes(to: str) -> None:
    made_t, made_f = _created(_ddl(to))
    dropped_t, dropped_f = _dropped(_text(move.drop_triggers_ddl(_move(to), SCHEMA, RUN)))
    assert len(made_t) == (4 if to == "lo" else 2)
    assert len(made_f) == (5 if to == "lo" else 2)  # "lo": + row gone, truncate, LO maker
    assert made_t <= dropped_t, made_t - dropped_t
    assert made_f <= dropped_f, made_f - dropped_f
    # and every trigger it enables ALWAYS is one it made
    enabled = {
        (m[2], m[1])
        for t in _ddl(to)
        if (m := re.fullmatch(rf"ALTER TABLE {NAME} ENABLE ALWAYS TRIGGER {NAME}", t))
    }
    assert enabled == made_t


def test_lo_maker_is_the_migrating_roles_alone() -> None:
    fn = sql.Identifier(SCHEMA, move.lo_maker_name(RUN))
    create, revoke = _text(lo_maker_ddl(fn, NewLoAccess('Own"er', ("PUBLIC", "Ro Le"))))
    assert revoke == 'REVOKE ALL ON FUNCTION "pgbd State"."pgbd_lo_7"(bytea) FROM PUBLIC'
    assert "SECURITY DEFINER" not in create and SEARCH_PATH in create
    assert "o := pg_catalog.lo_from_bytea(0, b);" in create
    # the names go into EXECUTE'd text already quoted: a role name cannot become SQL
    assert """EXECUTE 'GRANT SELECT ON LARGE OBJECT ' || o || ' TO PUBLIC, "Ro Le"';""" in create
    assert """|| ' OWNER TO "Own""er"'; END IF;""" in create
    assert """IF current_user <> 'Own"er' THEN""" in create
    no_readers = lo_maker_ddl(fn, NewLoAccess("bob", ()))[0].as_string(None)
    assert "GRANT" not in no_readers
