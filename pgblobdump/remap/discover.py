"""``restore --full --remap``: the references in the tables pg_restore restored, found
through the reference model, since every row there came from the archive:

- a typed reference (an ``oid`` or ``lo`` column, a domain over one, an array of them)
  is rewritten;
- a column that may hold OIDs in another form (integers, numeric, text digits,
  ``<oid>.<ext>``: refs/values.py) is a suspected reference: rewritten when most of its
  values (half or more, the reference model's high confidence) name an LO of the archive
  or of the target, else reported with the count of values naming a remapped LO, and
  left for ``--referenced-by`` to name.

Tables that existed before the restore are never searched: there the same old OID may
name the target's own LO (another tenant's), and rewriting it would hand its rows the
archive's bytes. Only columns named with ``--referenced-by`` are rewritten there.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import UsageError
from pgblobdump.packed.format.spec import DATABASE_FILE
from pgblobdump.packed.pgdump.database import local_file
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.refs import coltype, rewrite
from pgblobdump.refs.catalog import APPLICATION_COLUMNS
from pgblobdump.remap import store
from pgblobdump.report.reporter import Reporter
from pgblobdump.toc import open_archive
from pgblobdump.units import plural

HIGH = 0.5
"""The share of a suspected column's values naming LOs above which it is rewritten."""

_TABLES = (
    """
SELECT DISTINCT c.oid::int8 FROM pg_catalog.pg_attribute a
"""
    + APPLICATION_COLUMNS.replace("%%", "%")
    + f"""
  AND c.relkind IN ('r', 'p') AND n.nspname NOT IN ('{store.SCHEMA}', 'pgblobdump_sync')
"""
)
"""The application's tables (and partitioned tables): what pg_restore may add."""


def user_tables(conn: psycopg.Connection) -> set[int]:
    return {int(r[0]) for r in conn.execute(_TABLES)}


def archive_tables(archive: PackedDirectory) -> set[tuple[str, str]]:
    """(schema, table) of each TABLE a --full archive's pg_dump archive holds, read from
    its table of contents (no pg_restore)."""
    with local_file(archive.storage, DATABASE_FILE) as path, open_archive(path) as toc:
        return {(e.namespace or "", e.tag or "") for e in toc.iter_entries() if e.desc == "TABLE"}


def restored(conn: psycopg.Connection, new: set[int], named: set[tuple[str, str]]) -> set[int]:
    """Of the tables ``new`` since pg_restore began, those the archive ``named``: a table
    another session made meanwhile is not the archive's, and is never searched."""
    if not new:
        return set()
    rows = conn.execute(
        "SELECT c.oid::int8, n.nspname, c.relname FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = ANY(%s::oid[])",
        (sorted(new),),
    ).fetchall()
    return {int(r[0]) for r in rows if (r[1], r[2]) in named}


@dataclass(frozen=True)
class Found:
    """A column of a restored table: rewritten (``rewrite``) or only reported."""

    column: rewrite.RewriteColumn
    typed: bool
    values: int
    named: int
    remapped: int

    @property
    def rewrite(self) -> bool:
        return self.typed or (self.values > 0 and self.named / self.values >= HIGH)


def columns(
    conn: psycopg.Connection, relids: set[int], run: str, reporter: Reporter
) -> list[rewrite.RewriteColumn]:
    """The columns of tables ``relids`` to rewrite, each said in a note; suspected ones
    of low confidence that name remapped LOs are reported, not rewritten."""
    if not relids:
        return []
    rows = conn.execute(
        "SELECT n.nspname, c.relname, a.attname FROM pg_catalog.pg_attribute a"
        " JOIN pg_catalog.pg_class c ON c.oid = a.attrelid"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE a.attrelid = ANY(%s::oid[]) AND a.attnum > 0 AND NOT a.attisdropped"
        " AND a.attgenerated = '' ORDER BY 1, 2, a.attnum",
        (sorted(relids),),
    ).fetchall()
    out = []
    for schema, table, col in rows:
        qualified = sql.Identifier(schema, table).as_string(conn)
        try:
            c = rewrite.resolve(conn, qualified, col, "--full --remap")
        except UsageError:
            continue  # a type that holds no OID
        f = _weigh(conn, c, run)
        if f.rewrite:
            out.append(c)
            how = "an oid column" if f.typed else (
                f"{f.named:,} of its {f.values:,} values name LOs")  # fmt: skip
            reporter.note(f"{c.qualified}: a reference in a restored table ({how}): rewritten")
        elif f.remapped:
            reporter.note(
                f"{c.qualified}: {plural(f.remapped, 'value')} name remapped LOs, but only"
                f" {f.named:,} of its {f.values:,} values name LOs: not rewritten (name it"
                " with --referenced-by to rewrite it)"
            )
    return out


def _weigh(conn: psycopg.Connection, c: rewrite.RewriteColumn, run: str) -> Found:
    typed = c.base == "oid"
    if typed:
        return Found(c, True, 0, 0, 0)
    reading = coltype.READINGS[c.base]
    value: sql.Composable
    if c.array:
        source = sql.SQL("FROM {t} pgbd_t, pg_catalog.unnest(pgbd_t.{c}) pgbd_e(v)").format(
            t=c.ident, c=sql.Identifier(c.column)
        )
        value = sql.SQL("pgbd_e.v")
    else:
        source = sql.SQL("FROM {t} pgbd_t").format(t=c.ident)
        value = sql.SQL("pgbd_t.{}").format(sql.Identifier(c.column))
    row = conn.execute(
        sql.SQL(
            "SELECT count({v}), count(*) FILTER (WHERE EXISTS (SELECT 1 FROM"
            " pg_catalog.pg_largeobject_metadata m WHERE m.oid = pgbd_r.o) OR EXISTS"
            " (SELECT 1 FROM {map} x WHERE x.old = pgbd_r.o)),"
            " count(*) FILTER (WHERE EXISTS (SELECT 1 FROM {map} x WHERE x.old = pgbd_r.o))"
            " {src} CROSS JOIN LATERAL (SELECT {r} AS o OFFSET 0) pgbd_r"
        ).format(v=value, map=store.mapping(run), src=source, r=reading(value))
    ).fetchone()
    assert row is not None
    return Found(c, False, int(row[0]), int(row[1]), int(row[2]))
