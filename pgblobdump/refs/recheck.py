"""A rewritten column looked at once more, at its run's end (``restore --remap``,
remap/columns.py): one pass over its values, each value's OID read once, for what the run
reports and never touches: values naming an OID no LO has, values naming an LO the run did
not write, and rows that name an old OID still (written after the column's rewrite)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.refs import coltype
from pgblobdump.refs.rewrite import EXAMPLES, RewriteColumn


@dataclass(frozen=True)
class After:
    """A rewritten column looked at once more, at its run's end: values naming an OID no
    LO has (``dangling``), values naming an LO the run did not write (``others``), and
    rows naming an old OID of the mapping still (``late``: written since the rewrite);
    each with up to EXAMPLES of those OIDs, ascending."""

    dangling: tuple[int, tuple[int, ...]]
    others: tuple[int, tuple[int, ...]]
    late: tuple[int, tuple[int, ...]]


def after(
    conn: psycopg.Connection, col: RewriteColumn, mapping: sql.Composable, made: sql.Composable
) -> After:
    """``col`` read once (each value's OID read once), against the LOs, ``made`` (a
    relation of column ``new``: the LOs the run wrote) and ``mapping`` (old, new)."""
    value = sql.SQL("pgbd_v")

    def examples(cond: str) -> sql.Composed:
        return sql.SQL(
            "(pg_catalog.array_agg(DISTINCT pgbd_r.o::pg_catalog.int8 ORDER BY"
            " pgbd_r.o::pg_catalog.int8) FILTER (WHERE {}))[1:{}]"
        ).format(sql.SQL(cond), sql.Literal(EXAMPLES))

    row = conn.execute(
        sql.SQL(
            "SELECT count(*) FILTER (WHERE pgbd_l.oid IS NULL), {de},"
            " count(*) FILTER (WHERE pgbd_l.oid IS NOT NULL AND pgbd_n.new IS NULL), {oe},"
            " count(DISTINCT pgbd_r.tid) FILTER (WHERE pgbd_m.old IS NOT NULL), {le}"
            # OFFSET 0: each value's reading evaluated once, not once a reference to it
            " FROM (SELECT {i} AS tid, {r} AS o FROM {s} OFFSET 0) pgbd_r"
            " LEFT JOIN pg_catalog.pg_largeobject_metadata pgbd_l ON pgbd_l.oid = pgbd_r.o"
            " LEFT JOIN {made} pgbd_n ON pgbd_n.new = pgbd_r.o"
            " LEFT JOIN {m} pgbd_m ON pgbd_m.old = pgbd_r.o"
            " WHERE pgbd_r.o IS NOT NULL"
        ).format(
            de=examples("pgbd_l.oid IS NULL"),
            oe=examples("pgbd_l.oid IS NOT NULL AND pgbd_n.new IS NULL"),
            le=examples("pgbd_m.old IS NOT NULL"),
            i=sql.SQL("pgbd_t.ctid"),
            r=coltype.READINGS[col.base](value),
            s=_values_with_ids(col, value),
            made=made,
            m=mapping,
        )
    ).fetchone()
    assert row is not None

    def pair(n: int, ex: list[int] | None) -> tuple[int, tuple[int, ...]]:
        return int(n), tuple(int(o) for o in (ex or ()))

    return After(pair(row[0], row[1]), pair(row[2], row[3]), pair(row[4], row[5]))


def _values_with_ids(col: RewriteColumn, value: sql.Identifier | sql.SQL) -> sql.Composed:
    """As ``_values``, with the row's ctid beside each value (``pgbd_t.ctid``)."""
    c = sql.Identifier(col.column)
    if col.array:
        return sql.SQL("{t} pgbd_t, pg_catalog.unnest(pgbd_t.{c}::{b}[]) pgbd_u({v})").format(
            t=col.ident, c=c, b=sql.Identifier("pg_catalog", col.base), v=value
        )
    return sql.SQL(
        "(SELECT pgbd_s.ctid, pgbd_s.{c}::{b} FROM {t} pgbd_s) pgbd_t(ctid, {v})"
    ).format(t=col.ident, c=c, b=sql.Identifier("pg_catalog", col.base), v=value)
