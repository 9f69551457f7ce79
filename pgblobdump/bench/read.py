"""``bench read``: the same bytes read as a file, an LO, and bytea stored EXTERNAL and
EXTENDED (binary-data-performance.txt), streamed in chunks and read whole.

Setup writes the content once as a file (its path in a table, as the article keeps it)
and as an LO (streamed from the client in chunks), then copies the LO into the two bytea
tables on the server (``lo_get``), so all four hold the same bytes. Reads go through the
client, as an application's would, each on a fresh connection (not timed) that first
reads one byte the same way (not timed: it loads the backend's catalog caches):
- file: the path from its table, then ``read(chunk)`` to the end, or one ``read()``;
- LO: ``lo_get(oid, offset, chunk)`` per chunk, or ``lo_get(oid)``;
- bytea: ``substring(data FROM offset FOR chunk)`` per chunk, or the column;
results in binary format (no hex). Every read checks the byte count. Each (size, method,
mode) is read ``repeat`` times: median, min and max, MB/s and the ratio to the file.

Everything made is removed at the end, on failure too, and nothing else: the file (in a
temporary directory of our own), the LO (by the OID ``lo_create`` gave us), the tables
(``unique_tag`` names; a name already taken fails the run rather than touching the table).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgblobdump.bench.server import PREFIX, Server, unique_tag
from pgblobdump.errors import DatabaseError, PgBlobDumpError, UsageError, from_os_error
from pgblobdump.generate.content import ContentSource
from pgblobdump.generate.spec import Content, SizeSpec
from pgblobdump.harness.stats import Spread
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.units import format_bytes

METHODS = ("file", "lo", "bytea_external", "bytea_extended")
MODES = ("chunked", "whole")
WRITE_CHUNK = 1 << 20
MAX_SIZE = (1 << 30) - (1 << 20)
"""A bytea value, and a whole ``lo_get``, is limited to 1 GB; this leaves room for headers."""

Cursor = psycopg.Cursor[Any]


@dataclass(frozen=True)
class ReadSpec:
    """What to read: ``sizes`` in bytes (each 1..MAX_SIZE), ``chunk`` bytes per chunked
    read, ``repeat`` reads per (size, method, mode)."""

    sizes: tuple[int, ...] = (350_000_000, 4_500_000)
    chunk: int = 1 << 20
    repeat: int = 5
    content: Content = Content.RANDOM
    cold: bool = False
    directory: Path | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        """UsageError unless every figure is in range (a library caller meets the CLI's
        refusals)."""
        if not self.sizes:
            raise UsageError("--sizes needs one or more sizes")
        for what, n in [*(("--sizes", s) for s in self.sizes), ("--chunk", self.chunk)]:
            if not 1 <= n <= MAX_SIZE:
                raise UsageError(
                    f"{what} {format_bytes(n)} is out of range: from 1 byte to"
                    f" {format_bytes(MAX_SIZE)} (a bytea value holds at most 1 GB)"
                )
        if self.repeat < 1:
            raise UsageError("--repeat must be 1 or more")


@dataclass(frozen=True)
class ReadRow:
    """One (size, method, mode): ``seconds`` over ``repeat`` reads of ``size`` bytes."""

    size: int
    method: str
    mode: str
    seconds: Spread
    bytes_read: int
    """What every one of the reads got (a read that gets anything but ``size`` fails)."""
    mb_per_s: float
    """``size`` over the median time, in MB (10^6 bytes) per second."""
    vs_file: float | None
    """Median time over the file's median time, same size and mode."""


@dataclass
class ReadResult:
    rows: list[ReadRow]
    cache: str
    server: dict[str, object]
    notes: list[str] = field(default_factory=list)


