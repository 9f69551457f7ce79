"""What copy and sync keep in the target database, in schema ``pgblobdump_sync`` (``sync
--forget`` drops it): which LOs they made, so that a rerun resumes and ``--delete`` and
conflicts never touch an LO they did not make.

``made`` holds, for each transaction that created or rewrote LOs, their OID ranges and the
transaction's id, entered in that very transaction (so it commits with the LOs or not at
all). An LO is *ours* when a row covers its OID and its ``pg_largeobject_metadata`` tuple
still carries that transaction's id as ``xmin``: an LO made by another session at an OID
we once used (after a clean-up removed ours), or one whose owner or ACL was changed on the
target since, is not ours any more, whatever the rows say.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError

SCHEMA = "pgblobdump_sync"
"""The target's schema of copy/sync state."""

_CREATE = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
COMMENT ON SCHEMA {SCHEMA} IS 'pgblobdump copy/sync state: which LOs they made (sync --forget drops it)';
CREATE TABLE IF NOT EXISTS {SCHEMA}.made (
    first int8 NOT NULL, last int8 NOT NULL, xid xid8 NOT NULL);
CREATE INDEX IF NOT EXISTS made_first ON {SCHEMA}.made (first, last);
"""  # noqa: E501

LOCK_KEY = 0x70676264
"""The advisory lock under which the schema is created (parts of one copy race for it)."""


def xid_matches(meta: str) -> str:
    """SQL: whether the metadata row ``meta`` still carries the xid of a ``made`` row
    ``d`` (xid8 folded to the 32-bit xid that ``xmin`` shows)."""
    return f"{meta}.xmin = mod(d.xid::text::int8, 4294967296)::text::xid"


def ours(meta: str = "m") -> str:
    """SQL: whether the LO of metadata row ``meta`` is one copy/sync made (see above)."""
    return (
        f"EXISTS (SELECT 1 FROM {SCHEMA}.made d WHERE d.first <= {meta}.oid::int8"
        f" AND d.last >= {meta}.oid::int8 AND {xid_matches(meta)})"
    )


def exists(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.made",)).fetchone()
    return bool(row and row[0])


def ensure(conn: psycopg.Connection) -> None:
    """Create the schema and its tables unless they exist (``conn`` in autocommit)."""
    if exists(conn):
        return
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            conn.execute(_CREATE)
    except psycopg.errors.InsufficientPrivilege as e:
        raise DatabaseError(
            f"copy keeps what it made in schema {SCHEMA} of the target, and this role may"
            f" not create it ({e.diag.message_primary}); create it and grant this role"
            " CREATE and USAGE on it, or connect as its owner"
        ) from e


def record(conn: psycopg.Connection, ranges: Sequence[tuple[int, int]], xid: str) -> None:
    """Enter LO ranges made by transaction ``xid`` (run inside that transaction)."""
    if not ranges:
        return
    conn.execute(
        f"INSERT INTO {SCHEMA}.made SELECT f, l, %s::xid8"
        " FROM unnest(%s::int8[], %s::int8[]) AS u(f, l)",
        (xid, [lo for lo, _ in ranges], [hi for _, hi in ranges]),
    )


def existing(conn: psycopg.Connection, oids: Sequence[int]) -> tuple[list[int], list[int]]:
    """Which of ``oids`` exist on the target: (ours, others), each ascending."""
    if not exists(conn):
        rows = conn.execute(
            "SELECT oid::int8, false FROM pg_catalog.pg_largeobject_metadata m"
            " WHERE oid = ANY(%s::int8[]::oid[]) ORDER BY 1",
            (list(oids),),
        ).fetchall()
    else:
        rows = conn.execute(
            sql.SQL(
                "SELECT m.oid::int8, {} FROM pg_catalog.pg_largeobject_metadata m"
                " WHERE m.oid = ANY(%s::int8[]::oid[]) ORDER BY 1"
            ).format(sql.SQL(ours("m"))),
            (list(oids),),
        ).fetchall()
    mine = [int(o) for o, is_ours in rows if is_ours]
    others = [int(o) for o, is_ours in rows if not is_ours]
    return mine, others


def forget(conn: psycopg.Connection) -> bool:
    """Drop the schema (``sync --forget``); False when there was none."""
    if not exists(conn):
        return False
    conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    return True
