"""Rewrite the LO references a column holds from an OID mapping (``restore --remap``,
issue 39): the restored LOs got new OIDs, and the rows that named the old ones must name
the new ones, each value in its own form (refs/values.py), set-based: one UPDATE a column.

- ``oid``, ``lo`` and any domain over ``oid``: the new OID;
- ``int2``/``int4``: as ``oid::int4`` stores it (a new OID of 2^31 or more is written
  less 2^32, negative); ``int8``, ``numeric``: as it is;
- ``text``/``varchar``/``char``: the digits form becomes the new OID's digits (a negative
  int4-style value is written the same way: negative when the new OID is 2^31 or more);
  the file-name form ``<oid>.<ext...>`` becomes ``<new>.<ext...>``, suffixes kept exactly;
- arrays of any of these (and of domains), element by element, NULLs and order kept.

A value naming an OID the mapping does not have, or in no form, is left as it is. The
caller opens the transaction, locks (``lock``), rewrites and journals the column as done
in that same transaction, so a resumed run never rewrites a row twice. What might refuse
(privileges, row-level security, a type the new OIDs do not fit) is checked by
``resolve`` and ``check_fits`` before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError, UsageError
from pgblobdump.refs import coltype, values
from pgblobdump.refs.catalog import RLS_APPLIES

EXAMPLES = 5
"""How many dangling OIDs a Rewritten names."""


@dataclass(frozen=True)
class RewriteColumn:
    """A column whose references are to be rewritten: ``shown`` its type as ``\\d`` shows
    it, ``base`` the built-in type its values are (``oid``, ``int2``, ``int4``, ``int8``,
    ``numeric``, ``text``, ``varchar``, ``bpchar``), ``array`` an array of it (or of a
    domain over it); ``length`` the ``n`` of a ``varchar(n)``/``char(n)`` base;
    ``digits`` the ``p - s`` of a ``numeric(p, s)`` one."""

    relid: int
    schema: str
    table: str
    column: str
    shown: str
    base: str
    array: bool
    length: int | None = None
    digits: int | None = None

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}.{self.column}"

    @property
    def ident(self) -> sql.Identifier:
        """The table, quoted: ``"schema"."table"``."""
        return sql.Identifier(self.schema, self.table)


@dataclass(frozen=True)
class Rewritten:
    """What ``rewrite`` did: ``rows`` updated; ``dangling`` values of the column (after
    the rewrite) naming an OID that no LO has, ``examples`` up to EXAMPLES of those OIDs,
    ascending. Dangling values are the caller's to report, never touched."""

    rows: int
    dangling: int
    examples: tuple[int, ...]


_COLUMN = (
    """
SELECT n.nspname, c.relname, c.relkind::text, a.attgenerated <> '',
       pg_catalog.has_schema_privilege(n.oid, 'USAGE'),
       pg_catalog.has_column_privilege(c.oid, a.attnum, 'SELECT'),
       pg_catalog.has_column_privilege(c.oid, a.attnum, 'UPDATE'),
       pg_catalog.pg_has_role(c.relowner, 'USAGE')
         OR pg_catalog.has_table_privilege(c.oid, 'UPDATE')
         OR pg_catalog.has_table_privilege(c.oid, 'DELETE')
         OR pg_catalog.has_table_privilege(c.oid, 'TRUNCATE'),
"""
    + RLS_APPLIES
    + """
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
JOIN pg_catalog.pg_roles r ON r.rolname = current_user
WHERE c.oid = %s AND a.attnum = %s
"""
)
"""Column ``a`` of table ``c``: its schema and table names, the table's kind, whether
the column is generated, and what the connected role ``r`` may do: use the schema, read
and update the column, LOCK the table IN SHARE ROW EXCLUSIVE MODE (as the server asks:
its owner, or UPDATE, DELETE or TRUNCATE on the table); whether row-level security
filters what it sees of the table."""

