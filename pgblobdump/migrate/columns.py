"""Which column a migration is about: ``[schema.]table.column`` parsed like SQL, resolved in
the catalog, with everything the switch has to carry over (NOT NULL, default, comment,
privileges) and everything that depends on it.

Names follow PostgreSQL's rules: unquoted parts fold to lower case, ``"Quoted"`` parts are
taken as written (``""`` is a quote inside one), and a table without a schema is found
through the search path, as psql would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError, NotFound, UsageError
from pgblobdump.migrate import forms

LO_TYPES = ("oid", "lo")
"""Column types that hold LO references: ``oid`` and the ``lo`` extension's domain."""


def split_name(spec: str) -> list[str]:
    """``a."B.c".d`` -> ``["a", "B.c", "d"]``: dots outside quotes split, unquoted parts fold."""
    parts: list[str] = []
    i, n = 0, len(spec)
    while True:
        if i < n and spec[i] == '"':
            j, word = i + 1, []
            while True:
                k = spec.find('"', j)
                if k < 0:
                    raise UsageError(f"{spec!r}: a quote is not closed")
                word.append(spec[j:k])
                if spec[k + 1 : k + 2] == '"':
                    word.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            parts.append("".join(word))
        else:
            k = spec.find(".", i)
            end = n if k < 0 else k
            raw = spec[i:end]
            if not raw or '"' in raw or raw.strip() != raw:
                raise UsageError(f"{spec!r} is not [schema.]table.column")
            parts.append(raw.lower())
            i = end
        if i == n:
            return parts
        if spec[i] != ".":
            raise UsageError(f"{spec!r} is not [schema.]table.column")
        i += 1


@dataclass(frozen=True)
class Key:
    """The primary key: its columns and their types (``format_type``), in index order."""

    names: tuple[str, ...]
    types: tuple[str, ...]

    def columns(self) -> sql.Composed:
        return sql.SQL(", ").join(sql.Identifier(n) for n in self.names)

    def row(self, prefix: str = "") -> sql.Composed:
        """``(k1, k2)`` (qualified by ``prefix.`` when given), for row comparisons; a
        one-column key is just the column (a one-element ROW() is a record, not a value)."""
        return _row(
            [sql.Identifier(prefix, n) if prefix else sql.Identifier(n) for n in self.names]
        )

    def as_text(self) -> sql.Composed:
        """``ARRAY[k1::text, k2::text]``: a key as stored in the state table."""
        return sql.SQL("ARRAY[{}]").format(
            sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(n)) for n in self.names)
        )

    def from_text(self, placeholder: str) -> sql.Composed:
        """``(p[1]::t1, p[2]::t2)`` for a text[] parameter: a key back from the state."""
        return _row([
            sql.SQL("({}::text[])[{}]::{}").format(
                sql.Placeholder(placeholder), sql.Literal(i + 1), sql.SQL(t)
            )
            for i, t in enumerate(self.types)
        ])  # fmt: skip

    def from_array(self, column: str) -> sql.Composed:
        """``c[1]::t1, c[2]::t2``: a key from a text[] column, as a select list."""
        return sql.SQL(", ").join(
            sql.SQL("({}[{}])::{}").format(sql.Identifier(column), sql.Literal(i + 1), sql.SQL(t))
            for i, t in enumerate(self.types)
        )


def _row(items: list[sql.Composable]) -> sql.Composed:
    if len(items) == 1:
        return sql.Composed(items)
    return sql.SQL("({})").format(sql.SQL(", ").join(items))


@dataclass(frozen=True)
class Column:
    """One column of one table, as the catalog has it."""

    relid: int
    schema: str
    table: str
    name: str
    type: str
    """``format_type`` of the column: ``oid``, ``lo``, ``bytea``, ..."""
    base_type: str
    """The type under any domain: ``oid`` for ``lo``."""
    not_null: bool
    default: str | None
    comment: str | None
    key: Key | None
    owner_ok: bool
    """Whether the connected role may ALTER the table (owns it, or is a member of its owner)."""
    grants: tuple[str, ...] = field(default=())
    """Column-level GRANT statements to carry over to the new column."""
    partitioning: str = ""
    """``partitioned table``, ``partition of T``, or empty for a plain table."""

    @property
    def qualified(self) -> str:
        """``schema.table.column`` quoted where needed, for messages and the state table."""
        return ".".join(quote(p) for p in (self.schema, self.table, self.name))

    @property
    def form(self) -> forms.Form:
        """How its values name LOs (``forms``); ``oid`` for a type whose values do not."""
        return forms.of_type(self.base_type) or forms.OID

    @property
    def table_name(self) -> str:
        return f"{quote(self.schema)}.{quote(self.table)}"

    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.table)


