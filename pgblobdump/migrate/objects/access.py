"""``--to s3://``: who could read the column's LOs in the database, said before they
leave it. In the bucket none of it applies: no ACL and no public setting is put on an
object, so who reads them there is the bucket's policy, which is the user's to set."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgblobdump.migrate.columns import Column


def readers(conn: psycopg.Connection, col: Column) -> list[str]:
    """Lines for the run's report: the LOs' owners, the roles granted SELECT on them
    (PUBLIC included), superusers, ``lo_compat_privileges``, and what becomes of it."""
    o = col.form.oid(sql.Identifier("x", col.name))
    rows = conn.execute(
        sql.SQL(
            "WITH los AS (SELECT DISTINCT {o} AS o FROM {t} x),"
            " m AS (SELECT m.oid, m.lomowner, m.lomacl FROM pg_catalog.pg_largeobject_metadata m"
            " JOIN los ON los.o = m.oid)"
            " SELECT 'owner', pg_catalog.pg_get_userbyid(m.lomowner), count(*) FROM m GROUP BY 2"
            " UNION ALL SELECT 'select', CASE WHEN a.grantee = 0 THEN 'PUBLIC'"
            " ELSE pg_catalog.pg_get_userbyid(a.grantee) END, count(DISTINCT m.oid)"
            " FROM m, pg_catalog.aclexplode(m.lomacl) a WHERE a.privilege_type = 'SELECT'"
            " AND a.grantee <> m.lomowner GROUP BY 2 ORDER BY 1, 2"
        ).format(o=o, t=col.ident())
    ).fetchall()  # fmt: skip
    owners = ", ".join(f"{r[1]} ({r[2]:,} LOs)" for r in rows if r[0] == "owner")
    granted = ", ".join(f"{r[1]} ({r[2]:,} LOs)" for r in rows if r[0] == "select")
    supers = conn.execute(
        "SELECT string_agg(rolname, ', ' ORDER BY rolname) FROM pg_catalog.pg_roles WHERE rolsuper"
    ).fetchone()
    compat = conn.execute("SELECT current_setting('lo_compat_privileges')").fetchone()
    return [
        f"who could read the LOs of {col.qualified} in the database: owners"
        f" {owners or 'none'}; SELECT granted to {granted or 'nobody else'}; superusers"
        f" ({supers[0] if supers and supers[0] else 'none'}); lo_compat_privileges is"
        f" {compat[0] if compat else 'off'} here (on: every role reads every LO)",
        "in the bucket none of that applies: no ACL or public setting was put on any"
        " object, so who may read them is the bucket's policy, which is yours to set",
    ]
