"""Where a storage benchmark runs, and what it must say about it.

Storage figures need a durable server: the embedded clusters made for dump benchmarks run
with fsync, full_page_writes and synchronous_commit off, which flatters every write. A
benchmark's embedded server gets PostgreSQL's own defaults back (``DURABLE``); a given
server (``-d``) is taken as it is, and the settings in force are reported either way.

Cold reads: ``cold()`` empties the OS page cache (``/proc/sys/vm/drop_caches``, root
only) and, for an embedded server, restarts it so shared_buffers are empty too; on a
given server only the OS cache can be dropped, and the report says so.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgblobdump.errors import UsageError
from pgblobdump.harness.machine import machine_info
from pgblobdump.pg.connect import connect
from pgblobdump.pg.toast import lz4_available
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

DURABLE = {
    **BENCHMARK_WAL,
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "wal_level": "replica",
    "max_wal_senders": "10",
    "shared_buffers": "128MB",
    "autovacuum": "on",
}
"""PostgreSQL's defaults for what BENCHMARK_SETTINGS turns off (max_wal_size, raised by
BENCHMARK_WAL, and the checkpoint timeout stay raised: a checkpoint in the middle of one
run would be noise)."""

REPORTED = ("fsync", "full_page_writes", "synchronous_commit", "wal_level", "shared_buffers",
            "default_toast_compression", "server_version")  # fmt: skip
DROP_CACHES = "/proc/sys/vm/drop_caches"
PREFIX = "pgbd_bench_"
"""Every table a benchmark creates is named ``PREFIX`` + ``unique_tag()`` + a suffix."""


def unique_tag() -> str:
    """This process's id and a random part: two runs never pick the same table names, even
    from two machines (same pid) against one server, so a benchmark only ever creates,
    and then drops, tables of its own."""
    return f"{os.getpid()}_{secrets.token_hex(4)}"


@dataclass
class Server:
    """A connection string and what is known of the server behind it."""

    conninfo: str
    embedded: EmbeddedCluster | None
    settings: dict[str, str] = field(default_factory=dict)
    lz4: bool = False
    notes: list[str] = field(default_factory=list)

    def connect(self, doing: str) -> contextlib.AbstractContextManager[psycopg.Connection]:
        return connect(self.conninfo, doing=doing)

    def describe(self) -> dict[str, Any]:
        """For the JSON output: the server, and the machine facts compare records too."""
        return {"embedded": self.embedded is not None, "settings": self.settings,
                "lz4": self.lz4, "notes": self.notes, "machine": machine_info()}  # fmt: skip

    def cold(self) -> None:
        """Empty the caches between repetitions (see the module's docstring)."""
        os.sync()
        with open(DROP_CACHES, "w") as f:
            f.write("3\n")
        if self.embedded is not None:
            self.embedded.restart()


def can_drop_caches() -> str | None:
    """None when ``cold`` can work here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if not os.access(DROP_CACHES, os.W_OK):
        return f"{DROP_CACHES} is not writable here"
    return None


def _inspect(s: Server) -> None:
    with s.connect("reading the server's settings") as conn:
        rows = conn.execute(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
            (list(REPORTED),),
        ).fetchall()
        s.settings = {n: v for n, v in rows}
        s.lz4 = lz4_available(conn)
    if s.settings.get("fsync") == "off" or s.settings.get("synchronous_commit") == "off":
        s.notes.append("fsync or synchronous_commit is off on this server: writes are flattered")
    if not s.lz4:
        s.notes.append("this server was built without lz4: only pglz compression is measured")


@contextlib.contextmanager
def server(
    conninfo: str | None, major: int, cold: bool, reporter: Reporter = QUIET
) -> Iterator[Server]:
    """The given server, or a durable embedded one of ``major``; the reporter shows its
    start and its stop as tasks of their own (a durable server's shutdown checkpoint can
    take seconds after the last measurement)."""
    if cold:
        why = can_drop_caches()
        if why is not None:
            raise UsageError(f"--cold needs to drop the OS page cache, and cannot: {why}")
    if conninfo is not None:
        s = Server(conninfo, None)
        _inspect(s)
        if cold:
            s.notes.append("cold: this machine's OS page cache is dropped (the server's only if"
                           " it runs here), but not the server's shared_buffers (it is not"
                           " ours to restart)")  # fmt: skip
        yield s
        return
    reporter.task(f"starting a PostgreSQL {major} server", 0)
    with EmbeddedCluster(major, settings=DURABLE) as c:
        s = Server(c.conninfo(), c)
        _inspect(s)
        try:
            yield s
        finally:
            reporter.task("stopping the server", 0)
