"""Suspected references: columns of text, varchar, char, integer, bigint or numeric type
(arrays and domains too) whose values are OIDs of existing LOs, as applications write
them (``values``: Hibernate's CLOBs, ``<oid>.<ext>`` file names, ``oid::int4``).

Finding them costs little before any full pass:

1. **statistics**: where a table was analyzed, ``pg_stats``' most common values (or
   elements) and histogram bounds are read as OIDs;
2. **a sample**: a column with no statistics gets a bounded sample of its table
   (``TABLESAMPLE SYSTEM``, at most ``SAMPLE_PAGES`` pages and ``SAMPLE_ROWS`` rows);
3. **a full pass** only over the columns that hit (a value naming a live LO), one pass per
   table, which counts every value: live OIDs, dangling ones, the forms, examples.

Generated keys (identity columns, ``nextval`` defaults) and the referencing columns of
foreign keys are candidates too (refile-postgres keeps the OID in a serial ``id``), but a
full pass confirms one only when most of its screened values are live OIDs: a counter
that has run past 16384 meets OIDs by chance in every table.

Statistics and a sample may miss a column that holds one OID among a million rows: they
are good enough to report, never to delete. ``kept`` checks the LOs a vacuum is about to
remove against every candidate column instead (an index where there is one, else one
pass per table).
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import psycopg
from psycopg import sql

from pgblobdump.pg.query import one, scalar
from pgblobdump.refs import values
from pgblobdump.refs.catalog import LOCKABLE, RLS_APPLIES, VISIBLE, TableColumn, regclass_text

SAMPLE_PAGES = 32
"""Pages of a table a sample reads at most (TABLESAMPLE SYSTEM picks whole pages)."""
SAMPLE_ROWS = 1000
"""Rows of a table a sample reads at most."""
EXAMPLES = 5
STATE_SCHEMAS = ("pgblobdump", "pgblobdump_sync")
"""pgblobdump's own state (OID ranges of copies, migrations): not the application's."""

# How a candidate column's values are read (refs.values).
TEXT = "text"
INT4 = "int4"  # int2 and int4: as oid::int4 stores an OID
INT8 = "int8"
NUMERIC = "numeric"

_SEEDS = {"text": TEXT, "varchar": TEXT, "bpchar": TEXT, "int2": INT4, "int4": INT4,
          "int8": INT8, "numeric": NUMERIC}  # fmt: skip

_TYPES = """
WITH RECURSIVE t(typ, kind, arr) AS (
    SELECT ('pg_catalog.' || s.name)::pg_catalog.regtype::oid, s.kind, false
    FROM ROWS FROM (pg_catalog.unnest(%(names)s::text[]), pg_catalog.unnest(%(kinds)s::text[]))
         s(name, kind)
  UNION
    SELECT x.typ, x.kind, x.arr FROM t, LATERAL (
        SELECT d.oid AS typ, t.kind, t.arr FROM pg_catalog.pg_type d
        WHERE d.typtype = 'd' AND d.typbasetype = t.typ
      UNION ALL
        SELECT a.oid, t.kind, true FROM pg_catalog.pg_type a
        WHERE NOT t.arr AND a.typcategory = 'A' AND a.typelem = t.typ
    ) x
)
SELECT typ::int8, kind, arr FROM t
"""
"""Every type a candidate column may have: the seeds, domains over them, arrays of them
(and domains over those), with how its values read and whether it is an array."""

_CANDIDATES = (
    """
SELECT c.oid::int8, a.attnum::int, n.nspname, c.relname, a.attname,
       pg_catalog.format_type(a.atttypid, a.atttypmod), k.kind, k.arr,
       """
    + VISIBLE
    + ", "
    + RLS_APPLIES
    + ", "
    + LOCKABLE
    + """, c.relkind::text, c.relispopulated,
       EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid
               AND i.indkey[0] = a.attnum AND i.indpred IS NULL AND i.indexprs IS NULL
               AND i.indisvalid
               AND (SELECT am.amname FROM pg_catalog.pg_class ic
                    JOIN pg_catalog.pg_am am ON am.oid = ic.relam
                    WHERE ic.oid = i.indexrelid) = 'btree'),
       a.attidentity <> '' OR EXISTS (
           SELECT 1 FROM pg_catalog.pg_attrdef d WHERE d.adrelid = c.oid AND d.adnum = a.attnum
           AND pg_catalog.pg_get_expr(d.adbin, d.adrelid) LIKE 'nextval(%%'),
       EXISTS (SELECT 1 FROM pg_catalog.pg_constraint f WHERE f.conrelid = c.oid
               AND f.contype = 'f' AND f.conkey = ARRAY[a.attnum])