_FIRES = """
WITH RECURSIVE tree(relid) AS (
    SELECT %(relid)s::pg_catalog.oid
  UNION
    SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.relid
), moves AS (
  SELECT EXISTS (SELECT FROM pg_catalog.pg_partitioned_table p
                 JOIN tree ON p.partrelid = tree.relid
                 JOIN pg_catalog.pg_attribute a
                   ON a.attrelid = p.partrelid AND a.attname = %(column)s
                 WHERE a.attnum = ANY (p.partattrs::pg_catalog.int2[])) AS key
)
SELECT * FROM (
  SELECT 'TRIGGER', pg_catalog.quote_ident(t.tgname), t.tgrelid::pg_catalog.regclass::text
  FROM pg_catalog.pg_trigger t JOIN tree ON t.tgrelid = tree.relid, moves
  WHERE NOT t.tgisinternal AND t.tgenabled <> 'D'
    AND ((t.tgtype & 16) <> 0 AND (pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) = 0
           OR EXISTS (SELECT FROM pg_catalog.pg_attribute a
                      WHERE a.attrelid = t.tgrelid AND a.attname = %(column)s
                        AND a.attnum = ANY (t.tgattr::pg_catalog.int2[])))
         OR (t.tgtype & 12) <> 0 AND moves.key)
  UNION ALL
  SELECT 'RULE', pg_catalog.quote_ident(w.rulename), w.ev_class::pg_catalog.regclass::text
  FROM pg_catalog.pg_rewrite w JOIN tree ON w.ev_class = tree.relid, moves
  WHERE w.ev_enabled <> 'D' AND (w.ev_type = '2' OR w.ev_type IN ('3', '4') AND moves.key)
) f ORDER BY 3, 2 LIMIT 1
"""
"""A trigger or rule (``TRIGGER``/``RULE``, its name, its table), enabled and not the
server's own (a foreign key's), that an UPDATE of ``column`` of table ``relid``, or of
a partition or inheritance child of it, sets off (and, when the column is in a partition
key, a DELETE or INSERT one: the UPDATE moves rows between partitions): code of the
table's owner, run as the rewriting role and shown each row's old OID (contrib's
``lo_manage`` unlinks the LO it names: here, another tenant's)."""

_KINDS = {
    "r": "table",
    "p": "partitioned table",
    "v": "view",
    "m": "materialized view",
    "f": "foreign table",
    "S": "sequence",
    "i": "index",
    "I": "partitioned index",
    "c": "composite type",
    "t": "TOAST table",
}


def resolve(conn: psycopg.Connection, table: str, column: str, named: str) -> RewriteColumn:
    """The column ``column`` of ``table`` (``[schema.]table`` as a user writes it), its
    type resolved as ``--referenced-by`` resolves it (refs/coltype.py). ``named`` is how
    messages name the origin (``--referenced-by docs.file``). NotFound for a missing table
    or column, UsageError for a type that holds no OID in a form we read; DatabaseError
    for what would make the rewrite fail or silently miss rows, so that the caller refuses
    before anything is written: a role that may not use the schema, read, update or lock
    it; row-level security (an UPDATE skips the rows it cannot see); a generated column;
    a column of anything but a table or a partitioned table; a trigger or rule its UPDATE
    would set off (``_FIRES``)."""
    try:
        # to_regclass itself refuses a schema the role may not use: in a savepoint, so
        # that the caller's transaction outlives the refusal
        with conn.transaction():
            relid, attnum = coltype.find(conn, table, column, named)
    except psycopg.errors.InsufficientPrivilege as e:
        raise DatabaseError(f"{named}: cannot rewrite {table}.{column}: {_first(e)}") from None
    row = conn.execute(_COLUMN, (relid, attnum)).fetchone()
    assert row is not None
    schema, name, kind, generated, usage, select, update, lockable, rls = row
    where = f"{named}: cannot rewrite {schema}.{name}.{column}"
    if kind not in ("r", "p"):
        raise DatabaseError(
            f"{where}: it is a column of a {_KINDS.get(kind, kind)}, not of a table"
        )
    if generated:
        raise DatabaseError(f"{where}: a generated column")
    if not usage:
        raise DatabaseError(f"{where}: the role has no USAGE on schema {schema}")
    for may, what in ((select, "SELECT"), (update, "UPDATE")):
        if not may:
            raise DatabaseError(f"{where}: the role has no {what} privilege on the column")
    if not lockable:
        raise DatabaseError(
            f"{where}: the role may not lock the table (UPDATE, DELETE or TRUNCATE on it)"
        )
    if rls:
        raise DatabaseError(
            f"{where}: row-level security applies to the role on {schema}.{name}"
            " (its UPDATE would skip the rows it cannot see); rewrite as the table's"
            " owner or a role with BYPASSRLS"
        )
    fires = conn.execute(_FIRES, {"relid": relid, "column": column}).fetchone()
    if fires is not None:
        kind, what, on = fires
        raise DatabaseError(
            f"{where}: {kind.lower()} {what} on {on} fires on its UPDATE (it would run as this"
            " role, on rows whose old OIDs are another tenant's LOs: lo_manage unlinks them);"
            f" ALTER TABLE {on} DISABLE {kind} {what} for the restore, and enable it after"
        )
    typ = coltype.column_type(conn, relid, attnum, named, hint="")
    return RewriteColumn(relid, schema, name, column, typ.shown, typ.base, typ.array, typ.length,
                         typ.digits)  # fmt: skip


