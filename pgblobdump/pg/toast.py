"""What a server offers for TOAST."""

from __future__ import annotations

import psycopg


def lz4_available(conn: psycopg.Connection) -> bool:
    """Whether the server was built with lz4 (it then offers it for TOAST compression;
    of the wheels, only PostgreSQL 17's is)."""
    row = conn.execute(
        "SELECT 'lz4' = ANY (enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
    ).fetchone()
    return bool(row and row[0])


def storages(lz4: bool) -> list[tuple[str, str | None]]:
    """(storage, compression) pairs to measure; lz4 only where the server was built with it."""
    out: list[tuple[str, str | None]] = [("EXTENDED", "pglz")]
    if lz4:
        out.append(("EXTENDED", "lz4"))
    out.append(("EXTERNAL", None))
    return out