class _Setup:
    """The four copies of one size's content; ``remove`` drops what ``make`` made, only."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / f"{name}.bin"
        self.oid: int | None = None
        self.tables = {m: f"{name}_{m}" for m in ("file", "bytea_external", "bytea_extended")}
        self.created: list[str] = []

    def make(self, conn: psycopg.Connection, size: int, spec: ReadSpec) -> None:
        src = ContentSource(SizeSpec(WRITE_CHUNK, WRITE_CHUNK), spec.content, spec.seed)
        row = conn.execute("SELECT lo_create(0)").fetchone()  # autocommit: ours from here
        self.oid = int(row[0]) if row else None
        try:
            with self.path.open("wb") as f, conn.transaction():
                done = 0
                while done < size:
                    piece = src.data(min(WRITE_CHUNK, size - done))
                    f.write(piece)
                    conn.execute("SELECT lo_put(%s, %s, %s)", (self.oid, done, piece))
                    done += len(piece)
        except OSError as e:
            raise from_os_error(e, "write") from e
        for method, table in self.tables.items():
            t = sql.Identifier(table)
            column = "path text" if method == "file" else "data bytea"
            # No IF NOT EXISTS: a table of that name is someone else's, and fails the run.
            conn.execute(
                sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, {})").format(t, sql.SQL(column))
            )
            self.created.append(table)
            if method == "file":
                conn.execute(sql.SQL("INSERT INTO {} VALUES (1, %s)").format(t), (str(self.path),))
                continue
            storage = sql.SQL("EXTERNAL" if method == "bytea_external" else "EXTENDED")
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN data SET STORAGE {}").format(t, storage)
            )
            conn.execute(sql.SQL("INSERT INTO {} VALUES (1, lo_get(%s))").format(t), (self.oid,))
        conn.execute(
            sql.SQL("VACUUM ANALYZE {}").format(
                sql.SQL(", ").join(map(sql.Identifier, self.created))
            )
        )

    def remove(self, conn: psycopg.Connection) -> None:
        self.path.unlink(missing_ok=True)
        while self.created:
            table = self.created[-1]
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
            self.created.pop()
        if self.oid is not None:
            conn.execute(
                "SELECT lo_unlink(oid) FROM pg_catalog.pg_largeobject_metadata WHERE oid = %s",
                (self.oid,),
            )
            self.oid = None

    def leftovers(self) -> str:
        parts = [f"table {t}" for t in self.created]
        if self.oid is not None:
            parts.append(f"LO {self.oid}")
        return ", ".join(parts)


def _warm_up(setup: _Setup, cur: Cursor, method: str) -> None:
    """The first statement of a fresh backend loads its catalog caches (about a
    millisecond here, as much as a warm 4.5 MB file read): run the read's statement for one
    byte, untimed, as on the pooled connection of an application."""
    if method == "lo":
        cur.execute("SELECT lo_get(%s, 0, 1)", (setup.oid,)).fetchall()
        return
    column = "path" if method == "file" else "substring(data FROM 1 FOR 1)"
    q = sql.SQL("SELECT {} FROM {} WHERE id = 1").format(
        sql.SQL(column), sql.Identifier(setup.tables[method])
    )
    cur.execute(q).fetchall()


def _reader(setup: _Setup, cur: Cursor, method: str, mode: str, chunk: int,
            size: int) -> Callable[[], int]:  # fmt: skip
    """A function that reads the content once and returns the bytes it got."""
    if method == "file":
        path_q = sql.SQL("SELECT path FROM {} WHERE id = 1").format(
            sql.Identifier(setup.tables["file"])
        )

        def read_file() -> int:
            row = cur.execute(path_q).fetchone()
            if row is None:
                raise DatabaseError(f"no path in {setup.tables['file']}")
            n = 0
            with open(row[0], "rb", buffering=0) as f:
                if mode == "whole":
                    return len(f.read())
                while block := f.read(chunk):
                    n += len(block)
            return n

        return read_file
    whole_q: str | sql.Composed
    part_q: str | sql.Composed
    if method == "lo":
        whole_q, part_q = "SELECT lo_get(%s)", "SELECT lo_get(%s, %s, %s)"
        key = int(setup.oid or 0)
    else:
        t = sql.Identifier(setup.tables[method])
        whole_q = sql.SQL("SELECT data FROM {} WHERE id = %s").format(t)
        part_q = sql.SQL("SELECT substring(data FROM %s + 1 FOR %s) FROM {} WHERE id = %s").format(
            t
        )
        key = 1

    def read_db() -> int:
        if mode == "whole":
            row = cur.execute(whole_q, (key,)).fetchone()
            return len(row[0]) if row else 0
        n = 0
        while n < size:
            args = (key, n, chunk) if method == "lo" else (n, chunk, key)
            row = cur.execute(part_q, args).fetchone()
            got = len(row[0]) if row else 0
            if not got:
                break
            n += got
        return n

    return read_db


def run(server: Server, spec: ReadSpec, reporter: Reporter = QUIET) -> ReadResult:
    tag = unique_tag()
    rows: list[ReadRow] = []
    # One count over every size (a round of reads per repeat), and the bytes they read:
    # the largest size takes the most time, so the ETA weighs it by its bytes.
    per_round = len(METHODS) * len(MODES)
    reporter.task("reading", spec.repeat * len(spec.sizes))
    reporter.totals(spec.repeat * len(spec.sizes), spec.repeat * per_round * sum(spec.sizes))
    with tempfile.TemporaryDirectory(prefix="pgbd-bench-", dir=spec.directory) as tmp:
        for i, size in enumerate(spec.sizes):
            name = f"{PREFIX}{tag}_{size}"
            before = (i * spec.repeat, spec.repeat * per_round * sum(spec.sizes[:i]))
            rows += _one_size(server, spec, Path(tmp), name, size, reporter, before)
    notes: list[str] = []
    if spec.cold:
        cache = "cold (OS page cache dropped before each read"
        cache += ", server restarted)" if server.embedded is not None else ")"
    else:
        cache = "warm"
        notes.append("warm: repeated reads come from the OS page cache and shared_buffers;"
                     " --cold (as root) drops them between reads")  # fmt: skip
    if spec.content is not Content.RANDOM:
        notes.append(f"{spec.content.value} content: bytea EXTENDED is stored compressed, and"
                     " each chunk's substring decompresses the value from its start")  # fmt: skip
    return ReadResult(rows, cache, server.describe(), notes + server.notes)


def _one_size(server: Server, spec: ReadSpec, directory: Path, name: str, size: int,
              reporter: Reporter, before: tuple[int, int]) -> list[ReadRow]:  # fmt: skip
    """Every method and mode read ``spec.repeat`` times; ``before``: the rounds and bytes
    of the sizes already read (progress counts on from them)."""
    times: dict[tuple[str, str], list[float]] = {}
    got_bytes: dict[tuple[str, str], set[int]] = {}
    setup = _Setup(directory, name)
    try:
        with server.connect("setting up the read benchmark") as conn:
            reporter.note(f"writing {size:,} bytes as a file, an LO and two bytea tables")
            setup.make(conn, size, spec)
        for rep in range(spec.repeat):
            for method in METHODS:
                for mode in MODES:
                    if spec.cold:
                        server.cold()
                    with server.connect("reading") as conn, conn.cursor(binary=True) as cur:
                        _warm_up(setup, cur, method)
                        read = _reader(setup, cur, method, mode, spec.chunk, size)
                        t0 = time.perf_counter()
                        got = read()
                        took = time.perf_counter() - t0
                    if got != size:
                        raise DatabaseError(f"{method} {mode}: read {got:,} of {size:,} bytes")
                    times.setdefault((method, mode), []).append(took)
                    got_bytes.setdefault((method, mode), set()).add(got)
            rounds = rep + 1
            per_round = len(METHODS) * len(MODES)
            reporter.progress(before[0] + rounds, before[1] + rounds * size * per_round)
    finally:
        try:
            with server.connect("cleaning up after the read benchmark") as conn:
                setup.remove(conn)
        except PgBlobDumpError:
            reporter.note(f"could not remove {setup.leftovers()}: drop them by hand")
            raise
    out: list[ReadRow] = []
    for mode in MODES:
        base = Spread.of(times[("file", mode)]).median
        for method in METHODS:
            s = Spread.of(times[(method, mode)])
            (got,) = got_bytes[(method, mode)]
            out.append(ReadRow(size, method, mode, s, got,
                               size / s.median / 1e6 if s.median else 0.0,
                               s.median / base if base else None))  # fmt: skip
    return out