def _first(e: psycopg.Error) -> str:
    """The server's message, its first line."""
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def lock(conn: psycopg.Connection, col: RewriteColumn) -> None:
    """``LOCK TABLE ... IN SHARE ROW EXCLUSIVE MODE``, in the caller's transaction:
    writers wait while the column is rewritten, readers do not."""
    try:
        conn.execute(sql.SQL("LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE").format(col.ident))
    except psycopg.errors.InsufficientPrivilege as e:
        raise DatabaseError(f"cannot lock {col.schema}.{col.table}: {_first(e)}") from None


def check_fits(conn: psycopg.Connection, col: RewriteColumn, highest_new: int) -> None:
    """Refuse (UsageError, before anything is written) a column the new OIDs, up to
    ``highest_new``, cannot be written into: an ``int2`` one when ``highest_new`` is over
    32767; a ``numeric(p, s)`` one when it has more digits than ``p - s``; a
    ``varchar(n)``/``char(n)`` one when a rewritten value could be longer than
    ``n`` (the new OID's digits, eleven for a negative int4-style value, and the longest
    suffix a file-name value keeps: one scan of the column)."""
    if col.base == "int2" and highest_new > 32767:
        raise UsageError(
            f"cannot rewrite {col.qualified} ({col.shown}): new OIDs up to {highest_new}"
            " do not fit in a smallint"
        )
    if col.digits is not None and len(str(highest_new)) > col.digits:
        raise UsageError(
            f"cannot rewrite {col.qualified} ({col.shown}): new OIDs up to {highest_new}"
            f" do not fit in its {col.digits} digits before the point"
        )
    if col.length is None:
        return
    value = sql.SQL("pgbd_v")
    text = sql.SQL("({})::pg_catalog.text").format(value)
    row = conn.execute(
        sql.SQL(
            "SELECT max(CASE WHEN {form} = 'file name'"
            " THEN pg_catalog.char_length({t}) - pg_catalog.strpos({t}, '.') + 1 END),"
            " bool_or(pg_catalog.left({t}, 1) = '-' AND {form} = 'digits')"
            " FROM {source}"
        ).format(form=values.text_pattern_sql(text), t=text, source=_values(col, value))
    ).fetchone()
    suffix, negative = (row[0] or 0, bool(row[1])) if row is not None else (0, False)
    digits = len(str(highest_new))
    if negative and highest_new >= 1 << 31:
        digits = max(digits, len(str(-(1 << 31))))
    if digits + suffix > col.length:
        raise UsageError(
            f"cannot rewrite {col.qualified} ({col.shown}): a rewritten value could be"
            f" {digits + suffix} characters (new OIDs up to {highest_new}"
            f"{f', suffixes up to {suffix}' if suffix else ''}), more than its {col.length}"
        )