def quote(name: str) -> str:
    """An identifier as psql shows it: bare when it may be, quoted otherwise."""
    bare = name.isidentifier() and name == name.lower() and name.isascii()
    return name if bare else '"' + name.replace('"', '""') + '"'


def resolve(conn: psycopg.Connection, spec: str) -> Column:
    """The column ``spec`` names, or NotFound saying which part is missing."""
    parts = split_name(spec)
    if len(parts) == 2:
        table_sql, column = sql.Identifier(parts[0]), parts[1]
    elif len(parts) == 3:
        table_sql, column = sql.Identifier(parts[0], parts[1]), parts[2]
    else:
        raise UsageError(f"{spec!r} is not [schema.]table.column")
    row = conn.execute(
        sql.SQL("SELECT to_regclass({})::oid").format(sql.Literal(table_sql.as_string(conn)))
    ).fetchone()
    if row is None or row[0] is None:
        raise NotFound(f"no table {'.'.join(quote(p) for p in parts[:-1])} (from {spec!r})")
    return describe(conn, int(row[0]), column)


def describe(conn: psycopg.Connection, relid: int, column: str) -> Column:
    """Everything about ``relid``'s column ``column`` that a migration needs."""
    row = conn.execute(
        """
        SELECT n.nspname, c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod),
               format_type(coalesce(nullif(t.typbasetype, 0), a.atttypid), NULL),
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid),
               col_description(c.oid, a.attnum),
               pg_has_role(c.relowner, 'USAGE'), a.attnum, a.attgenerated <> '',
               CASE WHEN c.relkind = 'p' THEN 'partitioned table' WHEN c.relispartition THEN
                 'partition of ' || (SELECT i.inhparent::regclass::text FROM pg_inherits i
                                     WHERE i.inhrelid = c.oid LIMIT 1) ELSE '' END
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = %(col)s
             AND a.attnum > 0 AND NOT a.attisdropped
        LEFT JOIN pg_type t ON t.oid = a.atttypid
        LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
        WHERE c.oid = %(rel)s
        """,
        {"rel": relid, "col": column},
    ).fetchone()
    if row is None:
        raise NotFound(f"table with OID {relid} no longer exists")
    (schema, table, kind, name, type_, base, not_null, default, comment, owner_ok, attnum,
     gen, partitioning) = row  # fmt: skip
    where = f"{quote(schema)}.{quote(table)}"
    if kind not in ("r", "p"):
        raise UsageError(f"{where} is not a table (relkind {kind})")
    if name is None:
        raise NotFound(f"no column {where}.{quote(column)}")
    if gen:
        raise UsageError(f"{where}.{quote(name)} is a generated column")
    return Column(
        relid=relid, schema=schema, table=table, name=name, type=type_, base_type=base,
        not_null=bool(not_null), default=default, comment=comment,
        key=primary_key(conn, relid), owner_ok=bool(owner_ok),
        grants=column_grants(conn, relid, int(attnum)), partitioning=partitioning,
    )  # fmt: skip


def primary_key(conn: psycopg.Connection, relid: int) -> Key | None:
    rows = conn.execute(
        """
        SELECT a.attname, format_type(a.atttypid, a.atttypmod)
        FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid
             AND a.attnum = ANY (i.indkey::int2[])
        WHERE i.indrelid = %s AND i.indisprimary
        ORDER BY array_position(i.indkey::int2[], a.attnum)
        """,
        (relid,),
    ).fetchall()
    if not rows:
        return None
    return Key(tuple(r[0] for r in rows), tuple(r[1] for r in rows))


def column_grants(conn: psycopg.Connection, relid: int, attnum: int) -> tuple[str, ...]:
    """``(privilege, grantee, grantable)`` of a column's own ACL, as GRANT clauses."""
    rows = conn.execute(
        """
        SELECT x.privilege_type,
               CASE WHEN x.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END,
               x.is_grantable
        FROM pg_attribute a, aclexplode(a.attacl) x
        LEFT JOIN pg_roles r ON r.oid = x.grantee
        WHERE a.attrelid = %s AND a.attnum = %s
        """,
        (relid, attnum),
    ).fetchall()
    return tuple(f"{p}|{g}|{'y' if w else 'n'}" for p, g, w in rows)


@dataclass(frozen=True)
class Dependant:
    """Something that depends on the column: a view, an index, a constraint, a trigger..."""

    kind: str
    name: str
    blocking: bool
    """Whether the switch cannot keep it working (a view would keep reading the old column)."""


