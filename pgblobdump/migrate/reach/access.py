"""Who may read what: a migration must not let any role read bytes it could not read before.

An LO carries its own ACL; a bytea value is readable by whoever may SELECT its column. So
moving an LO into a column widens access when some role may read the column but not the LO
(the LO's owner, its grantees and their members may; ``lo_compat_privileges = on`` in a
role's sessions lets it read every LO, and then nothing can widen for it). Such LOs are
reported by ``plan``, refused by ``run`` unless ``--allow-acl-widening``, and never copied
by the sync triggers. The column is read through more than its own grants: views over it
and SECURITY DEFINER functions that read it hand its values out too (``paths``), so their
users count as its readers (``Reach``).

``lo_compat_privileges`` is judged for each reader as that reader's sessions see it: the
role-and-database setting, the role's, the database's, then the server's own value. The
migrating session's value says nothing of another role's (it may come from the
migrator's own ``ALTER ROLE ... SET``). The server's value is taken from this session
only where it came from the server (its configuration or command line), or read from
``pg_file_settings`` where that is allowed; otherwise it is taken as off, the default,
which can only report more widening, never less.

The other way, a new LO made from a bytea value is given to the table's owner (or
``--owner``) with SELECT for the roles the table grants SELECT on the column, so the
column's readers keep reading it and nobody else starts to. That cannot hold for a table
with row-level security: a policy lets a reader see some rows, an LO's ACL lets it read
every LO; nor for an owner (``--owner``) that may not read every row, since an LO's owner
reads it (``new_lo_widening``).

"Roles" are those that matter: login roles that are not superusers (superusers read
everything already), and roles some such login is a member of (it may SET ROLE to them).
PUBLIC counts as one more reader when the column is readable by PUBLIC.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.migrate.reach import paths as paths
from pgblobdump.migrate.reach.paths import Path

LIST_MAX = 20

_RELEVANT = (
    "(r.rolcanlogin OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles l WHERE l.rolcanlogin"
    " AND NOT l.rolsuper AND pg_catalog.pg_has_role(l.oid, r.oid, 'MEMBER')))"
)
"""Whether role ``r`` can act for a session: it logs in, or a non-superuser login may
become it."""

_ON = "('t', 'tr', 'tru', 'true', 'y', 'ye', 'yes', 'on', '1')"
"""The spellings of a true boolean setting (the server's parse_bool)."""

SERVER_SOURCES = ("default", "configuration file", "command line", "environment variable")
"""Sources of a session's setting that mean it is the server's own value."""


def _setting(role: sql.Composable, database: sql.Composable) -> sql.Composed:
    """``lo_compat_privileges`` as pg_db_role_setting holds it for ``role`` in
    ``database`` (0 for any), as a boolean; NULL when not set there."""
    return sql.SQL(
        "(SELECT pg_catalog.lower(pg_catalog.btrim(pg_catalog.split_part(c, '=', 2))) IN " + _ON
        + " FROM pg_catalog.pg_db_role_setting s, pg_catalog.unnest(s.setconfig) c"
        " WHERE s.setrole = {r} AND s.setdatabase = {d}"
        " AND pg_catalog.lower(pg_catalog.split_part(c, '=', 1)) = 'lo_compat_privileges'"
        " LIMIT 1)"
    ).format(r=role, d=database)  # fmt: skip


_DB = sql.SQL(
    "(SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())"
)


def compat_of(role: sql.Composable, server: bool) -> sql.Composed:
    """Whether the sessions of login ``role`` run with ``lo_compat_privileges`` on: its
    setting in this database, its own, this database's, every role's (``ALTER ROLE ALL``),
    else the server's (``server``), the order in which the server applies them."""
    zero = sql.SQL("0")
    return sql.SQL("coalesce({}, {}, {}, {}, {})").format(
        _setting(role, _DB), _setting(role, zero), _setting(zero, _DB), _setting(zero, zero),
        sql.Literal(server),
    )  # fmt: skip


def compat_as(role: sql.Composable, server: bool) -> sql.Composed:
    """Whether every session that may act as ``role`` has ``lo_compat_privileges`` on: the
    sessions of each non-superuser login that is ``role`` or a member of it (a member's
    sessions get its own settings, not the role's)."""
    return sql.SQL(
        "NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles l WHERE l.rolcanlogin"
        " AND NOT l.rolsuper AND pg_catalog.pg_has_role(l.oid, {r}, 'MEMBER')"
        " AND NOT {c})"
    ).format(r=role, c=compat_of(sql.SQL("l.oid"), server))


def compat_public(server: bool) -> sql.Composed:
    """Whether a role with no setting of its own (PUBLIC: any role, a new one too) has
    ``lo_compat_privileges`` on in this database."""
    zero = sql.SQL("0")
    return sql.SQL("coalesce({}, {}, {})").format(
        _setting(zero, _DB), _setting(zero, zero), sql.Literal(server)
    )


def server_compat(conn: psycopg.Connection) -> bool:
    """The server's own ``lo_compat_privileges``, beneath role and database settings; off
    when this session cannot tell (see the module's note)."""
    row = conn.execute(
        "SELECT setting, source FROM pg_catalog.pg_settings WHERE name = 'lo_compat_privileges'"
    ).fetchone()
    if row is not None and row[1] in SERVER_SOURCES:
        return str(row[0]) == "on"
    try:
        with conn.transaction():
            found = conn.execute(
                "SELECT setting FROM pg_catalog.pg_file_settings"
                " WHERE name = 'lo_compat_privileges' AND applied ORDER BY seqno DESC LIMIT 1"
            ).fetchone()
    except psycopg.errors.InsufficientPrivilege:
        return False
    return found is not None and str(found[0]).strip().lower() in _ON


def _public_reads(relid: int, column: str) -> sql.Composed:
    """Whether PUBLIC may SELECT ``column`` of ``relid`` (a table or a column grant)."""
    return sql.SQL(
        "(EXISTS (SELECT 1 FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) x"
        " WHERE c.oid = {rel} AND x.grantee = 0 AND x.privilege_type = 'SELECT')"
        " OR EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a, pg_catalog.aclexplode(a.attacl) x"
        " WHERE a.attrelid = {rel} AND a.attname = {col} AND x.grantee = 0"
        " AND x.privilege_type = 'SELECT'))"
    ).format(rel=sql.Literal(relid), col=sql.Literal(column))


@dataclass(frozen=True)
class Reach:
    """Everything through which ``column`` of ``relid`` is read: its grants, and
    ``paths`` (views over it, SECURITY DEFINER routines reading it), judged with the
    server's ``lo_compat_privileges`` ``server_compat``."""

    relid: int
    column: str
    paths: tuple[Path, ...] = ()
    server_compat: bool = False

    def readers_not_of(self, lo: sql.Composable, via: Path | None = None) -> sql.Composed:
        """An expression (text[]): the roles that may SELECT the column (or use ``via``)
        but may not read LO ``lo``, ``PUBLIC`` first when PUBLIC may and may not. Empty
        when the LO does not exist."""
        public: sql.Composable
        uses: sql.Composable
        if via is None:
            public = _public_reads(self.relid, self.column)
            uses = sql.SQL(
                "pg_catalog.has_column_privilege(r.oid, {rel}::oid, {col}, 'SELECT')"
            ).format(rel=sql.Literal(self.relid), col=sql.Literal(self.column))
        else:
            public, uses = via.public(), via.usable_by(sql.SQL("r.oid"))
        return sql.SQL(
            "ARRAY("
            "SELECT 'PUBLIC' FROM pg_catalog.pg_largeobject_metadata m WHERE m.oid = {lo}"
            " AND {public} AND NOT {public_compat}"
            " AND NOT EXISTS (SELECT 1 FROM pg_catalog.aclexplode(m.lomacl) x"
            "  WHERE x.grantee = 0 AND x.privilege_type = 'SELECT')"
            " UNION ALL "
            "(SELECT r.rolname::text"
            " FROM pg_catalog.pg_largeobject_metadata m, pg_catalog.pg_roles r"
            " WHERE m.oid = {lo} AND NOT r.rolsuper AND " + _RELEVANT + " AND {uses}"
            " AND NOT pg_catalog.pg_has_role(r.oid, m.lomowner, 'USAGE')"
            " AND NOT EXISTS (SELECT 1 FROM pg_catalog.aclexplode(m.lomacl) x"
            "  WHERE x.privilege_type = 'SELECT'"
            "  AND (x.grantee = 0 OR pg_catalog.pg_has_role(r.oid, x.grantee, 'USAGE')))"
            " AND NOT {compat}"
            " ORDER BY 1))"
        ).format(lo=lo, public=public, uses=uses, public_compat=compat_public(self.server_compat),
                 compat=compat_as(sql.SQL("r.oid"), self.server_compat))  # fmt: skip

    def any_readers_not_of(self, lo: sql.Composable) -> sql.Composed:
        """As ``readers_not_of``, through the column and every path at once; a reader
        through a path is named with it (``alice (through view public.v)``)."""
        parts: list[sql.Composable] = [self.readers_not_of(lo)]
        for p in self.paths:
            parts.append(
                sql.SQL("ARRAY(SELECT u || {tail} FROM pg_catalog.unnest({a}) u)").format(
                    tail=sql.Literal(f" (through {p})"), a=self.readers_not_of(lo, p)
                )
            )
        return sql.SQL("({})").format(sql.SQL(" || ").join(parts))


def reach(conn: psycopg.Connection, relid: int, column: str) -> Reach:
    """The column's :class:`Reach`, read from the catalogs now."""
    return Reach(relid, column, paths.find(conn, relid, column), server_compat(conn))


def _who(roles: tuple[str, ...]) -> str:
    return ", ".join(roles[:LIST_MAX]) + (" ..." if len(roles) > LIST_MAX else "")


@dataclass(frozen=True)
class Widening:
    """LOs a column names whose readers are fewer than the column's: moving them into the
    column would let ``roles`` (readers of the column) and the users of each path in
    ``through`` read their bytes."""

    los: int
    sample: tuple[int, ...]
    roles: tuple[str, ...]
    through: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``(path, roles)``: a view or SECURITY DEFINER routine, and those of its users who
    may not read some of the LOs."""

    def __bool__(self) -> bool:
        return self.los > 0

    def describe(self) -> str:
        from pgblobdump.migrate.refs import listed

        who = [f"{_who(self.roles)}, who may read the column"] if self.roles else []
        for path, roles in self.through:
            verb = "call" if path.startswith("SECURITY DEFINER") else "read"
            who.append(f"{_who(roles)}, who may {verb} {path}")
        return f"{self.los:,} LOs ({listed(self.sample, self.los)}) may not be read by " + (
            "; by ".join(who)
        )


def widening(conn: psycopg.Connection, reach: Reach, oids: sql.Composable) -> Widening:
    """The LOs among ``oids`` (a query of column ``o``) that moving into the column of
    ``reach`` would widen access to, through the column or any of its paths. The readers
    are compared once per distinct owner and ACL of all LOs (one pass over
    pg_largeobject_metadata, no join): when no such group widens, which is the usual
    case, the column is not read at all."""
    vias: list[Path | None] = [None, *reach.paths]
    cols = [sql.Identifier(f"r{i}") for i in range(len(vias))]
    conn.execute("DROP TABLE IF EXISTS pg_temp.pgbd_widening")
    # aclitem has no ordering, only hashing: the grouping is hashed (no ::text per row).
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE pgbd_widening AS SELECT g.owner, g.acl, {roles}"
            " FROM (SELECT m.lomowner AS owner, m.lomacl AS acl, min(m.oid) AS any_oid"
            " FROM pg_catalog.pg_largeobject_metadata m GROUP BY 1, 2) g"
        ).format(
            roles=sql.SQL(", ").join(
                sql.SQL("{} AS {}").format(reach.readers_not_of(sql.SQL("g.any_oid"), v), c)
                for v, c in zip(vias, cols, strict=True)
            )
        )
    )
    none = sql.SQL(" AND ").join(sql.SQL("cardinality({}) = 0").format(c) for c in cols)
    try:
        conn.execute(sql.SQL("DELETE FROM pg_temp.pgbd_widening WHERE {}").format(none))
        row = conn.execute("SELECT count(*) FROM pg_temp.pgbd_widening").fetchone()
        if not (row and row[0]):
            return Widening(0, (), ())
        conn.execute("DROP TABLE IF EXISTS pg_temp.pgbd_widened")
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE pgbd_widened AS SELECT m.oid, {w}"
                " FROM (SELECT DISTINCT o FROM ({oids}) s) r"
                " JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = r.o"
                " JOIN pg_temp.pgbd_widening w ON w.owner = m.lomowner"
                " AND w.acl IS NOT DISTINCT FROM m.lomacl"
            ).format(w=sql.SQL(", ").join(sql.SQL("w.{}").format(c) for c in cols), oids=oids)
        )
        row = conn.execute(
            sql.SQL("SELECT count(*), {} FROM pg_temp.pgbd_widened").format(
                sql.SQL(", ").join(
                    sql.SQL(
                        "ARRAY(SELECT DISTINCT unnest({c}) FROM pg_temp.pgbd_widened ORDER BY 1)"
                    ).format(c=c)
                    for c in cols
                )
            )
        ).fetchone()
        assert row is not None
        sample = conn.execute(
            "SELECT oid FROM pg_temp.pgbd_widened ORDER BY 1 LIMIT %s", (LIST_MAX,)
        ).fetchall()
        conn.execute("DROP TABLE pg_temp.pgbd_widened")
        if not row[0]:
            return Widening(0, (), ())
        through = tuple(
            (str(v), tuple(roles or ()))
            for v, roles in zip(reach.paths, row[2:], strict=True)
            if roles
        )
        return Widening(int(row[0]), tuple(int(r[0]) for r in sample), tuple(row[1] or ()), through)
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


_UNFILTERED = """
SELECT r.name FROM pg_catalog.unnest(%(names)s::text[]) r(name)
JOIN pg_catalog.pg_roles g ON g.rolname = r.name
JOIN pg_catalog.pg_class c ON c.oid = %(rel)s
WHERE NOT EXISTS (
    SELECT 1 FROM pg_catalog.pg_roles l
    WHERE (l.oid = g.oid OR (l.rolcanlogin AND pg_catalog.pg_has_role(l.oid, g.oid, 'MEMBER')))
      AND NOT (l.rolsuper OR l.rolbypassrls
               OR pg_catalog.pg_has_role(l.oid, c.relowner, 'USAGE')))
"""
"""Those of ``names`` that read every row of table ``rel`` whatever its policies: a
role row-level security does not filter (a superuser, one with BYPASSRLS itself, the
table's owner or a role with its rights; an owner under FORCE may turn it off), and so
does every login that may act as it (BYPASSRLS is not inherited: a member's sessions are
filtered by its own attributes)."""


def new_lo_widening(
    conn: psycopg.Connection, relid: int, column: str, new: NewLoAccess
) -> tuple[str, ...]:
    """The roles that new LOs made from ``column`` of ``relid`` with owner and readers
    ``new`` would let read bytes they may not read today: the owner when it may not read
    every row of the column (it reads every LO it owns), and, on a table with row-level
    security, every reader whose reads the policies filter (an LO's ACL cannot hold a
    row policy; PUBLIC always is). Empty when none."""
    row = conn.execute(
        "SELECT relrowsecurity FROM pg_catalog.pg_class WHERE oid = %s", (relid,)
    ).fetchone()
    rls = bool(row and row[0])
    owner_reads = conn.execute(
        "SELECT pg_catalog.has_column_privilege(r.oid, %s::oid, %s, 'SELECT')"
        " FROM pg_catalog.pg_roles r WHERE r.rolname = %s",
        (relid, column, new.owner),
    ).fetchone()
    named = [new.owner, *(r for r in new.readers if r != "PUBLIC")]
    whole = {
        str(r[0]) for r in conn.execute(_UNFILTERED, {"names": named, "rel": relid}).fetchall()
    }
    out: list[str] = []
    if not (owner_reads and owner_reads[0]) or (rls and new.owner not in whole):
        out.append(new.owner)
    if rls:
        out += [r for r in new.readers if r != new.owner and (r == "PUBLIC" or r not in whole)]
    return tuple(out)


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