FROM pg_catalog.pg_attribute a
JOIN ROWS FROM (pg_catalog.unnest(%(types)s::int8[]::pg_catalog.oid[]),
                pg_catalog.unnest(%(kinds)s::text[]), pg_catalog.unnest(%(arrs)s::bool[]))
     k(typ, kind, arr) ON k.typ = a.atttypid
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_roles r ON r.rolname = current_user
WHERE a.attnum > 0 AND NOT a.attisdropped
  AND c.relkind IN ('r', 'p', 'm') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname <> ALL (%(state)s::text[])
  AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'
  AND n.oid <> pg_catalog.pg_my_temp_schema()
ORDER BY n.nspname, c.relname, a.attnum
"""
)


@dataclass(frozen=True)
class Candidate(TableColumn):
    """A column whose values may be OIDs: of a candidate type, not a typed reference."""

    kind: str
    """How its values read: TEXT, INT4, INT8 or NUMERIC (of each element for an array)."""
    array: bool
    readable: bool
    rls: bool
    lockable: bool
    relkind: str
    populated: bool
    indexed: bool
    """A plain btree index leads with it: an LO can be looked up in it (integers only)."""
    keyish: bool = False
    """A generated key (identity, a ``nextval`` default) or a foreign key's referencing
    column: usually a counter, which meets OIDs by chance once it passes 16384. Still a
    candidate (refile-postgres keeps the OID in a serial ``id``), but a full pass confirms
    it only when most of what was screened are live OIDs."""

    @property
    def spec(self) -> tuple[str, str]:
        """``(schema.table, column)``, as ``--references`` names one; the table quoted as
        SQL writes it (a name may hold a dot: ``refs.catalog.regclass_text`` reads it)."""
        return (sql.Identifier(self.schema, self.table).as_string(None), self.column)

    def oid_of(self, value: sql.Composable) -> sql.Composed:
        """An ``oid`` expression: the LO one value (an element for an array) names, or
        NULL."""
        if self.kind == TEXT:
            return values.text_sql(sql.SQL("({})::pg_catalog.text").format(value))
        if self.kind == NUMERIC:
            return values.numeric_sql(value)
        return values.int_sql(value, 32 if self.kind == INT4 else 64)

    def named(self, row: str) -> sql.Composed:
        """A subquery of column ``o``: the OIDs its value in row alias ``row`` names
        (every element's for an array), NULLs for values naming none."""
        v = sql.SQL("{}.{}").format(sql.Identifier(row), sql.Identifier(self.column))
        if self.array:
            return sql.SQL("SELECT {} AS o FROM pg_catalog.unnest({}) pgbd_e").format(
                self.oid_of(sql.SQL("pgbd_e")), v
            )
        return sql.SQL("SELECT {} AS o WHERE {} IS NOT NULL").format(self.oid_of(v), v)

    def pattern(self, row: str) -> sql.Composable:
        """The form a scalar value is in (``refs.values.PATTERNS``)."""
        if self.kind != TEXT:
            return sql.SQL("'integer'")
        v = sql.SQL("({}.{})::pg_catalog.text").format(sql.Identifier(row),
                                                      sql.Identifier(self.column))  # fmt: skip
        return values.text_pattern_sql(v)


@dataclass
class Finding:
    """What is known of a candidate column: how it was screened and, when it hit, what a
    full pass counted."""

    column: Candidate
    screened: str = ""
    """``statistics``, ``sample``, or ``""`` (not read: not readable, not populated)."""
    screen_values: int = 0
    screen_live: int = 0
    rows: int | None = None
    values: int | None = None
    """Non-NULL values (elements for an array) of the full pass."""
    live: int | None = None
    dangling: int | None = None
    """Values in an OID's form naming no LO."""
    pattern: str = ""
    examples: tuple[int, ...] = ()

    @property
    def hit(self) -> bool:
        return self.screen_live > 0 or bool(self.live)

    @property
    def confidence(self) -> str:
        """``high`` when most values are live OIDs, ``medium`` when a fair share are (or
        they are file names), ``low`` when only a few happen to be."""
        if self.values is None and self.hit:
            return "low"  # a key that meets OIDs by chance, not read whole
        if not self.values or not self.live:
            return "low" if self.hit else ""
        share = self.live / self.values
        if share >= 0.5:
            return "high"
        if share >= 0.05 or self.pattern == "file name":
            return "medium"
        return "low"

    def summary(self) -> dict[str, object]:
        """What reports show per column."""
        return {
            "column": self.column.qualified, "type": self.column.type,
            "screened": self.screened, "rows": self.rows,
            "values": self.values if self.values is not None else self.screen_values,
            "live": self.live if self.live is not None else self.screen_live,
            "dangling": self.dangling, "pattern": self.pattern,
            "confirmed": self.values is not None,
            "confidence": self.confidence, "examples": list(self.examples),
        }  # fmt: skip


@dataclass
class Suspects:
    """Every candidate column and what was found of it."""

    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def hits(self) -> list[Finding]:
        return [f for f in self.findings if f.hit]

    @property
    def unread(self) -> list[Finding]:
        """Candidates the role may not read whole (no SELECT, row-level security)."""
        return [f for f in self.findings if not f.column.readable or f.column.rls]


def candidates(
    conn: psycopg.Connection,
    skip: Iterable[tuple[int, int]] = (),
    dismissed: Sequence[tuple[str, str]] = (),
    state: Sequence[str] = (),
) -> list[Candidate]:
    """Every candidate column of the database but those in ``skip`` ((relid, attnum):
    typed or named references), ``dismissed`` (``--not-references``) and the schemas of
    pgblobdump's state (``STATE_SCHEMAS`` and ``state``)."""
    types = conn.execute(_TYPES, {"names": list(_SEEDS), "kinds": list(_SEEDS.values())}).fetchall()
    rows = conn.execute(
        _CANDIDATES,
        {"types": [int(t[0]) for t in types], "kinds": [str(t[1]) for t in types],
         "arrs": [bool(t[2]) for t in types], "state": [*STATE_SCHEMAS, *state]},
    ).fetchall()  # fmt: skip
    skipped = set(skip)
    gone = _resolved(conn, dismissed)
    out = []
    for r in rows:
        c = Candidate(int(r[0]), int(r[1]), str(r[2]), str(r[3]), str(r[4]), str(r[5]),
                      str(r[6]), bool(r[7]), bool(r[8]), bool(r[9]), bool(r[10]), str(r[11]),
                      bool(r[12]), bool(r[13]))  # fmt: skip
        if bool(r[14]) or bool(r[15]):
            c = dataclasses.replace(c, keyish=True)
        if (c.relid, c.attnum) not in skipped and (c.relid, c.column) not in gone:
            out.append(c)
    return out


def _resolved(conn: psycopg.Connection, specs: Sequence[tuple[str, str]]) -> set[tuple[int, str]]:
    """``(relid, column)`` of each ``(table, column)`` named that exists."""
    out = set()
    for table, column in specs:
        row = conn.execute(
            "SELECT pg_catalog.to_regclass(%s)::oid::int8", (regclass_text(table),)
        ).fetchone()
        if row and row[0] is not None:
            out.add((int(row[0]), column))
    return out


def screen(conn: psycopg.Connection, cands: Sequence[Candidate]) -> Suspects:
    """Statistics first, then a bounded sample of the tables with none; then a full pass
    over the columns that hit. Reads no whole column that neither hit."""
    t0 = time.perf_counter()
    found = {(c.relid, c.attnum): Finding(c) for c in cands}
    readable = [c for c in cands if c.readable and not c.rls and c.populated]
    unscreened = _from_statistics(conn, readable, found)
    by_table: dict[int, list[Candidate]] = defaultdict(list)
    for c in unscreened:
        by_table[c.relid].append(c)
    for cols in by_table.values():
        _sample(conn, cols, found)
    hit = [c for c in readable if _confirmable(found[(c.relid, c.attnum)])]
    by_table = defaultdict(list)
    for c in hit:
        by_table[c.relid].append(c)
    for cols in by_table.values():
        _confirm(conn, cols, found)
    return Suspects(list(found.values()), time.perf_counter() - t0)


_STATS = """
SELECT s.schemaname::text, s.tablename::text, s.attname::text,
       coalesce(s.most_common_vals::text::text[], '{}'),
       coalesce(s.histogram_bounds::text::text[], '{}'),
       coalesce(s.most_common_elems::text::text[], '{}')
FROM pg_catalog.pg_stats s
WHERE (s.schemaname::text, s.tablename::text) IN (
    SELECT * FROM ROWS FROM (pg_catalog.unnest(%(schemas)s::text[]),
                             pg_catalog.unnest(%(tables)s::text[])))
"""


def _from_statistics(
    conn: psycopg.Connection, cands: Sequence[Candidate], found: dict[tuple[int, int], Finding]
) -> list[Candidate]:
    """Screen ``cands`` by their statistics; returns those that have none."""
    if not cands:
        return []
    pairs = sorted({(c.schema, c.table) for c in cands})
    stats: dict[tuple[str, str, str], list[str]] = {}
    for schema, table, col, mcv, hist, elems in conn.execute(
        _STATS, {"schemas": [p[0] for p in pairs], "tables": [p[1] for p in pairs]}
    ):
        stats.setdefault((schema, table, col), []).extend([*mcv, *hist, *elems])
    named: dict[tuple[int, int], list[int]] = {}
    rest = []
    for c in cands:
        seen = stats.get((c.schema, c.table, c.column))
        if seen is None:
            rest.append(c)
            continue
        oids = []
        for v in seen:
            got = _stat_oid(v, c.kind)
            if got is not None:
                oids.append(got)
        named[(c.relid, c.attnum)] = oids
        f = found[(c.relid, c.attnum)]
        f.screened, f.screen_values = "statistics", len(seen)
    every = sorted({o for oids in named.values() for o in oids})
    live = set()
    if every:
        live = {
            int(r[0])
            for r in conn.execute(
                "SELECT m.oid::int8 FROM pg_catalog.pg_largeobject_metadata m"
                " WHERE m.oid = ANY(%s::int8[]::pg_catalog.oid[])",
                ("{" + ",".join(map(str, every)) + "}",),
            )
        }
    for key, oids in named.items():
        found[key].screen_live = sum(o in live for o in oids)
    return rest


def _confirmable(f: Finding) -> bool:
    """Whether a column that hit gets a full pass: any but a key whose screened values
    are mostly not live OIDs (a counter that meets OIDs by chance: its screen figures are
    reported, and vacuum checks its orphans against it through its index)."""
    if not f.hit:
        return False
    return not f.column.keyish or f.screen_live * 2 >= max(f.screen_values, 1)


def _stat_oid(text: str | None, kind: str) -> int | None:
    """The OID a statistic's value (text) names, read as the column's kind."""
    if text is None:
        return None
    if kind == TEXT:
        got = values.from_text(text.rstrip(" "))  # char(n) statistics keep the padding
        return got[0] if got else None
    return _from_number(text, kind)


def _from_number(text: str, kind: str) -> int | None:
    try:
        if kind == NUMERIC:
            d = Decimal(text)
            if not d.is_finite() or d != d.to_integral_value():
                return None
            return values.from_int(int(d), 64)
        return values.from_int(int(text), 32 if kind == INT4 else 64)
    except (ValueError, ArithmeticError):
        return None


def union(cols: Sequence[Candidate]) -> sql.Composed:
    """A query of column ``o``: every OID ``cols`` name (one pass per table)."""
    by_table: dict[int, list[Candidate]] = defaultdict(list)
    for c in cols:
        by_table[c.relid].append(c)
    return sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT pgbd_v.o FROM {t} pgbd_t, {named} WHERE pgbd_v.o IS NOT NULL").format(
            t=sql.Identifier(cs[0].schema, cs[0].table), named=_live_named(cs)
        )
        for cs in by_table.values()
    )