def dependants(conn: psycopg.Connection, col: Column) -> list[Dependant]:
    """What depends on the column, apart from our own sync triggers and ``lo_manage``."""
    rows = conn.execute(
        """
        SELECT CASE
                 WHEN d.classid = 'pg_rewrite'::regclass THEN 'view'
                 WHEN d.classid = 'pg_class'::regclass THEN 'index'
                 WHEN d.classid = 'pg_constraint'::regclass THEN 'constraint'
                 WHEN d.classid = 'pg_trigger'::regclass THEN 'trigger'
                 WHEN d.classid = 'pg_policy'::regclass THEN 'policy'
                 WHEN d.classid = 'pg_statistic_ext'::regclass THEN 'statistics'
                 ELSE d.classid::regclass::text END,
               pg_describe_object(d.classid, d.objid, d.objsubid),
               CASE WHEN d.classid = 'pg_class'::regclass THEN
                      -- only a plain index of this one column goes with it harmlessly;
                      -- a partial or expression index, or one of other columns too,
                      -- would be lost (a UNIQUE (a) WHERE col IS NOT NULL, say)
                      (SELECT NOT (i.indnatts = 1 AND i.indkey[0] = d.refobjsubid
                                   AND i.indpred IS NULL AND i.indexprs IS NULL)
                       FROM pg_index i WHERE i.indexrelid = d.objid)
                    WHEN d.classid = 'pg_constraint'::regclass THEN
                      (SELECT con.contype = 'f' OR cardinality(con.conkey) > 1
                       FROM pg_constraint con WHERE con.oid = d.objid)
                    WHEN d.classid = 'pg_trigger'::regclass THEN
                      (SELECT t.tgname NOT LIKE 'pgbd\\_sync\\_%%'
                              AND p.proname <> 'lo_manage'
                       FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
                       WHERE t.oid = d.objid)
                    ELSE true END
        FROM pg_depend d
        WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = %s
          AND d.refobjsubid = (SELECT attnum FROM pg_attribute
                               WHERE attrelid = %s AND attname = %s)
          AND d.deptype IN ('n', 'a')
          -- the column's default: the switch drops it, or carries it to text
          AND d.classid <> 'pg_attrdef'::regclass
        ORDER BY 1, 2
        """,
        (col.relid, col.relid, col.name),
    ).fetchall()
    out = [Dependant(kind, name, bool(blocking)) for kind, name, blocking in rows]
    return [d for d in out if not (d.kind == "trigger" and not d.blocking)]


def lo_manage_triggers(conn: psycopg.Connection, col: Column) -> list[str]:
    """Names of the ``lo_manage`` triggers on the column's table that manage the column."""
    rows = conn.execute(
        """
        SELECT t.tgname, t.tgargs FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
        WHERE t.tgrelid = %s AND p.proname = 'lo_manage' AND NOT t.tgisinternal
        """,
        (col.relid,),
    ).fetchall()
    return [name for name, args in rows if bytes(args).split(b"\0")[0].decode() == col.name]


def check_migratable(col: Column, to: str) -> None:
    """UsageError unless ``col`` can go ``to`` ``bytea``, ``lo``, ``text`` or ``oid`` (by
    type and rights)."""
    form = forms.of_type(col.base_type)
    takes = {
        "bytea": ("oid or lo, an integer, numeric or text type holding OIDs",
                  form is not None),
        "lo": ("bytea", col.base_type == "bytea"),
        "text": ("text, varchar or char holding OIDs", form is not None and form.is_text),
        "oid": ("an integer, numeric or text type holding OIDs",
                form is not None and form.name != "oid"),
        "s3": ("oid or lo, an integer, numeric or text type holding OIDs", form is not None),
        "s3lo": ("text or varchar holding object keys", form is not None and form.is_text),
    }  # fmt: skip
    kinds, ok = takes[to]
    if not ok:
        said = {"s3": "s3://", "s3lo": "lo --from s3://"}.get(to, to)
        raise UsageError(
            f"{col.qualified} is {col.type}: --to {said} takes {kinds}, so nothing to migrate"
        )
    if not col.owner_ok:
        raise DatabaseError(f"must own table {col.table_name} to migrate {col.qualified}")
    if col.partitioning:
        # A new column goes to every partition at once, and a partition cannot have one
        # of its own: neither the online batches nor the switch can work partition by
        # partition, so these are refused before anything changes.
        raise UsageError(
            f"{col.table_name} is a {col.partitioning}: migrate cannot move a column of a"
            " partitioned table (partitions share their columns); copy the data to a plain"
            " table, or migrate before partitioning"
        )
