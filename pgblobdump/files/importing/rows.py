"""``import --table T --path-column P --lo-column L``: a row per file imported, inserted,
or updated where a row has the file's path already, in the transaction that creates the
file's LO (so a row never names a missing LO). The path column must be unique (a unique
index or primary key on it alone): a row's old LO is remembered by its path. The LO an
updated row named before is never unlinked: it is reported as now unreferenced (by this
column). A failed run's clean-up puts each row back as it was (``undo``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError, UsageError

PATH_TYPES = ("text", "character varying")
"""Types the path column may have (the file's key, ``/``-separated)."""
LO_TYPES = ("oid", "bigint")
"""Types the LO column may have (an OID; bigint holds every OID)."""

INSERTED = "i"
UPDATED = "u"


@dataclass(frozen=True)
class RowTarget:
    """The table and its two columns, as the user named them (``table`` may be
    schema-qualified)."""

    table: str
    path_column: str
    lo_column: str

    @property
    def spec(self) -> str:
        return f"{self.table}.{self.path_column}.{self.lo_column}"


@dataclass(frozen=True)
class Resolved:
    """A RowTarget found in the catalog: the table's OID and quoted name."""

    target: RowTarget
    relid: int
    name: sql.Composable

    @property
    def path(self) -> sql.Identifier:
        return sql.Identifier(self.target.path_column)

    @property
    def lo(self) -> sql.Identifier:
        return sql.Identifier(self.target.lo_column)


def resolve(conn: psycopg.Connection, t: RowTarget) -> Resolved:
    """The table and columns found, typed and writable, or refused (before anything is
    written)."""
    try:
        row = conn.execute(
            "SELECT c.oid::int8, n.nspname, c.relname, c.relkind FROM pg_catalog.pg_class c"
            " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.oid = to_regclass(%s)",
            (t.table,),
        ).fetchone()
    except psycopg.errors.InvalidName as e:
        raise UsageError(f"--table {t.table!r} is not a table name") from e
    if row is None:
        raise DatabaseError(f"--table {t.table}: no such table")
    relid, nsp, rel, kind = row
    if kind not in ("r", "p"):
        raise DatabaseError(f"--table {t.table} is not a table")
    types: dict[str, str] = dict(
        conn.execute(
            "SELECT attname, format_type(atttypid, NULL) FROM pg_catalog.pg_attribute"
            " WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped",
            (relid,),
        ).fetchall()
    )
    for col, allowed, option in ((t.path_column, PATH_TYPES, "--path-column"),
                                 (t.lo_column, LO_TYPES, "--lo-column")):  # fmt: skip
        if col not in types:
            raise DatabaseError(f"{option} {col}: table {t.table} has no such column")
        if types[col] not in allowed:
            raise DatabaseError(
                f"{option} {col} of {t.table} is {types[col]}; it must be {' or '.join(allowed)}"
            )
    if t.path_column == t.lo_column:
        raise UsageError("--path-column and --lo-column name the same column")
    if not _unique(conn, relid, t.path_column):
        raise DatabaseError(
            f"--path-column {t.path_column} of {t.table} has no unique index or primary key"
            " on exactly it: a path in several rows could not be rolled back row by row"
        )
    missing = [
        f"{priv} on {col}"
        for col in (t.path_column, t.lo_column)
        for priv in ("SELECT", "INSERT", "UPDATE")
        if not conn.execute(
            "SELECT has_column_privilege(%s::int8::oid, %s, %s)", (relid, col, priv)
        ).fetchone()[0]  # type: ignore[index]
    ]
    if missing:
        raise DatabaseError(
            f"--table {t.table}: this role may not write it ({', '.join(missing)} missing)"
        )
    return Resolved(t, int(relid), sql.Identifier(nsp, rel))


def _unique(conn: psycopg.Connection, relid: int, column: str) -> bool:
    """A valid unique index (or primary key) on ``column`` alone, not partial and not
    on an expression: no two rows have the same path."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_index i"
        " JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attname = %s"
        " WHERE i.indrelid = %s::int8::oid AND i.indisunique AND i.indisvalid"
        " AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indnkeyatts = 1"
        " AND i.indkey[0] = a.attnum)",
        (column, relid),
    ).fetchone()
    return bool(row and row[0])


def apply(
    conn: psycopg.Connection, r: Resolved, paths: Sequence[str], oids: Sequence[int]
) -> list[tuple[str, int | None]]:
    """In the batch's transaction: each path's row pointed at its new LO (updated where
    a row has the path, else inserted). Returns (action, LO the row named before) per
    path."""
    old: dict[str, int | None] = {}
    for p, lo in conn.execute(
        sql.SQL("SELECT {p}, {l}::int8 FROM {t} WHERE {p} = ANY(%s) FOR UPDATE").format(
            p=r.path, l=r.lo, t=r.name
        ),
        (list(paths),),
    ):
        old.setdefault(p, None if lo is None else int(lo))
    if old:
        conn.execute(
            sql.SQL(
                "UPDATE {t} AS t SET {l} = u.o FROM unnest(%s::text[], %s::int8[]) AS u(p, o)"
                " WHERE t.{p} = u.p"
            ).format(t=r.name, l=r.lo, p=r.path),
            (
                [p for p in paths if p in old],
                [o for p, o in zip(paths, oids, strict=True) if p in old],
            ),
        )
    new = [(p, o) for p, o in zip(paths, oids, strict=True) if p not in old]
    if new:
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} ({p}, {l}) SELECT p, o FROM unnest(%s::text[], %s::int8[])"
                " AS u(p, o)"
            ).format(t=r.name, l=r.lo, p=r.path),
            ([p for p, _ in new], [o for _, o in new]),
        )
    return [(UPDATED, old[p]) if p in old else (INSERTED, None) for p in paths]


def undo(conn: psycopg.Connection, r: Resolved, entries: Iterable[tuple[str, int, str, int | None]]
         ) -> None:  # fmt: skip
    """In the transaction removing the LOs: rows this run inserted deleted, rows it
    updated given back their old LO (only where they still name the run's)."""
    for path, oid, action, old in entries:
        if action == INSERTED:
            conn.execute(
                sql.SQL("DELETE FROM {t} WHERE {p} = %s AND {l}::int8 = %s::int8").format(
                    t=r.name, p=r.path, l=r.lo
                ),
                (path, oid),
            )
        elif action == UPDATED:
            conn.execute(
                sql.SQL(
                    "UPDATE {t} SET {l} = %s::int8 WHERE {p} = %s AND {l}::int8 = %s::int8"
                ).format(t=r.name, p=r.path, l=r.lo),
                (old, path, oid),
            )