def _live_named(cols: Sequence[Candidate]) -> sql.Composed:
    """``LATERAL (...) pgbd_v(k, o)``: each column's number ``k`` with an OID its value
    names. (Measured: a subquery a column beats one VALUES list of them, 0.63 s against
    2.5 s over 166,666 rows of 4 columns.)"""
    return sql.SQL("LATERAL ({}) pgbd_v(k, o)").format(
        sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {k}, x.o FROM ({q}) x").format(k=sql.Literal(i), q=c.named("pgbd_t"))
            for i, c in enumerate(cols)
        )
    )


def _sample(
    conn: psycopg.Connection, cols: Sequence[Candidate], found: dict[tuple[int, int], Finding]
) -> None:
    """One bounded sample of ``cols``' table: how many values it read, how many live."""
    c0 = cols[0]
    t = sql.Identifier(c0.schema, c0.table)
    pages = scalar(
        conn,
        "SELECT greatest(pg_catalog.pg_relation_size(%s::oid)"
        " / pg_catalog.current_setting('block_size')::int8, 1)",
        (c0.relid,),
        default=1,
    )
    percent = min(100.0, 100.0 * SAMPLE_PAGES / pages)
    source = sql.SQL("(SELECT {c} FROM {t}{s} LIMIT {n})").format(
        c=sql.SQL(", ").join(sql.Identifier(c.column) for c in cols),  # column grants do
        t=t,
        s=sql.SQL(" TABLESAMPLE SYSTEM ({}) REPEATABLE (0)").format(sql.Literal(percent))
        if percent < 100
        else sql.SQL(""),
        n=sql.Literal(SAMPLE_ROWS),
    )
    rows = conn.execute(
        sql.SQL(
            "SELECT pgbd_v.k, count(*), count(m.oid) FROM {src} pgbd_t, {named}"
            " LEFT JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = pgbd_v.o"
            " GROUP BY 1"
        ).format(src=source, named=_live_named(cols))
    ).fetchall()
    counts = {int(k): (int(n), int(live)) for k, n, live in rows}
    for i, c in enumerate(cols):
        f = found[(c.relid, c.attnum)]
        n, live = counts.get(i, (0, 0))
        f.screened, f.screen_values, f.screen_live = "sample", n, live


