"""Export's name of each LO: the template rendered per OID (a template of ``{oid}`` and
text alone: safe and unique by construction, checked once), or, for a template of a
table's columns, every selected LO's name worked out before any is written, from the
rows of that table that reference it (read in the export's snapshot through the
``--referenced-by`` columns of that table, each in the forms refs/values reads), so that
clashes are settled the same way whatever the --jobs and --part.

An LO two rows reference is named after the row whose name sorts first (in bytes), the
count kept in the manifest (``rows``); an LO no row of the table references (selected
through another --referenced-by column) is named by its OID, and reported.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgblobdump.files.exporting.names import Named, Template, make_safe, resolve
from pgblobdump.pg.lostream import Selection
from pgblobdump.pgconstants import OID_MAX
from pgblobdump.refs import coltype


@dataclass(frozen=True)
class Source:
    """Where a name came from: the referencing row's template columns (JSON text, "" for
    an OID-named LO) and how many rows reference the LO."""

    row: str = ""
    rows: int = 0


@dataclass
class Names:
    """Names of the LOs, given per OID; ``planned`` holds them all for a row template
    (None: rendered on the way)."""

    template: Template
    planned: dict[int, Named] | None = None
    sources: dict[int, Source] = field(default_factory=dict)
    fast: bool = False
    """The template of OID and text alone renders a safe name for every OID."""

    def __call__(self, oid: int) -> Named:
        if self.planned is not None:
            return self.planned[oid]
        name = self.template.render(oid)
        if self.fast:
            return Named(name)
        path, why = make_safe(name, oid)
        return Named(path, why)

    def source(self, oid: int) -> Source:
        return self.sources.get(oid, Source())

    def renamed(self) -> list[tuple[int, str, str]]:
        """(OID, name, why) of each LO named otherwise than the template said (planned
        names only; the others are reported as they are written)."""
        if self.planned is None:
            return []
        return [(o, n.path, n.why) for o, n in sorted(self.planned.items()) if n.why]


def for_oids(template: Template) -> Names:
    """Names of a template of ``{oid}`` and text: rendered as they come."""
    names = Names(template)
    fast = all(make_safe(template.render(o), o)[1] == "" for o in (1, 99999, OID_MAX))
    names.fast = fast
    return names


def plan(
    conn: psycopg.Connection,
    template: Template,
    sel: Selection,
    fixed: Mapping[int, str],
) -> Names:
    """Every selected LO's name from the rows of the template's table (module
    docstring), in the transaction open on ``conn``. ``fixed``: LOs an earlier run of
    this export wrote, and their names (kept)."""
    table = template.table
    assert table is not None
    cols = template.columns
    reads = [_rows(conn, table, c, cols) for t, c in sel.referenced_by if t == table]
    rows_sql = sql.SQL(" UNION ALL ").join(reads)
    query = sql.SQL(
        "SELECT m.oid::int8, r.* FROM pg_catalog.pg_largeobject_metadata m"
        " LEFT JOIN ({rows}) r ON r.pgbd_o = m.oid::int8 WHERE {where}"
    ).format(rows=rows_sql, where=sel.where(sql.SQL("m.oid")))
    best: dict[int, tuple[bytes, str, tuple[str | None, ...]]] = {}
    counts: dict[int, int] = {}
    with conn.cursor() as cur:
        cur.execute(query)
        for rec in cur:
            oid = int(rec[0])
            if oid in fixed:
                continue
            if rec[1] is None:
                best.setdefault(oid, (b"", "", ()))
                continue
            values = tuple(rec[2:])
            row = dict(zip(cols, values, strict=True))
            name = template.render(oid, row)
            counts[oid] = counts.get(oid, 0) + 1
            key = name.encode()
            had = best.get(oid)
            if had is None or not had[1] or key < had[0]:
                best[oid] = (key, name, values)
    wanted: dict[int, Named] = {}
    sources: dict[int, Source] = {}
    for oid, (_, name, values) in best.items():
        if not name and not values:
            path = str(oid)
            wanted[oid] = Named(path, f"no row of {table} references it")
            continue
        path, why = make_safe(name, oid)
        wanted[oid] = Named(path, why)
        sources[oid] = Source(_row_json(table, cols, values), counts[oid])
    names = Names(template, resolve(wanted, fixed.values()), sources)
    return names


def _row_json(table: str, cols: Iterable[str], values: tuple[str | None, ...]) -> str:
    return json.dumps({f"{table}.{c}": v for c, v in zip(cols, values, strict=True)},
                      ensure_ascii=False, sort_keys=False)  # fmt: skip


def _rows(conn: psycopg.Connection, table: str, col: str, cols: tuple[str, ...]) -> sql.Composable:
    """The rows of ``table`` whose ``col`` names an LO: (that OID as int8, the template's
    columns as text), the column read by its type (refs/coltype, as --referenced-by
    selects)."""
    named = f"--referenced-by {table}.{col}"
    relid, attnum = coltype.find(conn, table, col, named)
    for c in cols:
        coltype.find(conn, table, c, f"--name {{{table}.{c}}}")
    kind = coltype.column_type(conn, relid, attnum, named)
    reading = coltype.READINGS[kind.base]
    ident = sql.Identifier(*table.split("."))
    fields = sql.SQL("").join(
        sql.SQL(", pgbd_t.{}::pg_catalog.text").format(sql.Identifier(c)) for c in cols
    )
    if kind.array:
        inner = sql.SQL(
            "SELECT ({r})::pg_catalog.int8 AS pgbd_o{f} FROM {t} pgbd_t,"
            " pg_catalog.unnest(pgbd_t.{c}::{e}[]) pgbd_u"
        ).format(r=reading(sql.SQL("pgbd_u")), f=fields, t=ident, c=sql.Identifier(col),
                 e=sql.Identifier("pg_catalog", kind.base))  # fmt: skip
    else:
        inner = sql.SQL("SELECT ({r})::pg_catalog.int8 AS pgbd_o{f} FROM {t} pgbd_t").format(
            r=reading(sql.SQL("pgbd_t.{}").format(sql.Identifier(col))), f=fields, t=ident
        )
    return sql.SQL("SELECT * FROM ({} OFFSET 0) pgbd_r WHERE pgbd_o IS NOT NULL").format(inner)
