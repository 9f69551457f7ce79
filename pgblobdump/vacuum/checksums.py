"""``inspect --checksums``: a digest of every LO's bytes, computed on the server.

Each LO's md5 is computed where the bytes are (``md5(lo_get(oid))``; an LO over 1 GB,
which ``lo_get`` refuses, as the md5 of the md5s of its RANGE-byte ranges), so only 16
bytes an LO cross the network. The database's digest is the SHA-256 of ``"oid md5\\n"``
lines in OID order: two databases with the same LOs holding the same bytes give the same
digest (after a copy, a sync or a restore), whoever owns them. Read in one snapshot."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError
from pgblobdump.pg.query import one, scalar
from pgblobdump.pgconstants import INV_READ, OID_MAX

WINDOW = 5_000
"""LOs per statement."""
RANGE = 256 << 20
"""Bytes per md5 of an LO over 1 GB."""


@dataclass(frozen=True)
class Checksums:
    los: int
    digest: str
    """SHA-256 (hex) of ``"oid md5\\n"`` in OID order; of nothing when there are no LOs."""
    over_1gb: int
    """LOs digested range by range (their md5 is that of their ranges' md5s)."""


def checksums(conn: psycopg.Connection) -> Checksums:
    """Every LO of the database ``conn`` is connected to (autocommit), in one snapshot."""
    h = hashlib.sha256()
    los = big = 0
    start = 0
    try:
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            while True:
                rows = _window(conn, start, WINDOW)
                if rows is None:  # an LO over 1 GB in the window: one LO at a time
                    rows = _window(conn, start, 1)
                    if rows is None:
                        oid = _next_oid(conn, start)
                        rows = [(oid, _by_ranges(conn, oid))]
                        big += 1
                if not rows:
                    break
                for oid, md5 in rows:
                    h.update(f"{oid} {md5}\n".encode())
                los += len(rows)
                if rows[-1][0] >= OID_MAX:
                    break
                start = rows[-1][0] + 1
    except psycopg.errors.InsufficientPrivilege as e:
        raise DatabaseError(
            f"inspect --checksums reads every LO's bytes: {e.diag.message_primary}"
        ) from e
    return Checksums(los, h.hexdigest(), big)


def _window(conn: psycopg.Connection, start: int, limit: int) -> list[tuple[int, str]] | None:
    """(oid, md5) of up to ``limit`` LOs from OID ``start``; None when one is over 1 GB."""
    try:
        with conn.transaction():  # a savepoint: "too large" leaves the snapshot usable
            rows = conn.execute(
                "SELECT m.oid::int8, md5(pg_catalog.lo_get(m.oid))"
                " FROM pg_catalog.pg_largeobject_metadata m"
                " WHERE m.oid >= %s::int8::oid ORDER BY m.oid LIMIT %s",
                (start, limit),
            ).fetchall()
    except psycopg.errors.ProgramLimitExceeded:
        return None
    return [(int(o), str(d)) for o, d in rows]


def _next_oid(conn: psycopg.Connection, start: int) -> int:
    row = one(
        conn,
        "SELECT min(oid)::int8 FROM pg_catalog.pg_largeobject_metadata WHERE oid >= %s::int8::oid",
        (start,),
    )
    assert row[0] is not None
    return int(row[0])


def _by_ranges(conn: psycopg.Connection, oid: int) -> str:
    """The md5 of the md5s of the LO's RANGE-byte ranges, each computed on the server."""
    size = scalar(
        conn,
        "SELECT pg_catalog.lo_lseek64(fd, 0, 2), pg_catalog.lo_close(fd)"
        " FROM pg_catalog.lo_open(%s::int8::oid, %s) fd",
        (oid, INV_READ),
    )
    parts = conn.execute(
        sql.SQL(
            "SELECT md5(pg_catalog.lo_get({o}::int8::oid, r, {n})) FROM"
            " pg_catalog.generate_series(0::int8, {last}::int8, {n}::int8) r ORDER BY r"
        ).format(o=sql.Literal(oid), n=sql.Literal(RANGE), last=sql.Literal(size - 1))
    ).fetchall()
    return hashlib.md5("".join(str(p[0]) for p in parts).encode()).hexdigest()
