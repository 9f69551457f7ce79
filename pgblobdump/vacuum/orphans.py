"""Orphans: LOs no reference column names, found set-based on the server.

Every referenced OID goes once into a temporary table (one pass over each reference
column); orphans are the LOs of pg_largeobject_metadata an anti-join leaves. The
candidates a vacuum may remove (orphans old enough, that this role may unlink) go into a
second temporary table, so the client never holds the whole set.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.pg.catalog import UNLINKABLE
from pgblobdump.pg.query import one, scalar
from pgblobdump.vacuum.age import AgeRule
from pgblobdump.vacuum.refs import References, oid_array

REFS = "pgbd_vacuum_refs"
"""Temporary table: every OID some column names (``o``), distinct, and whether only
suspected references name it (``only_suspects``)."""
CANDIDATES = "pgbd_vacuum_candidates"
"""Temporary table: the orphans a vacuum may remove (``o``), before the re-check."""
LIST_MAX = 20


def collect_refs(conn: psycopg.Connection, refs: References) -> str:
    """(Re)build the temporary table of referenced OIDs; the snapshot it was read under
    (``pg_snapshot`` text): a later re-check need only read rows it may not have seen
    (``RefColumn.oids``: xmin not below the snapshot's xmin)."""
    t = sql.Identifier(REFS)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(t))
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        row = conn.execute("SELECT pg_catalog.pg_current_snapshot()::text").fetchone()
        assert row is not None
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE {t} AS SELECT o, bool_and(s) AS only_suspects"
                " FROM ({u}) x WHERE o IS NOT NULL GROUP BY o"
            ).format(t=t, u=refs.union_flagged())
        )
    conn.execute(sql.SQL("ALTER TABLE pg_temp.{} ADD PRIMARY KEY (o)").format(t))
    conn.execute(sql.SQL("ANALYZE pg_temp.{}").format(t))
    return str(row[0])


def kept_by_suspects(conn: psycopg.Connection) -> int:
    """LOs that only suspected references name (after ``collect_refs``): vacuumlo, which
    reads oid and lo columns alone, would delete them."""
    return scalar(
        conn,
        sql.SQL(
            "SELECT count(*) FROM pg_catalog.pg_largeobject_metadata m"
            " JOIN pg_temp.{} r ON r.o = m.oid WHERE r.only_suspects"
        ).format(sql.Identifier(REFS)),
    )


ORPHAN = sql.SQL("NOT EXISTS (SELECT 1 FROM pg_temp.{r} r WHERE r.o = m.oid)").format(
    r=sql.Identifier(REFS)
)
"""Whether metadata row ``m`` is an orphan (after ``collect_refs``)."""


@dataclass(frozen=True)
class Orphans:
    """The orphans and what becomes of them: ``removable`` go into the candidates table;
    ``young`` are kept by ``--min-age``; ``not_owned`` by this role's rights."""

    orphans: int
    removable: int
    young: int
    not_owned: int
    not_owned_sample: tuple[int, ...]
    sample: tuple[int, ...]
    """The first removable OIDs."""


def select_candidates(conn: psycopg.Connection, rule: AgeRule) -> Orphans:
    """Fill the candidates table from the orphans (after ``collect_refs``); the figures."""
    c = sql.Identifier(CANDIDATES)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(c))
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE {c} AS SELECT m.oid AS o, {old} AS old, {mine} AS mine"
            " FROM pg_catalog.pg_largeobject_metadata m WHERE {orphan}"
        ).format(c=c, old=rule.condition(), mine=UNLINKABLE, orphan=ORPHAN)
    )
    row = one(
        conn,
        sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE old AND mine),"
            " count(*) FILTER (WHERE NOT old), count(*) FILTER (WHERE old AND NOT mine)"
            " FROM pg_temp.{}"
        ).format(c),
    )
    orphans, removable, young, not_owned = (int(v) for v in row)

    def sample(where: str) -> tuple[int, ...]:
        q = sql.SQL("SELECT o::int8 FROM pg_temp.{} WHERE " + where + " ORDER BY o LIMIT %s")
        return tuple(int(r[0]) for r in conn.execute(q.format(c), (LIST_MAX,)))

    not_owned_sample = sample("old AND NOT mine")
    conn.execute(sql.SQL("DELETE FROM pg_temp.{} WHERE NOT (old AND mine)").format(c))
    conn.execute(sql.SQL("ALTER TABLE pg_temp.{} ADD PRIMARY KEY (o)").format(c))
    conn.execute(sql.SQL("ANALYZE pg_temp.{}").format(c))
    return Orphans(orphans, removable, young, not_owned, not_owned_sample, sample("true"))


def candidate_chunk(conn: psycopg.Connection, after: int, limit: int) -> list[int]:
    """The next ``limit`` candidates' OIDs above ``after``, ascending."""
    rows = conn.execute(
        sql.SQL(
            "SELECT o::int8 FROM pg_temp.{} WHERE o > %s::int8::oid ORDER BY o LIMIT %s"
        ).format(sql.Identifier(CANDIDATES)),
        (after, limit),
    ).fetchall()
    return [int(r[0]) for r in rows]


def still_orphans(
    conn: psycopg.Connection, refs: References, oids: list[int], since: str | None = None,
    seen: frozenset[tuple[int, int]] = frozenset(),
) -> list[int]:  # fmt: skip
    """Which of ``oids`` no column names now: one anti-join against every reference column
    (run while the tables are locked, so no new reference can commit meanwhile); with
    ``since``, the ``seen`` columns only in rows that snapshot may not have seen."""
    if not oids:
        return []
    # The array as a literal, no parameter: a table named with a % would be read as one.
    rows = conn.execute(
        sql.SQL(
            "SELECT c.o::int8 FROM pg_catalog.unnest({a}::int8[]::pg_catalog.oid[]) c(o)"
            " WHERE NOT EXISTS (SELECT 1 FROM ({u}) r WHERE r.o = c.o) ORDER BY 1"
        ).format(a=sql.Literal(oid_array(oids)), u=refs.union(since, seen))
    ).fetchall()
    return [int(r[0]) for r in rows]


def iter_candidates(conn: psycopg.Connection, chunk: int = 10_000) -> Iterator[int]:
    """Every candidate OID (for ``--dry-run`` listings), ascending, ``chunk`` at a time."""
    after = 0
    while batch := candidate_chunk(conn, after, chunk):
        yield from batch
        after = batch[-1]
