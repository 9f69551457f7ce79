"""Suspected references: candidate columns (``candidates``: text, varchar, char,
integer, bigint or numeric, arrays and domains too) whose values are OIDs of existing LOs,
as applications write them (``values``: Hibernate's CLOBs, ``<oid>.<ext>`` file names,
``oid::int4``).

Finding them costs little before any full pass:

1. **statistics**: where a table was analyzed, ``pg_stats``' most common values (or
   elements) and histogram bounds are read as OIDs;
2. **a sample**: a column with no statistics gets a bounded sample of its table
   (``TABLESAMPLE SYSTEM``, at most ``SAMPLE_PAGES`` pages and ``SAMPLE_ROWS`` rows);
3. **a full pass** only over the columns that hit (a value naming a live LO), one pass per
   table, which counts every value: live OIDs, dangling ones, the forms, examples.

A generated key or a foreign key's referencing column (``Candidate.keyish``) is
confirmed by a full pass only when most of its screened values are live OIDs: a counter
that has run past 16384 meets OIDs by chance in every table.

Statistics and a sample may miss a column that holds one OID among a million rows: they
are good enough to report, never to delete. ``kept`` checks the LOs a vacuum is about to
remove against every candidate column instead (an index where there is one, else one
pass per table).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import psycopg
from psycopg import sql

from pgblobdump.pg.query import one, scalar
from pgblobdump.refs import values
from pgblobdump.refs.candidates import INT4, INT8, NUMERIC, TEXT, Candidate, live_named

SAMPLE_PAGES = 32
"""Pages of a table a sample reads at most (TABLESAMPLE SYSTEM picks whole pages)."""
SAMPLE_ROWS = 1000
"""Rows of a table a sample reads at most."""
EXAMPLES = 5


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
        ).format(src=source, named=live_named(cols))
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
            ).format(t=t, named=live_named(cols), c=oids_table)
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
