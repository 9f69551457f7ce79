"""Other ways than SELECT on a column to read it: views over it, and SECURITY DEFINER
functions that read it as their owner.

While a column holds OIDs, whoever reaches it this way gets numbers, and ``lo_get``
checks the LO's own ACL against the caller. Once it holds bytea, the same view or
function hands out the bytes. So a move to bytea must count the readers of these paths
as readers of the column (``access.Reach``).

- **Views** (and materialized views) whose rule names the column, or a whole row
  (``SELECT t FROM t``, ``row_to_json(t)``: it carries every column, the new one too;
  pg_depend records no column for it, or only the others the view names, so the rule's
  node tree is read for it), and views over those that name any of their columns or a
  whole row; a view naming no column (``count(*)``) carries none. A view with
  ``security_invoker`` is no path of its own (its readers need the column themselves)
  but a view over it may be.
- **SECURITY DEFINER functions and procedures** whose owner may read the column (or one
  of those views) and whose body or signature mentions the table or one of the views,
  directly or through other functions of the database they call (by name, or as
  pg_depend records the calls of a SQL-standard ``BEGIN ATOMIC`` body, read as text);
  and then those whose owner may call such a function (a chain of definers, each owner
  trusted by the next, a role that cannot log in included). A body that cannot be read
  for names counts as mentioning it: another procedural language than SQL and PL/pgSQL
  (PL/Python, PL/Perl...: they run queries built at run time), ``EXECUTE`` (dynamic
  SQL), or a call of a function that runs a query given as text or exports whole
  schemas (``query_to_xml``, ``schema_to_xml``, ``ts_stat``, dblink...:
  ``QUERY_RUNNERS``). Names are matched as whole words, case folded, bare or as a quoted
  identifier writes a ``"``, so a comment or another object of the same name makes a
  path too: conservative, never blind (a name written with Unicode escapes,
  ``U&"..."``, is not recognised). C functions are library code and are not read.
  Trigger functions are left out: nobody calls one (a migration's own sync trigger is
  one).

``executable by others`` is not decided here: ``access`` asks, role by role, who may
select from the view or execute the function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

READ_LANGUAGES = frozenset({"sql", "plpgsql"})
"""Languages whose bodies are read for the names they mention."""
LIBRARY_LANGUAGES = frozenset({"c", "internal"})
"""Languages of compiled library code: not read, not counted (see the module's note)."""
_DYNAMIC = re.compile(r"\bexecute\b", re.IGNORECASE)
QUERY_RUNNERS = (
    "query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema",
    "table_to_xml", "table_to_xmlschema", "table_to_xml_and_xmlschema",
    "schema_to_xml", "schema_to_xmlschema", "schema_to_xml_and_xmlschema",
    "database_to_xml", "database_to_xmlschema", "database_to_xml_and_xmlschema",
    "cursor_to_xml", "cursor_to_xmlschema", "ts_stat",
    "dblink", "dblink_exec", "dblink_open", "dblink_send_query",
)  # fmt: skip
"""Functions that run a query given as text or read whole schemas (the server's XML
export, ts_stat, dblink): a body calling one reads what it likes, like ``EXECUTE``."""


@dataclass(frozen=True)
class Path:
    """A view or a SECURITY DEFINER routine through which its users read the column."""

    kind: str
    """``view``, ``materialized view``, ``SECURITY DEFINER function`` or ``... procedure``."""
    oid: int
    name: str
    """Schema-qualified; a routine with its argument types (``regprocedure``)."""

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"

    @property
    def is_view(self) -> bool:
        return self.kind.endswith("view")

    @property
    def verb(self) -> str:
        return "read" if self.is_view else "call"

    def usable_by(self, role: sql.Composable) -> sql.Composed:
        """Whether role ``role`` (an oid expression) may select from it or execute it."""
        if self.is_view:
            return sql.SQL("pg_catalog.has_any_column_privilege({r}, {o}::oid, 'SELECT')").format(
                r=role, o=sql.Literal(self.oid)
            )
        return sql.SQL("pg_catalog.has_function_privilege({r}, {o}::oid, 'EXECUTE')").format(
            r=role, o=sql.Literal(self.oid)
        )

    def public(self) -> sql.Composed:
        """Whether PUBLIC may select from it (a table or column grant) or execute it (a
        function's ACL unset means PUBLIC may, the server's default)."""
        if self.is_view:
            return sql.SQL(
                "(EXISTS (SELECT 1 FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x"
                " WHERE c.oid = {o}::oid AND x.grantee = 0 AND x.privilege_type = 'SELECT')"
                " OR EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a,"
                " pg_catalog.aclexplode(a.attacl) x WHERE a.attrelid = {o}::oid"
                " AND x.grantee = 0 AND x.privilege_type = 'SELECT'))"
            ).format(o=sql.Literal(self.oid))
        return sql.SQL(
            "EXISTS (SELECT 1 FROM pg_catalog.pg_proc p, pg_catalog.aclexplode("
            "coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) x"
            " WHERE p.oid = {o}::oid AND x.grantee = 0 AND x.privilege_type = 'EXECUTE')"
        ).format(o=sql.Literal(self.oid))


@dataclass(frozen=True)
class Routine:
    """A function or procedure of the database as the analysis sees it."""

    oid: int
    name: str
    """``regprocedure`` text, for reports."""
    proname: str
    """The bare name, as other bodies call it."""
    procedure: bool
    language: str
    body: str
    """Its source (``prosrc``), or a SQL-standard body (``BEGIN ATOMIC``) as text."""
    secdef: bool
    owner_reads: bool
    """Its owner may read the column, or one of the views over it."""
    touches: bool
    """Its signature has the row type of the table or of a view over it, or pg_depend
    ties it to one of them (a SQL-standard ``BEGIN ATOMIC`` body)."""
    calls: frozenset[int] = frozenset()
    """Routines pg_depend says it calls (a SQL-standard body records them)."""


def _spellings(names: Iterable[str]) -> set[str]:
    """A name as a body may write it: bare, and as a quoted identifier writes a ``"``."""
    out: set[str] = set()
    for n in names:
        if n:
            out |= {n.lower(), n.lower().replace('"', '""')}
    return out


def _words(names: Iterable[str]) -> re.Pattern[str] | None:
    found = sorted(_spellings(names), key=len, reverse=True)
    if not found:
        return None
    # Identifier characters on neither side: "docs" is not found in "docs_archive".
    alternatives = "|".join(re.escape(n) for n in found)
    return re.compile(rf"(?<![\w$])(?:{alternatives})(?![\w$])", re.IGNORECASE)


_RUNNERS = _words(QUERY_RUNNERS)


def opaque(r: Routine) -> bool:
    """Whether ``r``'s body cannot be read for the names it uses."""
    if r.language in LIBRARY_LANGUAGES:
        return False
    if r.language not in READ_LANGUAGES:
        return True
    if _DYNAMIC.search(r.body) is not None:
        return True
    assert _RUNNERS is not None
    return _RUNNERS.search(r.body) is not None


def tainted(routines: Iterable[Routine], names: Iterable[str]) -> set[int]:
    """The routines among ``routines`` that reach the column: touching or naming one of
    ``names`` (the table and its views), opaque, or calling (by name or as pg_depend
    says) one that does. Pure: tested without a server."""
    routines = list(routines)
    reach = {r.oid for r in routines if r.touches or opaque(r)}
    pattern = _words(names)
    if pattern is not None:
        reach |= {r.oid for r in routines if pattern.search(r.body)}
    # Callers of a routine that reaches it reach it too, until no new one is found.
    while True:
        called = _words(r.proname for r in routines if r.oid in reach)
        more = {
            r.oid
            for r in routines
            if r.oid not in reach
            and ((called is not None and called.search(r.body)) or r.calls & reach)
        }
        if not more:
            return reach
        reach |= more


def reaching(
    routines: Iterable[Routine],
    names: Iterable[str],
    owner_may_call: Callable[[Routine, list[Routine]], bool] = lambda r, ps: False,
) -> list[Routine]:
    """The SECURITY DEFINER routines among ``routines`` that hand the column out: those
    that reach it (``tainted``) whose owner may read the column, and then those whose
    owner may call one of them (``owner_may_call``: a chain of definers, each owner
    trusted by the next), until no new one is found. Pure: tested without a server."""
    routines = list(routines)
    reach = tainted(routines, names)
    candidates = [r for r in routines if r.oid in reach and r.secdef]
    found = [r for r in candidates if r.owner_reads]
    rest = [r for r in candidates if not r.owner_reads]
    while rest and found:
        more = [r for r in rest if owner_may_call(r, found)]
        if not more:
            break
        found += more
        rest = [r for r in rest if r not in more]
    return sorted(found, key=lambda r: r.name)


_WHOLE_ROW = r":varattno 0 "
"""A whole-row Var in a rule's node tree (``SELECT t FROM t``): it carries every column,
yet pg_depend records it as no column at all, or as the other columns the view names."""

_VIEWS = """
WITH RECURSIVE v(oid) AS (
    SELECT r.ev_class FROM pg_catalog.pg_depend d
    JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
    WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
      AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
      AND d.refobjid = %(rel)s AND r.ev_class <> %(rel)s
      AND (d.refobjsubid = %(att)s OR pg_catalog.strpos(r.ev_action::text, %(whole)s) > 0)
    UNION
    SELECT r.ev_class FROM v JOIN pg_catalog.pg_depend d ON d.refobjid = v.oid
      AND d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
      AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
    JOIN pg_catalog.pg_rewrite r ON r.oid = d.objid
    WHERE r.ev_class <> v.oid
      AND (d.refobjsubid <> 0 OR pg_catalog.strpos(r.ev_action::text, %(whole)s) > 0)
)
SELECT c.oid::int8, c.relkind::text, c.oid::pg_catalog.regclass::text, c.relname,
       coalesce(EXISTS (SELECT 1 FROM pg_catalog.unnest(c.reloptions) o
                        WHERE o ~* '^security_invoker=(true|on|yes|1)$'), false)
FROM v JOIN pg_catalog.pg_class c ON c.oid = v.oid
ORDER BY 3
"""
"""Views that carry the column: naming it, or the whole row; and views over those that
name any of their columns or a whole row (which of a view's columns carries it is not
told: any counts). A view naming no column (``SELECT count(*) FROM t``) carries none."""

_ROUTINES = """
SELECT p.oid::int8, p.oid::pg_catalog.regprocedure::text, p.proname, p.prokind = 'p',
       l.lanname, {body}, p.prosecdef,
       pg_catalog.has_column_privilege(p.proowner, %(rel)s::oid, %(col)s, 'SELECT')
         OR EXISTS (SELECT 1 FROM pg_catalog.unnest(%(views)s::int8[]) w
                    WHERE pg_catalog.has_table_privilege(p.proowner, w::oid, 'SELECT')),
       EXISTS (SELECT 1 FROM pg_catalog.pg_class c
               WHERE c.oid = ANY (%(rels)s::int8[]::oid[])
                 AND (c.reltype = p.prorettype OR c.reltype = ANY (p.proargtypes::oid[])
                      OR c.reltype = ANY (coalesce(p.proallargtypes, '{{}}'))))
         OR EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                    WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass
                      AND d.objid = p.oid
                      AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
                      AND d.refobjid = ANY (%(rels)s::int8[]::oid[])),
       ARRAY(SELECT d.refobjid::int8 FROM pg_catalog.pg_depend d
             WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
               AND d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass)
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_language l ON l.oid = p.prolang
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
WHERE p.prokind IN ('f', 'p')
  AND p.prorettype NOT IN ('pg_catalog.trigger'::pg_catalog.regtype,
                           'pg_catalog.event_trigger'::pg_catalog.regtype)
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%%'
ORDER BY 2
"""

_SQL_BODY = (
    "coalesce(CASE WHEN p.prosqlbody IS NOT NULL"
    " THEN pg_catalog.pg_get_function_sqlbody(p.oid) END, p.prosrc, '')"
)
"""A routine's body as text: a SQL-standard one (PostgreSQL 14+) has no ``prosrc``."""

_OWNER_MAY_CALL = """
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p, pg_catalog.unnest(%(paths)s::int8[]) q
               WHERE p.oid = %(caller)s::oid
                 AND pg_catalog.has_function_privilege(p.proowner, q::oid, 'EXECUTE'))
"""


def _routine(r: tuple[Any, ...]) -> Routine:
    return Routine(int(r[0]), r[1], r[2], bool(r[3]), r[4], r[5], bool(r[6]), bool(r[7]),
                   bool(r[8]), frozenset(int(c) for c in r[9]))  # fmt: skip


def find(conn: psycopg.Connection, relid: int, column: str) -> tuple[Path, ...]:
    """The views and SECURITY DEFINER routines through which ``column`` of ``relid`` is
    read, views first."""
    row = conn.execute(
        "SELECT a.attnum, c.relname FROM pg_catalog.pg_attribute a"
        " JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
        " WHERE a.attrelid = %s AND a.attname = %s",
        (relid, column),
    ).fetchone()
    if row is None:
        return ()
    attnum, table = int(row[0]), str(row[1])
    views = conn.execute(_VIEWS, {"rel": relid, "att": attnum, "whole": _WHOLE_ROW}).fetchall()
    out = [
        Path("materialized view" if kind == "m" else "view", int(oid), name)
        for oid, kind, name, _, invoker in views
        if not invoker
    ]
    view_oids = [int(v[0]) for v in views]
    body = _SQL_BODY if conn.info.server_version >= 140000 else "coalesce(p.prosrc, '')"
    found = conn.execute(
        sql.SQL(_ROUTINES).format(body=sql.SQL(body)),
        {"rel": relid, "col": column, "views": view_oids, "rels": [relid, *view_oids]},
    ).fetchall()
    routines = [_routine(r) for r in found]

    def owner_may_call(r: Routine, paths_: list[Routine]) -> bool:
        row = conn.execute(
            _OWNER_MAY_CALL, {"caller": r.oid, "paths": [p.oid for p in paths_]}
        ).fetchone()
        return bool(row and row[0])

    for r in reaching(routines, [table, *(str(v[3]) for v in views)], owner_may_call):
        kind = "procedure" if r.procedure else "function"
        out.append(Path(f"SECURITY DEFINER {kind}", r.oid, r.name))
    return tuple(out)
