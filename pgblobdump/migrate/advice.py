"""Storage advice for a new bytea column from a zstd sample of the LOs it will hold.

It follows the seeds: incompressible data (zstd saves under a quarter of a sample, so pglz
would give up) goes EXTERNAL, which also makes ``substring`` reads cheap
(binary-data-performance.txt); compressible data stays EXTENDED, with lz4 where the server
was built with it (large-text-toast.txt), pglz otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import zstandard
from psycopg import sql

SAMPLE_LOS = 16
SAMPLE_BYTES = 128 * 1024
"""Compressibility: the first 128 KiB of up to 16 LOs, compressed with zstd level 3."""
INCOMPRESSIBLE = 0.75
"""A compressed/raw ratio at or above this: pglz (which wants 25% saved) would store raw."""


@dataclass(frozen=True)
class Storage:
    """What to give the new bytea column: ``storage`` (EXTERNAL/EXTENDED) and
    ``compression`` (lz4, pglz, or None for EXTERNAL) with the reason."""

    storage: str
    compression: str | None
    reason: str


def sample_percent(conn: psycopg.Connection, relation: sql.Composable) -> float:
    """A BERNOULLI percentage that picks about 8 x SAMPLE_LOS rows of ``relation``."""
    row = conn.execute(
        sql.SQL("SELECT reltuples FROM pg_class WHERE oid = {}::regclass").format(
            sql.Literal(relation.as_string(conn))
        )
    ).fetchone()
    rows = float(row[0]) if row and row[0] and row[0] > 0 else 0.0
    return 100.0 if rows <= 8 * SAMPLE_LOS else max(0.0001, 800.0 * SAMPLE_LOS / rows)


def compress_ratio(conn: psycopg.Connection, oids: sql.Composable) -> float | None:
    """zstd's compressed/raw ratio over the start of a few LOs (``oids``: a query of
    readable, existing LOs as column ``o``), None when none is sampled."""
    rows = conn.execute(
        sql.SQL("SELECT lo_get(o, 0, %s) FROM ({}) s LIMIT %s").format(oids),
        (SAMPLE_BYTES, SAMPLE_LOS),
    ).fetchall()
    raw = sum(len(r[0]) for r in rows)
    if not raw:
        return None
    packer = zstandard.ZstdCompressor(level=3)
    return sum(len(packer.compress(bytes(r[0]))) for r in rows) / raw


def column_sample(
    conn: psycopg.Connection, table: sql.Identifier, oid: sql.Composable
) -> sql.Composed:
    """A sampling query of the existing LOs a column names (``oid``: the OID a row's
    value names), for ``compress_ratio``."""
    return sql.SQL(
        "SELECT o FROM (SELECT {c} AS o FROM {t} TABLESAMPLE BERNOULLI ({p})) s"
        " WHERE o IS NOT NULL AND EXISTS"
        " (SELECT 1 FROM pg_catalog.pg_largeobject_metadata m WHERE m.oid = s.o)"
    ).format(c=oid, t=table, p=sql.Literal(sample_percent(conn, table)))


def advise(ratio: float | None, lz4: bool) -> Storage:
    if ratio is None:
        return Storage("EXTENDED", "lz4" if lz4 else "pglz", "no data sampled: the default")
    pct = f"zstd keeps {ratio:.0%} of a sample"
    if ratio >= INCOMPRESSIBLE:
        return Storage(
            "EXTERNAL", None, f"{pct}: incompressible, so EXTERNAL (no compression attempt,"
            " cheap substring reads)",
        )  # fmt: skip
    if lz4:
        return Storage("EXTENDED", "lz4", f"{pct}: compressible, lz4 (fast, built in here)")
    return Storage("EXTENDED", "pglz", f"{pct}: compressible; this server has no lz4, so pglz")
