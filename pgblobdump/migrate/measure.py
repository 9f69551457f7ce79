"""``migrate plan --measure``: the storage advice from the server itself rather than a zstd
estimate, the way ``bench toast`` measures it.

A sample of the column's LOs (up to ``SAMPLE_LOS``, their first ``PER_LO`` bytes) is written
into one temporary table per storage the server offers (EXTENDED with pglz, with lz4
where built in, EXTERNAL), timed; then the stored size of each and the time of reading
every value back. The advice: the compression that saves at least a quarter of the space
against EXTERNAL (the smaller of pglz and lz4, the faster on a tie within 10%), else
EXTERNAL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.migrate.advice import Storage
from pgblobdump.pg.toast import storages

SAMPLE_LOS = 64
PER_LO = 1 << 20
"""The first MiB of each sampled LO: at most 64 MiB written per storage."""
SAVING = 0.25


@dataclass(frozen=True)
class Measured:
    storage: str
    compression: str | None
    stored_bytes: int
    raw_bytes: int
    write_s: float
    read_s: float

    @property
    def label(self) -> str:
        return f"{self.storage} {self.compression}" if self.compression else self.storage


def measure(conn: psycopg.Connection, oids: sql.Composable, lz4: bool) -> list[Measured]:
    """``oids``: a query of readable, existing LOs as column ``o`` (a sample)."""
    out: list[Measured] = []
    with conn.transaction():
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE pgbd_measure_src ON COMMIT DROP AS SELECT o FROM ({}) s LIMIT %s"
            ).format(oids),
            (SAMPLE_LOS,),
        )
        for storage, compression in storages(lz4):
            t = sql.Identifier(f"pgbd_measure_{storage}_{compression or 'none'}".lower())
            conn.execute(sql.SQL("CREATE TEMP TABLE {} (v bytea) ON COMMIT DROP").format(t))
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN v SET STORAGE {}").format(t, sql.SQL(storage))
            )
            if compression:
                conn.execute(
                    sql.SQL("ALTER TABLE {} ALTER COLUMN v SET COMPRESSION {}").format(
                        t, sql.SQL(compression)
                    )
                )
            t0 = time.perf_counter()
            conn.execute(
                sql.SQL("INSERT INTO {} SELECT lo_get(o, 0, %s) FROM pgbd_measure_src").format(t),
                (PER_LO,),
            )
            write_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            row = conn.execute(
                sql.SQL(
                    "SELECT coalesce(sum(pg_column_size(v)), 0), coalesce(sum(octet_length(v)), 0),"
                    " count(md5(v)) FROM {}"
                ).format(t)
            ).fetchone()
            read_s = time.perf_counter() - t0
            assert row is not None
            out.append(Measured(storage, compression, int(row[0]), int(row[1]), write_s, read_s))
    return out


def advise_measured(results: list[Measured]) -> Storage:
    external = next(m for m in results if m.compression is None)
    compressed = [m for m in results if m.compression is not None]
    figures = "; ".join(
        f"{m.label}: {m.stored_bytes / max(m.raw_bytes, 1):.0%} stored, write"
        f" {m.write_s * 1000:.0f} ms, read {m.read_s * 1000:.0f} ms"
        for m in results
    )
    if not external.raw_bytes:
        return Storage("EXTENDED", compressed[0].compression, f"measured nothing ({figures})")
    best = min(compressed, key=lambda m: m.stored_bytes)
    close = [m for m in compressed if m.stored_bytes <= best.stored_bytes * 1.1]
    best = min(close, key=lambda m: m.write_s + m.read_s)
    if best.stored_bytes <= external.stored_bytes * (1 - SAVING):
        return Storage("EXTENDED", best.compression, f"measured on a sample: {figures}")
    return Storage(
        "EXTERNAL", None, f"measured on a sample, compression saves under a quarter: {figures}"
    )
