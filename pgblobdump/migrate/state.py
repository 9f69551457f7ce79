"""A migration's state, kept in the database it migrates (schema ``pgblobdump`` by default),
so a resume needs nothing from the client machine.

- ``migrations``: one row per run: the table (by OID, and its name when it started), the
  column, the direction, the phase reached, the last key done and the counts so far.
- ``migration_redo``: rows whose copy the sync trigger could not make (a dangling OID, an
  LO it may not read); the switch re-copies them, or refuses.
- ``migration_los``: after the switch, the LOs the old column referenced, which
  ``--unlink`` removes (in batches, deleting each row as its LO goes).
- ``migration_objects``: ``--to s3://`` and back: each object the run wrote (or reused)
  or read, its LO, size and sha256 (the LO's number kept as int8, not oid: no reference);
  ``reused``: the object was at its key before the run wrote it (perhaps another run's
  that the same LO made), so the run never removes it.
- ``migration_undecodable``: ``--to text``: LOs the current pass found not valid in the
  database encoding; their rows are left out of the pass, and the run refuses, naming
  them, before the switch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, fields
from datetime import datetime

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from pgblobdump.errors import DatabaseError
from pgblobdump.pg.connect import reason
from pgblobdump.pg.trust import check_state_schema

PHASES = ("filling", "verifying", "switched", "finishing", "done", "aborted")
"""In order. Before ``switched`` the old column is intact; from it on the new one is
verified and in place."""
ACTIVE = ("filling", "verifying", "switched", "finishing")


@dataclass
class Migration:
    id: int
    relid: int
    table_name: str
    column_name: str
    new_column: str
    old_column: str
    direction: str
    """``bytea`` (LO references to bytea), ``lo`` (bytea to LOs), ``text`` (a text column of
    LO references to the LOs' text) or ``oid`` (a column of references retyped oid)."""
    phase: str
    missing: str
    keep_old: bool
    storage: str | None
    compression: str | None
    last_key: list[str] | None
    rows_total: int
    rows_done: int
    recopied: int
    unlinked: int
    lock_ms: int
    """The longest ACCESS EXCLUSIVE lock this run held, in milliseconds."""
    started: datetime
    updated: datetime
    notes: list[str]
    allow_widening: bool
    """``--allow-acl-widening``: LOs some reader of the column may not read are copied."""
    unlink: bool
    """``--unlink``, as the run had it when it started finishing (fixed from then on)."""
    verify_xmin: int | None
    """The oldest transaction running when the verify pass began (xid8): LO pages written
    by it or later may not have been seen, and ``finish`` checks them."""
    source: str
    """The form the old column's values name LOs in (``forms.FORMS``): ``oid`` for an
    oid/lo column, ``int4`` for an integer one, ``text`` for text/varchar/char..."""
    target: str | None
    """``s3`` and ``s3lo``: the place of the objects, ``s3://bucket/prefix``."""
    url: bool
    """``s3``: the keys are written as ``s3://bucket/key``."""


_DIRECTIONS = sql.SQL(", ").join(
    sql.Literal(d) for d in ("bytea", "lo", "text", "oid", "s3", "s3lo")
)


def _ddl(schema: str) -> list[sql.Composed]:
    s = sql.Identifier(schema)
    return [
        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s),
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {}.migrations (
                id bigserial PRIMARY KEY, relid oid NOT NULL, table_name text NOT NULL,
                column_name text NOT NULL, new_column text NOT NULL, old_column text NOT NULL,
                direction text NOT NULL CHECK (direction IN ({directions})),
                phase text NOT NULL, missing text NOT NULL, keep_old boolean NOT NULL,
                storage text, compression text, last_key text[],
                rows_total bigint NOT NULL DEFAULT 0, rows_done bigint NOT NULL DEFAULT 0,
                recopied bigint NOT NULL DEFAULT 0, unlinked bigint NOT NULL DEFAULT 0,
                lock_ms bigint NOT NULL DEFAULT 0,
                started timestamptz NOT NULL DEFAULT now(),
                updated timestamptz NOT NULL DEFAULT now(),
                notes text[] NOT NULL DEFAULT '{{}}')"""
        ).format(s, directions=_DIRECTIONS),
        sql.SQL(
            "CREATE UNIQUE INDEX IF NOT EXISTS migrations_active ON {}.migrations"
            " (relid, column_name) WHERE phase NOT IN ('done', 'aborted')"
        ).format(s),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.migration_redo (run_id bigint NOT NULL,"
            " key text[] NOT NULL, error text, at timestamptz NOT NULL DEFAULT now())"
        ).format(s),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.migration_los (run_id bigint NOT NULL, oid oid NOT NULL,"
            " PRIMARY KEY (run_id, oid))"
        ).format(s),
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.migration_undecodable (run_id bigint NOT NULL,"
            " oid oid NOT NULL, PRIMARY KEY (run_id, oid))"
        ).format(s),
        # s3: an LO (lo) written as the object the column's value names (value), of
        # size bytes and that sha256, verified against the object (verified); s3lo: the
        # LO the run made of the object a value names.
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.migration_objects (run_id bigint NOT NULL,"
            " value text NOT NULL, lo int8 NOT NULL, size int8 NOT NULL, sha256 bytea NOT NULL,"
            " md5 bytea, verified boolean NOT NULL DEFAULT false,"
            " reused boolean NOT NULL DEFAULT false, PRIMARY KEY (run_id, value))"
        ).format(s),
    ]


def _upgrade(conn: psycopg.Connection, schema: str) -> None:
    """Add the columns later releases use to a state table made before them (only then:
    the ALTER would wait behind every session whose sync trigger read the table)."""
    if not _has(conn, schema, "migration_objects", "reused"):
        conn.execute(
            sql.SQL(
                "ALTER TABLE {} ADD COLUMN IF NOT EXISTS reused boolean NOT NULL DEFAULT false"
            ).format(sql.Identifier(schema, "migration_objects"))
        )
    if _has(conn, schema, "migrations", "target"):
        return
    conn.execute(
        sql.SQL(
            "ALTER TABLE {}.migrations"
            " ADD COLUMN IF NOT EXISTS allow_widening boolean NOT NULL DEFAULT false,"
            " ADD COLUMN IF NOT EXISTS unlink boolean NOT NULL DEFAULT false,"
            " ADD COLUMN IF NOT EXISTS verify_xmin bigint,"
            " ADD COLUMN IF NOT EXISTS source text NOT NULL DEFAULT 'oid',"
            " ADD COLUMN IF NOT EXISTS target text,"
            " ADD COLUMN IF NOT EXISTS url boolean NOT NULL DEFAULT false,"
            # Releases before --to text and --to oid checked for bytea and lo only.
            " DROP CONSTRAINT IF EXISTS migrations_direction_check"
        ).format(sql.Identifier(schema))
    )
    conn.execute(
        sql.SQL(
            "ALTER TABLE {}.migrations ADD CONSTRAINT migrations_direction_check"
            " CHECK (direction IN ({}))"
        ).format(sql.Identifier(schema), _DIRECTIONS)
    )


def _has(conn: psycopg.Connection, schema: str, table: str, column: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM pg_attribute WHERE attrelid = %s::regclass"
        " AND attname = %s AND NOT attisdropped",
        (sql.Identifier(schema, table).as_string(conn), column),
    ).fetchone()
    return bool(row and row[0])


def ensure(conn: psycopg.Connection, schema: str) -> None:
    """Create the state schema and tables unless they exist (one transaction), in a
    schema only this role and superusers can have put anything in (pg/trust.py)."""
    check_state_schema(conn, schema, "migrate")
    try:
        with conn.transaction():
            # Two first runs at once would race on CREATE ... IF NOT EXISTS.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('pgblobdump.migrate.state'))")
            for stmt in _ddl(schema):
                conn.execute(stmt)
            _upgrade(conn, schema)
    except psycopg.errors.InsufficientPrivilege as e:
        raise DatabaseError(
            f"cannot keep the migration state in schema {schema}: {reason(e)}; let this role"
            " create it (GRANT CREATE ON DATABASE), or name one it owns with --state-schema"
        ) from e


def exists(conn: psycopg.Connection, schema: str) -> bool:
    """Whether the state tables exist (in a schema safe to read them from)."""
    check_state_schema(conn, schema, "migrate")
    row = conn.execute(
        "SELECT to_regclass(quote_ident(%s) || '.migrations') IS NOT NULL", (schema,)
    ).fetchone()
    return bool(row and row[0])


_COLUMNS = sql.SQL(", ").join(sql.Identifier(f.name) for f in fields(Migration))


def load(conn: psycopg.Connection, schema: str, run_id: int) -> Migration:
    with conn.cursor(row_factory=class_row(Migration)) as cur:
        cur.execute(
            sql.SQL("SELECT {} FROM {}.migrations WHERE id = %s").format(
                _COLUMNS, sql.Identifier(schema)
            ),
            (run_id,),
        )
        row = cur.fetchone()
    assert row is not None, f"migration {run_id} vanished"
    return row


def active(conn: psycopg.Connection, schema: str, relid: int, column: str) -> Migration | None:
    """The unfinished run on ``relid``'s ``column``, if any."""
    return _last(conn, schema, relid, column, "AND phase NOT IN ('done', 'aborted')")


def latest(conn: psycopg.Connection, schema: str, relid: int, column: str) -> Migration | None:
    """The most recent run on ``relid``'s ``column`` (finished or not)."""
    return _last(conn, schema, relid, column, "")


def _last(
    conn: psycopg.Connection, schema: str, relid: int, column: str, extra: str
) -> Migration | None:
    with conn.cursor(row_factory=class_row(Migration)) as cur:
        cur.execute(
            sql.SQL(
                "SELECT {} FROM {}.migrations WHERE relid = %s AND column_name = %s "
                + extra + " ORDER BY id DESC LIMIT 1"
            ).format(_COLUMNS, sql.Identifier(schema)),
            (relid, column),
        )  # fmt: skip
        return cur.fetchone()


def every(conn: psycopg.Connection, schema: str) -> list[Migration]:
    if not exists(conn, schema):
        return []
    with conn.cursor(row_factory=class_row(Migration)) as cur:
        cur.execute(
            sql.SQL("SELECT {} FROM {}.migrations ORDER BY id").format(
                _COLUMNS, sql.Identifier(schema)
            )
        )
        return cur.fetchall()


def update(conn: psycopg.Connection, schema: str, run_id: int, **values: object) -> None:
    """Set fields of run ``run_id`` (and ``updated``), in the caller's transaction."""
    sets = sql.SQL(", ").join(
        sql.SQL("{} = {}").format(sql.Identifier(k), sql.Placeholder(k)) for k in values
    )
    conn.execute(
        sql.SQL("UPDATE {}.migrations SET {}, updated = now() WHERE id = %(id)s").format(
            sql.Identifier(schema), sets
        ),
        {**values, "id": run_id},
    )


def insert(conn: psycopg.Connection, schema: str, **values: object) -> int:
    cols = sql.SQL(", ").join(sql.Identifier(k) for k in values)
    vals = sql.SQL(", ").join(sql.Placeholder(k) for k in values)
    row = conn.execute(
        sql.SQL("INSERT INTO {}.migrations ({}) VALUES ({}) RETURNING id").format(
            sql.Identifier(schema), cols, vals
        ),
        values,
    ).fetchone()
    assert row is not None
    return int(row[0])


_LOCK = "SELECT {}(hashtext('pgblobdump.migrate'), %s)"


def claim(conn: psycopg.Connection, run_id: int) -> None:
    """Take run ``run_id`` for this session (a session advisory lock), or say who has it:
    two sessions driving one run would copy and switch over each other."""
    row = conn.execute(_LOCK.format("pg_try_advisory_lock"), (run_id,)).fetchone()
    if not (row and row[0]):
        holder = conn.execute(
            "SELECT string_agg(l.pid::text, ', ') FROM pg_locks l WHERE l.locktype = 'advisory'"
            " AND l.classid::int = hashtext('pgblobdump.migrate') AND l.objid::int = %s"
            " AND l.granted",
            (run_id,),
        ).fetchone()
        pid = f" (server process {holder[0]})" if holder and holder[0] else ""
        raise DatabaseError(
            f"run {run_id} is going on in another session{pid}: wait for it, or stop it first"
        )


@contextlib.contextmanager
def claimed(conn: psycopg.Connection, run_id: int, held: bool = False) -> Iterator[None]:
    """``claim`` for the length of a block (``held``: it was claimed already); released
    after, if the connection still is."""
    if not held:
        claim(conn, run_id)
    try:
        yield
    finally:
        with contextlib.suppress(psycopg.Error):
            conn.execute(_LOCK.format("pg_advisory_unlock"), (run_id,))