_LIVE = "IN (SELECT m.oid FROM pg_catalog.pg_largeobject_metadata m)"
"""Whether an OID is a live LO's: a hashed subplan, built once per statement."""


def _confirm(
    conn: psycopg.Connection, cols: Sequence[Candidate], found: dict[tuple[int, int], Finding]
) -> None:
    """One full pass over ``cols``' table: its rows and, per column, values, live OIDs,
    dangling ones and the commonest form among the live; then a few live OIDs of each
    (a query that stops at the first ones)."""
    c0 = cols[0]
    t = sql.Identifier(c0.schema, c0.table)
    per = []
    for i, c in enumerate(cols):
        o, p = sql.Identifier(f"o{i}"), sql.Identifier(f"p{i}")
        if c.array:  # the elements: a subquery per row
            per.append(
                sql.SQL(
                    "sum((SELECT count(*) FROM ({q}) e)), sum((SELECT count(e.o) FROM ({q}) e)),"
                    " sum((SELECT count(*) FROM ({q}) e WHERE e.o " + _LIVE + ")), 0"
                ).format(q=c.named("pgbd_t"))
            )
        else:
            v = sql.SQL("pgbd_t.{}").format(sql.Identifier(c.column))
            per.append(
                sql.SQL(
                    "count({v}), count(x.{o}), count(*) FILTER (WHERE x.{o} " + _LIVE + "),"
                    " count(*) FILTER (WHERE x.{p} = 'file name' AND x.{o} " + _LIVE + ")"
                ).format(v=v, o=o, p=p)
            )
    scalars = [(i, c) for i, c in enumerate(cols) if not c.array]
    lateral = sql.SQL(", ").join(
        sql.SQL("{e} AS {o}, {pat} AS {p}").format(
            e=c.oid_of(sql.SQL("pgbd_t.{}").format(sql.Identifier(c.column))),
            pat=c.pattern("pgbd_t"),
            o=sql.Identifier(f"o{i}"),
            p=sql.Identifier(f"p{i}"),
        )
        for i, c in scalars
    )
    source = (
        sql.SQL("{t} pgbd_t, LATERAL (SELECT {l}) x").format(t=t, l=lateral)
        if scalars
        else sql.SQL("{t} pgbd_t").format(t=t)
    )
    row = one(
        conn,
        sql.SQL("SELECT count(*), {per} FROM {src}").format(
            per=sql.SQL(", ").join(per), src=source
        ),
    )
    for i, c in enumerate(cols):
        f = found[(c.relid, c.attnum)]
        n, formed, live, files = (int(v or 0) for v in row[1 + 4 * i : 5 + 4 * i])
        f.rows, f.values, f.live, f.dangling = int(row[0]), n, live, formed - live
        f.pattern = "integer" if c.kind != TEXT else "file name" if files * 2 > live else "digits"
        if live:
            f.examples = tuple(
                int(r[0])
                for r in conn.execute(
                    sql.SQL(
                        "SELECT DISTINCT x.o::int8 FROM (SELECT v.o FROM {t} pgbd_t,"
                        " LATERAL ({q}) v WHERE v.o " + _LIVE + " LIMIT {n}) x ORDER BY 1"
                    ).format(t=t, q=c.named("pgbd_t"), n=sql.Literal(EXAMPLES * 4))
                ).fetchall()[:EXAMPLES]
            )


