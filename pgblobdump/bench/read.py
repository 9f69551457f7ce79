"""``bench read``: the same bytes read as a file, an LO, and bytea stored EXTERNAL and
EXTENDED (binary-data-performance.txt), streamed in chunks and read whole.

Setup writes the content once as a file and as an LO (streamed from the client in
chunks), then copies the LO into the two bytea tables on the server (``lo_get``), so all
four hold the same bytes. Reads go through the client, as an application's would:
- file: ``read(chunk)`` to the end, or one ``read()``;
- LO: ``lo_get(oid, offset, chunk)`` per chunk, or ``lo_get(oid)``;
- bytea: ``substring(data FROM offset FOR chunk)`` per chunk, or the column;
results in binary format (no hex). Every read checks the byte count. Each (size, method,
mode) is read ``repeat`` times: median, min and max, MB/s and the ratio to the file.
Everything made is removed at the end, on failure too: the file, the LO (by its OID), the
tables (named after this process).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from pgblobdump.bench.server import Server
from pgblobdump.compare.ratios import Spread
from pgblobdump.errors import DatabaseError, from_os_error
from pgblobdump.generate.content import ContentSource
from pgblobdump.generate.spec import Content, SizeSpec
from pgblobdump.report.reporter import QUIET, Reporter

METHODS = ("file", "lo", "bytea_external", "bytea_extended")
MODES = ("chunked", "whole")
WRITE_CHUNK = 1 << 20


@dataclass(frozen=True)
class ReadSpec:
    sizes: tuple[int, ...] = (350_000_000, 4_500_000)
    chunk: int = 1 << 20
    repeat: int = 5
    content: Content = Content.RANDOM
    cold: bool = False
    directory: Path | None = None
    seed: int = 0


@dataclass(frozen=True)
class ReadRow:
    size: int
    method: str
    mode: str
    seconds: Spread
    mb_per_s: float
    vs_file: float | None
    """Median time over the file's median time, same size and mode."""


@dataclass
class ReadResult:
    rows: list[ReadRow]
    cache: str
    server: dict[str, object]
    notes: list[str] = field(default_factory=list)


class _Setup:
    """The four copies of one size's content, and their removal."""

    def __init__(self, conn: psycopg.Connection, directory: Path, tag: str) -> None:
        self.conn, self.directory, self.tag = conn, directory, tag
        self.path = directory / f"pgbd-bench-{tag}.bin"
        self.oid: int | None = None
        self.tables = {m: f"pgbd_bench_{tag}_{m}" for m in ("bytea_external", "bytea_extended")}

    def make(self, size: int, spec: ReadSpec) -> None:
        src = ContentSource(SizeSpec(WRITE_CHUNK, WRITE_CHUNK), spec.content, spec.seed)
        c = self.conn
        with c.transaction():
            self.oid = int(c.execute("SELECT lo_create(0)").fetchone()[0])  # type: ignore[index]
        try:
            with self.path.open("wb") as f, c.transaction():
                done = 0
                while done < size:
                    piece = src.data(min(WRITE_CHUNK, size - done))
                    f.write(piece)
                    c.execute("SELECT lo_put(%s, %s, %s)", (self.oid, done, piece))
                    done += len(piece)
        except OSError as e:
            raise from_os_error(e, "write") from e
        for method, table in self.tables.items():
            storage = "EXTERNAL" if method == "bytea_external" else "EXTENDED"
            t = sql.Identifier(table)
            c.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, data bytea)").format(t))
            c.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN data SET STORAGE {}").format(
                    t, sql.SQL(storage)
                )
            )
            c.execute(sql.SQL("INSERT INTO {} VALUES (1, lo_get(%s))").format(t), (self.oid,))
        c.execute(
            sql.SQL("VACUUM ANALYZE {}").format(
                sql.SQL(", ").join(map(sql.Identifier, self.tables.values()))
            )
        )

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        for table in self.tables.values():
            self.conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        if self.oid is not None:
            self.conn.execute(
                "SELECT lo_unlink(%s) FROM pg_largeobject_metadata WHERE oid = %s",
                (self.oid, self.oid),
            )
            self.oid = None


