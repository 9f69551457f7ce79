"""``bench toast``: values whose lengths sweep across the TOAST threshold (~2 KB), stored
EXTENDED (pglz, and lz4 where the server has it) and EXTERNAL (large-text-toast.txt), and
what one access of a value reads inline vs TOASTed (scaling-jsonb-toast.txt).

For each length and storage a table of ``rows`` values is loaded with COPY (binary) from
the client in one transaction, timed (insert MB/s). Then, from the catalog: bytes per row
on disk (``pg_total_relation_size``: heap with its index, and the TOAST table with its
index), the share of values stored compressed (``pg_column_compression``) and their
stored size against their length (``pg_column_size`` / ``octet_length``); a
``substring`` of the first 100 bytes of every value, timed (median of ``SUBSTRING_RUNS``);
and ``EXPLAIN (ANALYZE, BUFFERS)`` of reading one whole value by key, run after one
unmeasured access so that catalog look-ups do not count: the buffers that one access
touches. Each table has a ``unique_tag`` name, is created without IF NOT EXISTS (a name
taken fails the run) and is dropped after its measurement, on failure too.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from pgblobdump.bench.server import PREFIX, Server, unique_tag
from pgblobdump.bench.toastspec import ToastSpec
from pgblobdump.generate.content import ContentSource
from pgblobdump.generate.spec import Content, SizeSpec
from pgblobdump.pg.toast import storages
from pgblobdump.report.reporter import QUIET, Reporter

SUBSTRING_RUNS = 3


@dataclass(frozen=True)
class ToastRow:
    """One table of ``length``-byte values under one storage; per-row figures are the
    relation's size over its row count (pages included, so small tables round up)."""

    length: int
    storage: str
    """``EXTENDED pglz``, ``EXTENDED lz4``, ``EXTERNAL``."""
    bytes_per_row: float
    heap_bytes_per_row: float
    """The table and its primary key; values stored inline count here."""
    toast_bytes_per_row: float
    """The TOAST table and its index; values stored out of line count here."""
    compressed_share: float
    """Values stored compressed, 0..1 (``pg_column_compression`` is not null)."""
    stored_avg: float
    stored_ratio: float
    """Average ``pg_column_size`` over average ``octet_length``: under 1 when compressed."""
    insert_mb_per_s: float
    substring_rows_per_s: float
    buffers_per_access: int
    """Shared buffers hit or read to fetch one whole value by its key."""


@dataclass
class ToastResult:
    rows: list[ToastRow]
    server: dict[str, object]
    notes: list[str] = field(default_factory=list)


def run(server: Server, spec: ToastSpec, reporter: Reporter = QUIET) -> ToastResult:
    content = spec.content or (Content.TEXT if spec.kind == "text" else Content.RANDOM)
    table = sql.Identifier(f"{PREFIX}{unique_tag()}_toast")
    rows: list[ToastRow] = []
    kinds = storages(server.lz4)
    # Counted in tables and in the bytes loaded into them: the long values take most of
    # the time (at 128,000 bytes a table takes longer than all the short ones), so an ETA
    # by count alone sat at 24/27 saying two seconds for most of a minute.
    reporter.task("toast", len(spec.lengths) * len(kinds))
    reporter.totals(len(spec.lengths) * len(kinds), spec.rows * sum(spec.lengths) * len(kinds))
    loaded = 0
    with server.connect("running the TOAST benchmark") as conn:
        for length in spec.lengths:
            src = ContentSource(SizeSpec(length, length), content, spec.seed)
            values = [src.data(length) for _ in range(spec.rows)]
            for storage, compression in kinds:
                # No IF NOT EXISTS: a table of that name is someone else's, and fails the run.
                conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v {})").format(
                    table, sql.SQL(spec.kind)))  # fmt: skip
                try:
                    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN v SET STORAGE {}").format(
                        table, sql.SQL(storage)))  # fmt: skip
                    if compression:
                        conn.execute(
                            sql.SQL("ALTER TABLE {} ALTER COLUMN v SET COMPRESSION {}").format(
                                table, sql.SQL(compression)
                            )
                        )
                    label = f"{storage} {compression}" if compression else storage
                    rows.append(_measure(conn, table, length, label, values, spec.kind))
                finally:
                    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
                loaded += spec.rows * length
                reporter.progress(len(rows), loaded)
    notes = list(server.notes)
    if content is Content.TEXT:
        notes.append("text: words and spaces, which compress about 3x (generate's text content)")
    elif content is Content.RANDOM:
        notes.append("random bytes: nothing compresses; EXTENDED still tries, and pays for it")
    notes.append("insert: one binary COPY of all rows in one transaction per table")
    return ToastResult(rows, server.describe(), notes)


def _measure(conn: psycopg.Connection[Any], t: sql.Identifier, length: int, label: str,
             values: list[bytes], kind: str) -> ToastRow:  # fmt: skip
    t0 = time.perf_counter()
    with (
        conn.transaction(),
        conn.cursor() as cur,
        cur.copy(sql.SQL("COPY {} (id, v) FROM STDIN (FORMAT binary)").format(t)) as copy,
    ):
        copy.set_types(["int4", kind])
        for i, v in enumerate(values):
            copy.write_row((i, v.decode() if kind == "text" else v))
    insert_s = time.perf_counter() - t0
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(t))
    sizes = conn.execute(
        "SELECT pg_total_relation_size(c.oid),"
        " coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)"
        " FROM pg_class c WHERE c.oid = %s::regclass",
        (t.as_string(conn),),
    ).fetchone()
    total, toast = sizes if sizes else (0, 0)
    stats = conn.execute(
        sql.SQL(
            "SELECT avg((pg_column_compression(v) IS NOT NULL)::int), avg(pg_column_size(v)),"
            " avg(octet_length(v)) FROM {}"
        ).format(t)
    ).fetchone()
    share, stored, raw = (float(x or 0) for x in stats) if stats else (0.0, 0.0, 0.0)
    sub_q = sql.SQL("SELECT sum(length(substring(v FROM 1 FOR 100))) FROM {}").format(t)
    took = []
    for _ in range(SUBSTRING_RUNS):
        t0 = time.perf_counter()
        conn.execute(sub_q)
        took.append(time.perf_counter() - t0)
    sub_s = statistics.median(took)
    # md5() reads the whole value: its TOAST chunks count as the access's buffers. The
    # first access fills this backend's catalog caches, whose reads would count too.
    access = sql.SQL("SELECT md5(v) FROM {} WHERE id = %s").format(t)
    key = (len(values) // 2,)
    conn.execute(access, key)
    plan = conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ") + access, key)
    row = plan.fetchone()
    node = row[0][0]["Plan"] if row else {}
    buffers = int(node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0))
    n = len(values)
    return ToastRow(
        length=length, storage=label,
        bytes_per_row=total / n, heap_bytes_per_row=(total - toast) / n,
        toast_bytes_per_row=toast / n,
        compressed_share=share, stored_avg=stored, stored_ratio=stored / raw if raw else 1.0,
        insert_mb_per_s=n * length / insert_s / 1e6 if insert_s else 0.0,
        substring_rows_per_s=n / sub_s if sub_s else 0.0,
        buffers_per_access=buffers,
    )  # fmt: skip
