"""Whether a schema is safe to keep our state in: nobody we would not trust can have put
code or rows there.

pgblobdump keeps state in the databases it works on (migrate's runs, copy/sync's marks and
what they made, vacuum's horizon samples). It is often run by a superuser on a database
another role owns; if that role could create our state table first (with a trigger, a
rule or a policy calling its own function), our INSERT would run its code as the
superuser, and rows it wrote could tell us an LO is ours to remove. So before our state is
read or written, the schema, every object in it and every grant on them must belong to
this role or to a superuser (trusted); triggers, rules other than a view's and policies on
its tables are refused outright (we make none)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError

_TRUSTED = (
    "(SELECT {r} = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user)"
    " OR coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE oid = {r}), false))"
)


def _trusted(role: str) -> sql.Composable:
    return sql.SQL(_TRUSTED.format(r=role))


_PROBLEMS = sql.SQL(
    """
WITH n AS (SELECT oid, nspowner, nspacl FROM pg_catalog.pg_namespace WHERE nspname = %(s)s),
rels AS (SELECT c.oid, c.relname, c.relowner, c.relacl FROM pg_catalog.pg_class c, n
         WHERE c.relnamespace = n.oid)
SELECT 'the schema belongs to ' || pg_catalog.pg_get_userbyid(n.nspowner) FROM n
 WHERE NOT {schema_owner}
UNION ALL
SELECT pg_catalog.pg_get_userbyid(a.grantee) || ' may create objects in it'
 FROM n, pg_catalog.aclexplode(n.nspacl) a
 WHERE a.privilege_type = 'CREATE' AND (a.grantee = 0 OR NOT {grantee})
UNION ALL
SELECT r.relname || ' belongs to ' || pg_catalog.pg_get_userbyid(r.relowner) FROM rels r
 WHERE NOT {rel_owner}
UNION ALL
SELECT r.relname || ': ' || CASE WHEN a.grantee = 0 THEN 'PUBLIC'
       ELSE pg_catalog.pg_get_userbyid(a.grantee) END || ' has ' || a.privilege_type
 FROM rels r, pg_catalog.aclexplode(r.relacl) a
 WHERE a.privilege_type <> 'SELECT' AND (a.grantee = 0 OR NOT {grantee})
UNION ALL
SELECT r.relname || ' has trigger ' || t.tgname FROM rels r
 JOIN pg_catalog.pg_trigger t ON t.tgrelid = r.oid WHERE NOT t.tgisinternal
UNION ALL
SELECT r.relname || ' has rule ' || w.rulename FROM rels r
 JOIN pg_catalog.pg_rewrite w ON w.ev_class = r.oid WHERE w.rulename <> '_RETURN'
UNION ALL
SELECT r.relname || ' has policy ' || p.polname FROM rels r
 JOIN pg_catalog.pg_policy p ON p.polrelid = r.oid
UNION ALL
SELECT 'function ' || f.proname || ' belongs to ' || pg_catalog.pg_get_userbyid(f.proowner)
 FROM pg_catalog.pg_proc f, n WHERE f.pronamespace = n.oid AND NOT {proc_owner}
UNION ALL
SELECT 'type ' || y.typname || ' belongs to ' || pg_catalog.pg_get_userbyid(y.typowner)
 FROM pg_catalog.pg_type y, n WHERE y.typnamespace = n.oid AND NOT {type_owner}
"""
).format(
    schema_owner=_trusted("n.nspowner"),
    grantee=_trusted("a.grantee"),
    rel_owner=_trusted("r.relowner"),
    proc_owner=_trusted("f.proowner"),
    type_owner=_trusted("y.typowner"),
)


def problems(conn: psycopg.Connection, schema: str) -> list[str]:
    """Why ``schema`` is not safe for our state (empty: safe, or it does not exist yet)."""
    return [str(r[0]) for r in conn.execute(_PROBLEMS, {"s": schema}).fetchall()]


def check_state_schema(conn: psycopg.Connection, schema: str, what: str) -> None:
    """Refuse (DatabaseError, naming the first problems) to keep ``what``'s state in
    ``schema`` unless only this role and superusers can have put anything in it."""
    found = problems(conn, schema)
    if found:
        shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
        raise DatabaseError(
            f"{what} keeps its state in schema {schema}, which another role could have"
            f" changed ({shown}): drop it, or run as its owner"
        )