def _values(col: RewriteColumn, value: sql.Identifier | sql.SQL) -> sql.Composed:
    """A FROM item of the column's values (an array's elements), each of its base type,
    named ``value``; NULLs included."""
    c = sql.Identifier(col.column)
    if col.array:
        return sql.SQL("{t} pgbd_t, pg_catalog.unnest(pgbd_t.{c}::{b}[]) pgbd_u({v})").format(
            t=col.ident, c=c, b=sql.Identifier("pg_catalog", col.base), v=value
        )
    return sql.SQL("(SELECT pgbd_t.{c}::{b} FROM {t} pgbd_t) pgbd_u({v})").format(
        t=col.ident, c=c, b=sql.Identifier("pg_catalog", col.base), v=value
    )


@dataclass(frozen=True)
class _Form:
    """How values of a base type are matched to the mapping and rewritten: ``key`` of a
    value and ``old`` of the mapping's old OID are equal when the value names that OID
    (the column's side left bare where its form allows, so that an index on it serves);
    ``new`` is the value rewritten to name new OID ``n``, of the base type (or text)."""

    key: _Expr
    old: _Expr
    new: _Rewrite


_Expr = Callable[[sql.Composable], sql.Composable]
_Rewrite = Callable[[sql.Composable, sql.Composable], sql.Composable]


def _cast(to: str) -> _Expr:
    return lambda v: sql.SQL("({})::{}").format(v, sql.SQL(to))


def _text_new(v: sql.Composable, n: sql.Composable) -> sql.Composable:
    """A text value in the digits or file-name form (the WHERE clause has matched it), to
    name ``n``: no regular expression again, the form told by a dot and a minus sign."""
    t = sql.SQL("({})::pg_catalog.text").format(v)
    return sql.SQL(
        "(CASE WHEN pg_catalog.strpos({t}, '.') > 0"
        " THEN ({n})::pg_catalog.text || pg_catalog.substr({t}, pg_catalog.strpos({t}, '.'))"
        " WHEN pg_catalog.left({t}, 1) = '-' THEN ({n})::pg_catalog.int4::pg_catalog.text"
        " ELSE ({n})::pg_catalog.text END)"
    ).format(t=t, n=n)


_TEXT = _Form(coltype.READINGS["text"], lambda m: m, _text_new)

FORMS: dict[str, _Form] = {
    "oid": _Form(lambda v: v, lambda m: m, lambda v, n: n),
    # v = old::int4 exactly when v names old as values.from_int reads an int2/int4: the
    # oid -> int4 cast wraps as oid::int4 stored it, and no old OID casts to 0
    "int2": _Form(
        lambda v: v,
        _cast("pg_catalog.int4"),
        lambda v, n: _cast("pg_catalog.int4::pg_catalog.int2")(n),
    ),
    "int4": _Form(lambda v: v, _cast("pg_catalog.int4"), lambda v, n: _cast("pg_catalog.int4")(n)),
    "int8": _Form(lambda v: v, _cast("pg_catalog.int8"), lambda v, n: _cast("pg_catalog.int8")(n)),
    # a numeric names an OID when it is that whole number (5.0 names 5): equality says it
    "numeric": _Form(
        lambda v: v,
        _cast("pg_catalog.int8::pg_catalog.numeric"),
        lambda v, n: _cast("pg_catalog.int8::pg_catalog.numeric")(n),
    ),
    "text": _TEXT,
    "varchar": _TEXT,
    "bpchar": _TEXT,
}
"""Each base type's _Form."""


