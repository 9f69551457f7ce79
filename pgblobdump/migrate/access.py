"""Who may read what: a migration must not let any role read bytes it could not read before.

An LO carries its own ACL; a bytea value is readable by whoever may SELECT its column. So
moving an LO into a column widens access when some role may read the column but not the LO
(the LO's owner, its grantees and their members may; ``lo_compat_privileges = on`` lets
everyone, and then nothing can widen). Such LOs are reported by ``plan``, refused by
``run`` unless ``--allow-acl-widening``, and never copied by the sync triggers.

The other way, a new LO made from a bytea value is given to the table's owner (or
``--owner``) with SELECT for the roles the table grants SELECT on the column, so the
column's readers keep reading it and nobody else starts to.

"Roles" are those that matter: login roles that are not superusers (superusers read
everything already), and roles some such login is a member of (it may SET ROLE to them).
PUBLIC counts as one more reader when the column is readable by PUBLIC.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

LIST_MAX = 20

_RELEVANT = (
    "(r.rolcanlogin OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles l WHERE l.rolcanlogin"
    " AND NOT l.rolsuper AND pg_catalog.pg_has_role(l.oid, r.oid, 'MEMBER')))"
)
"""Whether role ``r`` can act for a session: it logs in, or a non-superuser login may
become it."""


def _public_reads(relid: int, column: str) -> sql.Composed:
    """Whether PUBLIC may SELECT ``column`` of ``relid`` (a table or a column grant)."""
    return sql.SQL(
        "(EXISTS (SELECT 1 FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x"
        " WHERE c.oid = {rel} AND x.grantee = 0 AND x.privilege_type = 'SELECT')"
        " OR EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a, pg_catalog.aclexplode(a.attacl) x"
        " WHERE a.attrelid = {rel} AND a.attname = {col} AND x.grantee = 0"
        " AND x.privilege_type = 'SELECT'))"
    ).format(rel=sql.Literal(relid), col=sql.Literal(column))


def readers_not_of(lo: sql.Composable, relid: int, column: str) -> sql.Composed:
    """An expression (text[]): the roles that may SELECT ``column`` of ``relid`` but may
    not read LO ``lo``, ``PUBLIC`` first when PUBLIC may read the column and not the LO.
    Empty when the LO does not exist or ``lo_compat_privileges`` is on."""
    return sql.SQL(
        "(CASE WHEN pg_catalog.current_setting('lo_compat_privileges') = 'on'"
        " THEN '{{}}'::text[] ELSE ARRAY("
        "SELECT 'PUBLIC' FROM pg_catalog.pg_largeobject_metadata m WHERE m.oid = {lo}"
        " AND {public} AND NOT EXISTS (SELECT 1 FROM pg_catalog.aclexplode(m.lomacl) x"
        "  WHERE x.grantee = 0 AND x.privilege_type = 'SELECT')"
        " UNION ALL "
        "(SELECT r.rolname::text FROM pg_catalog.pg_largeobject_metadata m, pg_catalog.pg_roles r"
        " WHERE m.oid = {lo} AND NOT r.rolsuper AND " + _RELEVANT + ""
        " AND pg_catalog.has_column_privilege(r.oid, {rel}::oid, {col}, 'SELECT')"
        " AND NOT pg_catalog.pg_has_role(r.oid, m.lomowner, 'USAGE')"
        " AND NOT EXISTS (SELECT 1 FROM pg_catalog.aclexplode(m.lomacl) x"
        "  WHERE x.privilege_type = 'SELECT'"
        "  AND (x.grantee = 0 OR pg_catalog.pg_has_role(r.oid, x.grantee, 'USAGE')))"
        " ORDER BY 1)) END)"
    ).format(lo=lo, public=_public_reads(relid, column), rel=sql.Literal(relid),
             col=sql.Literal(column))  # fmt: skip


@dataclass(frozen=True)
class Widening:
    """LOs a column names whose readers are fewer than the column's: moving them into the
    column would let ``roles`` read their bytes."""

    los: int
    sample: tuple[int, ...]
    roles: tuple[str, ...]

    def __bool__(self) -> bool:
        return self.los > 0

    def describe(self) -> str:
        from pgblobdump.migrate.refs import listed

        who = ", ".join(self.roles[:LIST_MAX]) + (" ..." if len(self.roles) > LIST_MAX else "")
        return (
            f"{self.los:,} LOs ({listed(self.sample, self.los)}) may not be read by {who},"
            " who may read the column"
        )


def widening(conn: psycopg.Connection, relid: int, column: str, oids: sql.Composable) -> Widening:
    """The LOs among ``oids`` (a query of column ``o``) that moving into ``column`` of
    ``relid`` would widen access to. The readers are compared once per distinct owner and
    ACL of all LOs (one pass over pg_largeobject_metadata, no join): when no such group
    widens, which is the usual case, the column is not read at all."""
    conn.execute("DROP TABLE IF EXISTS pg_temp.pgbd_widening")
    # aclitem has no ordering, only hashing: the grouping is hashed (no ::text per row).
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE pgbd_widening AS SELECT g.owner, g.acl, {roles} AS roles"
            " FROM (SELECT m.lomowner AS owner, m.lomacl AS acl, min(m.oid) AS any_oid"
            " FROM pg_catalog.pg_largeobject_metadata m GROUP BY 1, 2) g"
        ).format(roles=readers_not_of(sql.SQL("g.any_oid"), relid, column))
    )
    try:
        conn.execute("DELETE FROM pg_temp.pgbd_widening WHERE cardinality(roles) = 0")
        row = conn.execute("SELECT count(*) FROM pg_temp.pgbd_widening").fetchone()
        if not (row and row[0]):
            return Widening(0, (), ())
        conn.execute("DROP TABLE IF EXISTS pg_temp.pgbd_widened")
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE pgbd_widened AS SELECT m.oid, w.roles"
                " FROM (SELECT DISTINCT o FROM ({}) s) r"
                " JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = r.o"
                " JOIN pg_temp.pgbd_widening w ON w.owner = m.lomowner"
                " AND w.acl IS NOT DISTINCT FROM m.lomacl"
            ).format(oids)
        )
        row = conn.execute(
            "SELECT count(*), ARRAY(SELECT DISTINCT unnest(roles) FROM pg_temp.pgbd_widened"
            " ORDER BY 1) FROM pg_temp.pgbd_widened"
        ).fetchone()
        assert row is not None
        sample = conn.execute(
            "SELECT oid FROM pg_temp.pgbd_widened ORDER BY 1 LIMIT %s", (LIST_MAX,)
        ).fetchall()
        conn.execute("DROP TABLE pg_temp.pgbd_widened")
        if not row[0]:
            return Widening(0, (), ())
        return Widening(int(row[0]), tuple(int(r[0]) for r in sample), tuple(row[1] or ()))
    finally:
        conn.execute("DROP TABLE IF EXISTS pg_temp.pgbd_widening")


@dataclass(frozen=True)
class NewLoAccess:
    """What a new LO made from a bytea value gets: an owner, and SELECT for ``readers``
    (role names, ``PUBLIC`` included) that may read the column today."""

    owner: str
    readers: tuple[str, ...]

    def note(self) -> str:
        who = ", ".join(self.readers) if self.readers else "nobody else"
        return f"the new LOs belong to {self.owner}, with SELECT for {who}"


def new_lo_access(
    conn: psycopg.Connection, relid: int, column: str, owner: str | None
) -> NewLoAccess:
    """The owner (``owner``, or the table's) and the column's grantees of SELECT (table
    grants and this column's grants). Raises DatabaseError when this role may not give
    LOs to ``owner``."""
    from pgblobdump.errors import DatabaseError, NotFound

    row = conn.execute(
        "SELECT o.name, ARRAY(SELECT DISTINCT CASE WHEN x.grantee = 0 THEN 'PUBLIC'"
        "  ELSE pg_get_userbyid(x.grantee) END"
        "  FROM (SELECT c.relowner AS grantee, 'SELECT' AS privilege_type"
        "   UNION ALL SELECT g.grantee, g.privilege_type FROM aclexplode(c.relacl) g"
        "   UNION ALL SELECT g.grantee, g.privilege_type FROM pg_attribute a,"
        "    aclexplode(a.attacl) g WHERE a.attrelid = c.oid AND a.attname = %(col)s) x"
        "  WHERE x.privilege_type = 'SELECT'"
        "  AND (x.grantee = 0 OR pg_get_userbyid(x.grantee) <> o.name) ORDER BY 1)"
        " FROM pg_class c, LATERAL (SELECT coalesce(%(o)s, pg_get_userbyid(c.relowner))"
        " AS name) o WHERE c.oid = %(rel)s",
        {"o": owner, "col": column, "rel": relid},
    ).fetchone()
    assert row is not None
    who = str(row[0])
    ok = conn.execute(
        "SELECT r.oid IS NOT NULL, coalesce(pg_has_role(r.oid, 'MEMBER'), false)"
        " OR current_setting('is_superuser') = 'on'"
        " FROM (SELECT 1) one LEFT JOIN pg_roles r ON r.rolname = %s",
        (who,),
    ).fetchone()
    assert ok is not None
    if not ok[0]:
        raise NotFound(f"no role {who} (from --owner)")
    if not ok[1]:
        raise DatabaseError(
            f"this role may not give LOs to {who}: it must be a member of {who}"
            " (GRANT {who} TO this role), or name another with --owner"
        )
    return NewLoAccess(who, tuple(str(r) for r in row[1]))


def lo_maker_ddl(fn: sql.Identifier, access: NewLoAccess) -> list[sql.Composed]:
    """A function ``fn(bytea) -> oid`` making a new LO of the bytes, owned and granted as
    ``access`` says; only its owner (the migrating role) may call it."""
    grant: sql.Composable = sql.SQL("")
    if access.readers:
        grantees = sql.SQL(", ").join(
            sql.SQL("PUBLIC") if r == "PUBLIC" else sql.Identifier(r) for r in access.readers
        )
        grant = sql.SQL("EXECUTE 'GRANT SELECT ON LARGE OBJECT ' || o || {g};").format(
            g=sql.Literal(" TO " + grantees.as_string(None))
        )
    give = sql.SQL(
        "IF current_user <> {owner} THEN EXECUTE 'ALTER LARGE OBJECT ' || o || {to}; END IF;"
    ).format(
        owner=sql.Literal(access.owner),
        to=sql.Literal(" OWNER TO " + sql.Identifier(access.owner).as_string(None)),
    )
    return [
        sql.SQL(
            "CREATE FUNCTION {fn}(b bytea) RETURNS oid LANGUAGE plpgsql"
            " SET search_path = pg_catalog, pg_temp AS $pgbd$ DECLARE o oid; BEGIN"
            " IF b IS NULL THEN RETURN NULL; END IF;"
            " o := pg_catalog.lo_from_bytea(0, b); {grant} {give} RETURN o; END $pgbd$"
        ).format(fn=fn, grant=grant, give=give),
        sql.SQL("REVOKE ALL ON FUNCTION {}(bytea) FROM PUBLIC").format(fn),
    ]