def _reader(setup: _Setup, conn: psycopg.Connection, method: str, mode: str,
            chunk: int, size: int) -> Callable[[], int]:  # fmt: skip
    """A function that reads the content once and returns the bytes it got."""
    if method == "file":

        def read_file() -> int:
            n = 0
            with setup.path.open("rb", buffering=0) as f:
                if mode == "whole":
                    return len(f.read())
                while block := f.read(chunk):
                    n += len(block)
            return n

        return read_file
    cur = conn.cursor(binary=True)
    if method == "lo":
        whole_q, part_q = "SELECT lo_get(%s)", "SELECT lo_get(%s, %s, %s)"
        key: int = int(setup.oid or 0)
    else:
        t = sql.Identifier(setup.tables[method])
        whole_q = sql.SQL("SELECT data FROM {} WHERE id = %s").format(t).as_string(conn)
        part_q = (
            sql.SQL("SELECT substring(data FROM %s + 1 FOR %s) FROM {} WHERE id = %s")
            .format(t)
            .as_string(conn)
        )
        key = 1

    def read_db() -> int:
        if mode == "whole":
            row = cur.execute(whole_q, (key,)).fetchone()
            return len(row[0]) if row else 0
        n = 0
        while n < size:
            if method == "lo":
                row = cur.execute(part_q, (key, n, chunk)).fetchone()
            else:
                row = cur.execute(part_q, (n, chunk, key)).fetchone()
            got = len(row[0]) if row else 0
            if not got:
                break
            n += got
        return n

    return read_db


def run(server: Server, spec: ReadSpec, reporter: Reporter = QUIET) -> ReadResult:
    tag = str(os.getpid())
    notes: list[str] = []
    rows: list[ReadRow] = []
    with tempfile.TemporaryDirectory(prefix="pgbd-bench-", dir=spec.directory) as tmp:
        for size in spec.sizes:
            rows += _one_size(server, spec, Path(tmp), tag, size, reporter)
    cache = "cold (caches dropped before each read)" if spec.cold else "warm"
    if not spec.cold:
        notes.append("warm: repeated reads come from the OS page cache and shared_buffers;"
                     " --cold (as root) drops them between reads")  # fmt: skip
    return ReadResult(rows, cache, server.describe(), notes + server.notes)


def _one_size(server: Server, spec: ReadSpec, directory: Path, tag: str, size: int,
              reporter: Reporter) -> list[ReadRow]:  # fmt: skip
    times: dict[tuple[str, str], list[float]] = {}
    with server.connect("setting up the read benchmark") as setup_conn:
        setup = _Setup(setup_conn, directory, f"{tag}_{size}")
        try:
            reporter.note(f"writing {size:,} bytes as a file, an LO and two bytea tables")
            setup.make(size, spec)
            for rep in range(spec.repeat):
                for method in METHODS:
                    for mode in MODES:
                        if spec.cold:
                            server.cold()
                        with server.connect("reading") as conn:
                            read = _reader(setup, conn, method, mode, spec.chunk, size)
                            t0 = time.perf_counter()
                            got = read()
                            took = time.perf_counter() - t0
                        if got != size:
                            raise DatabaseError(f"{method} {mode}: read {got:,} of {size:,} bytes")
                        times.setdefault((method, mode), []).append(took)
                reporter.progress(rep + 1, 0)
        finally:
            with server.connect("cleaning up") as conn:
                setup.conn = conn
                setup.remove()
    out: list[ReadRow] = []
    for mode in MODES:
        base = Spread.of(times[("file", mode)]).median
        for method in METHODS:
            s = Spread.of(times[(method, mode)])
            out.append(ReadRow(size, method, mode, s, size / s.median / 1e6 if s.median else 0.0,
                               s.median / base if base else None))  # fmt: skip
    return out