@dataclass(frozen=True)
class Check:
    """What checking a vacuum's candidates against the candidate columns found and cost."""

    columns: tuple[str, ...]
    """Every column read, with how (``by index`` or ``in a pass over its table``)."""
    kept: dict[str, int]
    """Per column, the candidates it names (they are kept)."""
    seconds: float
    removed: int = 0
    """Candidates taken out of the table (named by some column), distinct."""


def kept(conn: psycopg.Connection, cands: Sequence[Candidate], oids_table: sql.Composable) -> Check:
    """Delete from ``oids_table`` (a table of column ``o``: the LOs about to be removed)
    every OID some of ``cands`` names now: an integer column with a btree index leading
    with it is probed per OID; the others are read in one pass per table."""
    t0 = time.perf_counter()
    count = sql.SQL("SELECT count(*) FROM {}").format(oids_table)
    before = scalar(conn, count)
    read: list[str] = []
    kept_by: dict[str, int] = {}
    by_table: dict[int, list[Candidate]] = defaultdict(list)
    for c in cands:
        if c.indexed and c.kind in (INT4, INT8) and not c.array:
            n = _probe(conn, c, oids_table)
            read.append(f"{c.qualified} (by index)")
            if n:
                kept_by[c.qualified] = n
        else:
            by_table[c.relid].append(c)
    for cols in by_table.values():
        t = sql.Identifier(cols[0].schema, cols[0].table)
        rows = conn.execute(
            sql.SQL(
                "WITH hit AS (SELECT DISTINCT pgbd_v.k, pgbd_v.o FROM {t} pgbd_t, {named}"
                " WHERE pgbd_v.o IN (SELECT o FROM {c})),"
                " gone AS (DELETE FROM {c} WHERE o IN (SELECT o FROM hit))"
                " SELECT k, count(*) FROM hit GROUP BY k"
            ).format(t=t, named=_live_named(cols), c=oids_table)
        ).fetchall()
        read += [f"{c.qualified} (in a pass over its table)" for c in cols]
        for k, n in rows:
            kept_by[cols[int(k)].qualified] = int(n)
    removed = before - scalar(conn, count)
    return Check(tuple(read), kept_by, time.perf_counter() - t0, removed)


def _probe(conn: psycopg.Connection, c: Candidate, oids_table: sql.Composable) -> int:
    """``kept`` for one indexed integer column: a lookup per candidate OID."""
    value = (
        sql.SQL("(CASE WHEN x.o::int8 > 2147483647 THEN x.o::int8 - 4294967296"
                " ELSE x.o::int8 END)::pg_catalog.int4")
        if c.kind == INT4
        else sql.SQL("x.o::int8")
    )  # fmt: skip
    return scalar(
        conn,
        sql.SQL(
            "WITH hit AS (SELECT x.o FROM {c} x WHERE EXISTS (SELECT 1 FROM {t} pgbd_t"
            " WHERE pgbd_t.{col} = {v})),"
            " gone AS (DELETE FROM {c} WHERE o IN (SELECT o FROM hit))"
            " SELECT count(*) FROM hit"
        ).format(
            c=oids_table,
            t=sql.Identifier(c.schema, c.table),
            col=sql.Identifier(c.column),
            v=value,
        ),
    )
