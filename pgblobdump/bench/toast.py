"""``bench toast``: values whose lengths sweep across the TOAST threshold (~2 KB), stored
EXTENDED (pglz, and lz4 where the server has it) and EXTERNAL (large-text-toast.txt), and
what one access of a value reads inline vs TOASTed (scaling-jsonb-toast.txt).

For each length and storage a table of ``rows`` values is loaded with COPY (binary) from
the client, timed (insert MB/s). Then, from the catalog: bytes per row on disk (heap and
TOAST table), the share of values stored compressed (``pg_column_compression``) and
their average stored size (``pg_column_size``); a ``substring`` read of the first 100
bytes of every value, timed; and ``EXPLAIN (ANALYZE, BUFFERS)`` of fetching one value
by key: the buffers that one access touches. Tables are named after this process and
dropped at the end, on failure too.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from psycopg import sql

from pgblobdump.bench.server import Server
from pgblobdump.generate.content import ContentSource
from pgblobdump.generate.spec import Content, SizeSpec
from pgblobdump.report.reporter import QUIET, Reporter

DEFAULT_LENGTHS = (500, 1000, 1500, 2000, 2500, 4000, 8000, 32_000, 128_000)


@dataclass(frozen=True)
class ToastSpec:
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    rows: int = 2000
    kind: str = "text"
    """``text`` (compressible words) or ``bytea`` (random bytes unless ``content``)."""
    content: Content | None = None
    seed: int = 0


@dataclass(frozen=True)
class ToastRow:
    length: int
    storage: str
    """``EXTENDED pglz``, ``EXTENDED lz4``, ``EXTERNAL``."""
    bytes_per_row: float
    toast_bytes_per_row: float
    compressed_share: float
    stored_avg: float
    insert_mb_per_s: float
    substring_rows_per_s: float
    buffers_per_access: int


@dataclass
class ToastResult:
    rows: list[ToastRow]
    server: dict[str, object]
    notes: list[str] = field(default_factory=list)


def storages(lz4: bool) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = [("EXTENDED", "pglz")]
    if lz4:
        out.append(("EXTENDED", "lz4"))
    out.append(("EXTERNAL", None))
    return out


def run(server: Server, spec: ToastSpec, reporter: Reporter = QUIET) -> ToastResult:
    if spec.kind not in ("text", "bytea"):
        from pgblobdump.errors import UsageError

        raise UsageError("--type must be text or bytea")
    content = spec.content or (Content.TEXT if spec.kind == "text" else Content.RANDOM)
    table = f"pgbd_bench_toast_{os.getpid()}"
    rows: list[ToastRow] = []
    kinds = storages(server.lz4)
    reporter.task("toast", len(spec.lengths) * len(kinds))
    with server.connect("running the TOAST benchmark") as conn:
        t = sql.Identifier(table)
        try:
            for length in spec.lengths:
                src = ContentSource(SizeSpec(length, length), content, spec.seed)
                values = [src.data(length) for _ in range(spec.rows)]
                for storage, compression in kinds:
                    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(t))
                    conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, v {})").format(
                        t, sql.SQL(spec.kind)))  # fmt: skip
                    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN v SET STORAGE {}").format(
                        t, sql.SQL(storage)))  # fmt: skip
                    if compression:
                        conn.execute(
                            sql.SQL("ALTER TABLE {} ALTER COLUMN v SET COMPRESSION {}").format(
                                t, sql.SQL(compression)
                            )
                        )
                    rows.append(_measure(conn, t, length, storage, compression, values, spec))
                    reporter.progress(len(rows), 0)
        finally:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    notes = list(server.notes)
    if spec.kind == "text":
        notes.append("text: words and spaces, which compress about 3x (generate's text content)")
    return ToastResult(rows, server.describe(), notes)


def _measure(conn: Any, t: sql.Identifier, length: int, storage: str, compression: str | None,
             values: list[bytes], spec: ToastSpec) -> ToastRow:  # fmt: skip
    kind = spec.kind
    t0 = time.perf_counter()
    with (
        conn.transaction(),
        conn.cursor().copy(sql.SQL("COPY {} (id, v) FROM STDIN (FORMAT binary)").format(t)) as copy,
    ):
        copy.set_types(["int4", kind])
        for i, v in enumerate(values):
            copy.write_row((i, v.decode() if kind == "text" else v))
    insert_s = time.perf_counter() - t0
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(t))
    total, toast = conn.execute(
        "SELECT pg_total_relation_size(%(t)s::regclass),"
        " coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)"
        " FROM pg_class c WHERE c.oid = %(t)s::regclass",
        {"t": t.as_string(conn)},
    ).fetchone()
    share, stored = conn.execute(
        sql.SQL(
            "SELECT avg((pg_column_compression(v) IS NOT NULL)::int), avg(pg_column_size(v))"
            " FROM {}"
        ).format(t)
    ).fetchone()
    t0 = time.perf_counter()
    conn.execute(sql.SQL("SELECT sum(length(substring(v FROM 1 FOR 100))) FROM {}").format(t))
    sub_s = time.perf_counter() - t0
    plan = conn.execute(
        sql.SQL(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT md5(v) FROM {} WHERE id = %s"
        ).format(t),
        (len(values) // 2,),
    ).fetchone()[0]
    # md5() reads the whole value: its TOAST chunks count as the access's buffers.
    node = plan[0]["Plan"]
    buffers = int(node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0))
    n = len(values)
    return ToastRow(
        length=length, storage=f"{storage} {compression}" if compression else storage,
        bytes_per_row=total / n, toast_bytes_per_row=toast / n,
        compressed_share=float(share or 0), stored_avg=float(stored or 0),
        insert_mb_per_s=n * length / insert_s / 1e6 if insert_s else 0.0,
        substring_rows_per_s=n / sub_s if sub_s else 0.0,
        buffers_per_access=buffers,
    )  # fmt: skip