def rewrite(
    conn: psycopg.Connection, col: RewriteColumn, mapping: sql.Composable, count: bool = True
) -> Rewritten:
    """Rewrite the values of ``col`` that name an old OID of ``mapping`` (a relation
    usable in FROM, columns ``old oid`` and ``new oid``, ``old`` unique) to name its new
    one, each in its own form; then count the column's values naming an OID no LO has.

    One UPDATE, in the caller's transaction, touching only the rows that name a mapped
    OID (an array's row when some element does: every element rewritten in one
    expression, NULLs and order kept). A table needs no primary key: rows are found by
    the predicate. A multi-dimensional array (or one not starting at 1) naming a mapped
    OID is refused (DatabaseError) rather than flattened; so is an UPDATE the server
    refuses (a domain's CHECK, a trigger)."""
    if col.array:
        _refuse_shapes(conn, col, FORMS[col.base], mapping)
    try:
        if not col.array and FORMS[col.base] is _TEXT:
            # the OID's own digits, as most rows hold them, by text equality (the naive
            # statement's plan, no regular expression); then the other forms
            rows = conn.execute(_canonical(col, mapping)).rowcount
            rows += conn.execute(statement(col, mapping, canonical=False)).rowcount
        else:
            rows = conn.execute(statement(col, mapping)).rowcount
    except psycopg.errors.Error as e:
        raise DatabaseError(f"cannot rewrite {col.qualified}: {_first(e)}") from None
    if not count:  # the caller looks once at the end (``after``): one pass, not two
        return Rewritten(max(rows, 0), 0, ())
    dangling, examples = _dangling(conn, col)
    return Rewritten(max(rows, 0), dangling, examples)


CANONICAL = r"^[1-9][0-9]*$"
"""A text value that is an OID's digits as ``oid::text`` writes them (no sign, no leading
zero): what ``_canonical`` rewrites by text equality."""


def _canonical(col: RewriteColumn, mapping: sql.Composable) -> sql.Composed:
    """The text column's rows holding a mapped OID's digits as ``oid::text`` writes them,
    rewritten by text equality: a hash join on the text, as the naive statement does."""
    c = sql.Identifier(col.column)
    return sql.SQL(
        "UPDATE {t} pgbd_t SET {c} = (pgbd_m.new)::pg_catalog.text FROM {m} pgbd_m"
        " WHERE (pgbd_t.{c})::pg_catalog.text = (pgbd_m.old)::pg_catalog.text"
    ).format(t=col.ident, c=c, m=mapping)


def statement(col: RewriteColumn, mapping: sql.Composable, canonical: bool = True) -> sql.Composed:
    """The UPDATE that rewrites ``col`` from ``mapping`` (as ``rewrite`` runs it). For an
    ``oid`` column it is the naive ``UPDATE t SET c = m.new FROM mapping m WHERE c =
    m.old``; for an integer one the mapping's side is cast, so that the column's stays
    bare (an index on it serves); a text one's regular expressions run once a row."""
    form = FORMS[col.base]
    c = sql.Identifier(col.column)
    base = sql.Identifier("pg_catalog", col.base)
    if col.array:
        # One pass: every element joined to the mapping at once (a hash of it, not a
        # lookup per row), each row's array rebuilt by position, only rows with a hit
        # kept; then those rows updated by ctid (no writer moves a row: the caller locks
        # the table against them).
        hit = sql.SQL("{k} = {o}").format(
            k=form.key(sql.SQL("pgbd_u.e")), o=form.old(sql.SQL("pgbd_m.old"))
        )
        return sql.SQL(
            "UPDATE {t} pgbd_t SET {c} = pgbd_x.a FROM (SELECT pgbd_s.ctid AS tid,"
            " pg_catalog.array_agg(CASE WHEN pgbd_m.old IS NULL THEN pgbd_u.e ELSE {new} END"
            " ORDER BY pgbd_u.i) AS a FROM {t} pgbd_s CROSS JOIN LATERAL"
            " pg_catalog.unnest(pgbd_s.{c}::{b}[]) WITH ORDINALITY pgbd_u(e, i)"
            " LEFT JOIN {m} pgbd_m ON {hit} GROUP BY pgbd_s.ctid"
            " HAVING pg_catalog.bool_or(pgbd_m.old IS NOT NULL)) pgbd_x"
            " WHERE pgbd_t.ctid = pgbd_x.tid"
        ).format(
            t=col.ident,
            c=c,
            b=base,
            m=mapping,
            hit=hit,
            new=form.new(sql.SQL("pgbd_u.e"), sql.SQL("pgbd_m.new")),
        )
    # an oid column (or a domain over oid) compares as it is: the naive statement's plan
    value: sql.Composable = sql.SQL("pgbd_t.{}").format(c)
    if col.base != "oid":
        value = sql.SQL("{}::{}").format(value, base)
    # ``canonical`` False: a text column's rows other than _canonical's (which ran first)
    skip: sql.Composable = sql.SQL("")
    if not canonical:
        skip = sql.SQL("({})::pg_catalog.text !~ {} AND ").format(value, sql.Literal(CANONICAL))
    return sql.SQL(
        "UPDATE {t} pgbd_t SET {c} = {new} FROM {m} pgbd_m WHERE {skip}{k} = {o}"
    ).format(
        t=col.ident,
        c=c,
        m=mapping,
        new=form.new(value, sql.SQL("pgbd_m.new")),
        skip=skip,
        k=form.key(value),
        o=form.old(sql.SQL("pgbd_m.old")),
    )


def _refuse_shapes(
    conn: psycopg.Connection, col: RewriteColumn, form: _Form, mapping: sql.Composable
) -> None:
    """DatabaseError when a row of the array column ``col`` that names a mapped OID holds
    a multi-dimensional array, or one whose subscripts do not start at 1: rewritten
    element by element it would come back flat, or renumbered."""
    c = sql.Identifier(col.column)
    row = conn.execute(
        sql.SQL(
            # the shapes first (OFFSET 0 keeps them first): only those rows are joined
            "SELECT pg_catalog.array_dims(pgbd_t.{c}) FROM (SELECT pgbd_s.{c} FROM {t} pgbd_s"
            " WHERE pg_catalog.array_ndims(pgbd_s.{c}) > 1"
            " OR pg_catalog.array_lower(pgbd_s.{c}, 1) <> 1 OFFSET 0) pgbd_t"
            " WHERE EXISTS (SELECT FROM pg_catalog.unnest(pgbd_t.{c}::{b}[]) pgbd_u(e)"
            " JOIN {m} pgbd_m ON {k} = {o}) LIMIT 1"
        ).format(
            c=c,
            t=col.ident,
            b=sql.Identifier("pg_catalog", col.base),
            m=mapping,
            k=form.key(sql.SQL("pgbd_u.e")),
            o=form.old(sql.SQL("pgbd_m.old")),
        )
    ).fetchone()
    if row is not None:
        raise DatabaseError(
            f"cannot rewrite {col.qualified}: a row holds an array of dimensions {row[0]}"
            " naming a remapped OID; only one-dimensional arrays from subscript 1 are"
            " rewritten (rewrite that row by hand, then run again)"
        )


def _dangling(conn: psycopg.Connection, col: RewriteColumn) -> tuple[int, tuple[int, ...]]:
    """How many values of ``col`` name an OID that no LO has, and the first EXAMPLES
    such OIDs, ascending."""
    value = sql.SQL("pgbd_v")
    row = conn.execute(
        sql.SQL(
            "WITH pgbd_d AS MATERIALIZED (SELECT pgbd_r.o FROM (SELECT {r} AS o FROM {s} OFFSET 0)"
            " pgbd_r WHERE pgbd_r.o IS NOT NULL AND NOT EXISTS"
            " (SELECT FROM pg_catalog.pg_largeobject_metadata pgbd_l"
            " WHERE pgbd_l.oid = pgbd_r.o))"
            " SELECT (SELECT count(*) FROM pgbd_d), ARRAY(SELECT DISTINCT o::int8 FROM pgbd_d"
            " ORDER BY 1 LIMIT {n})"
        ).format(
            r=coltype.READINGS[col.base](value),
            s=_values(col, value),
            n=sql.Literal(EXAMPLES),
        )
    ).fetchone()
    assert row is not None
    return int(row[0]), tuple(int(o) for o in row[1])
