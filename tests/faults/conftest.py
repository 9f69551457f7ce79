"""Fixtures of the wire-fault matrix: a source database of a few hundred LOs with owners,
ACLs by two grantors and comments; its packed archive; a table referencing LOs for migrate;
and the helpers that run the tool through a CutProxy and judge how a cut run ended."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pgblobdump.servers.cluster import SUPERUSER, EmbeddedCluster
from tests.faults.proxy import CutProxy, Kind
from tests.losets import fill
from tests.losets import roles as make_roles

FIRST = 300_000
"""The first OID of the bulk LOs."""
BULK = 300
"""Bulk LOs: sizes 0 to ~96 KiB by OID, so a restore commits several 8 MiB batches."""

Snapshot = dict[int, tuple[int, str, str, list[str] | None, str | None]]
"""oid -> (size, md5 of the bytes, owner, lomacl with grantors, comment)."""


def snapshot(db: str) -> Snapshot:
    """Every LO of ``db`` as the server sees it: bytes by md5, owner, ACL, comment."""
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT m.oid::int8, octet_length(lo_get(m.oid)), md5(lo_get(m.oid)),"
            " pg_get_userbyid(m.lomowner), m.lomacl::text[],"
            " obj_description(m.oid, 'pg_largeobject')"
            " FROM pg_largeobject_metadata m ORDER BY 1"
        ).fetchall()
    return {int(o): (int(n), h, w, a, c) for o, n, h, w, a, c in rows}


def fill_source(db: str) -> None:
    """BULK LOs of varied sizes (distinct bytes per OID) in one statement, then 30 with
    owners, ACLs by the owner and by another grantor, and comments."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), (o %% 97) * 64), 'hex')))"
            " FROM generate_series(%s, %s) o",
            (FIRST, FIRST + BULK - 1),
        )
    fill(db, {oid: (oid % 5000, oid % 3, oid % 3, oid % 2 == 0) for oid in range(40_000, 40_030)})


@dataclass(frozen=True)
class Source:
    cluster: EmbeddedCluster
    dbname: str
    expected: Snapshot
    archive: Path

    @property
    def conninfo(self) -> str:
        return self.cluster.conninfo(self.dbname)


@pytest.fixture(scope="session")
def source(pg17: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    """The source database on pg17 and a packed archive of it (dumped directly)."""
    make_roles(pg17)
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS wire_src WITH (FORCE)")
        conn.execute("CREATE DATABASE wire_src")
    db = pg17.conninfo("wire_src")
    fill_source(db)
    archive = tmp_path_factory.mktemp("wire") / "a"
    code, err, _ = run_tool("dump", "-d", db, "-o", str(archive))
    assert code == 0, err
    yield Source(pg17, "wire_src", snapshot(db), archive)
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS wire_src WITH (FORCE)")


def run_tool(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    """``python -m pgblobdump ARGS`` as a process of its own: (exit, stderr, stdout)."""
    done = subprocess.run([sys.executable, "-m", "pgblobdump", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip
    return done.returncode, done.stderr, done.stdout


@dataclass(frozen=True)
class Cut:
    """One run through the proxy: where it was to be cut, where and whether it was."""

    at: int | None
    kind: Kind
    code: int
    err: str
    total: int
    cut: bool
    connections: int


def through_proxy(
    cluster: EmbeddedCluster,
    dbname: str,
    args: list[str],
    at: int | None,
    kind: Kind = "rst",
    heal: bool = False,
) -> Cut:
    """Run the tool with ``-d`` naming ``dbname`` through a proxy cutting at ``at`` bytes."""
    with CutProxy(cluster.info().port, at, kind, heal) as proxy:
        code, err, _ = run_tool(*args, "-d", proxy.conninfo(dbname, SUPERUSER))
    return Cut(at, kind, code, err, proxy.total, proxy.cut_done, proxy.connections)


def one_error_line(cut: Cut) -> str:
    """A cut run's stderr ends with its one ``Error:`` line (notes such as migrate's may
    come before it), no traceback; exit 3 or 4. The Error line is returned."""
    assert "Traceback" not in cut.err, cut
    lines = cut.err.strip().splitlines()
    assert lines and lines[-1].startswith("Error: "), cut
    assert sum(line.startswith("Error: ") for line in lines) == 1, cut
    assert cut.code in (3, 4), cut
    return lines[-1]


FAST = 6
"""Cuts per command in the fast suite: connect, metadata, first data, middle, last
batch, commit."""
SLOW = 22
"""Cuts per command (each by RST and by FIN) in the slow matrix."""


def cut_points(total: int, n: int) -> list[int]:
    """``n`` cut points over a run of ``total`` bytes (both directions, every connection):
    one inside the startup packet, the rest spread over the run, the last within the
    final commit's few dozen bytes."""
    if n == FAST:
        points = [40, int(total * 0.02), int(total * 0.1), total // 2, int(total * 0.9)]
        return [*points, total - 25]
    # every connection's startup and authentication, the catalog queries, then evenly
    head = [40, 300, 1200]
    spread = [int(total * (k + 1) / (n - len(head))) for k in range(n - len(head) - 2)]
    return [*head, *spread, total - 60, total - 25]


def kinds(n: int) -> list[tuple[int, Kind]]:
    """(cut index, kind) pairs: the fast suite alternates RST and FIN, the slow one does
    both at every point."""
    if n == FAST:
        return [(k, "rst" if k % 2 == 0 else "fin") for k in range(n)]
    return [(k, kind) for k in range(n) for kind in ("rst", "fin")]


TOTALS: dict[str, int] = {}
"""Bytes of each command's uncut run through the proxy (both directions, every connection)."""


def uncut_total(command: str, run: Callable[[], Cut]) -> int:
    """``command``'s byte total, measured once per session by ``run`` (an uncut run)."""
    if command not in TOTALS:
        cut = run()
        assert cut.code == 0 and not cut.cut, cut
        TOTALS[command] = cut.total
        print(f"\n{command}: {cut.total:,} bytes uncut over {cut.connections} connection(s)")
    return TOTALS[command]


ENDINGS: list[tuple[str, int, str, str]] = []
"""(command, cut at, kind, how it ended) of every cut run of the session, for the summary."""


def finished(cut: Cut) -> str:
    """How a run that exited 0 ended: the cut came after the last byte it needed (its
    Terminate message), or this run used fewer bytes than the measured one and was never
    cut (a byte total varies by a few bytes: pids, timings in messages)."""
    assert cut.code == 0
    return "finished, cut after its last byte" if cut.cut else "finished, never reached the cut"


def record(command: str, cut: Cut, ending: str) -> None:
    ENDINGS.append((command, cut.at or 0, cut.kind, ending))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How every cut run of the session ended, per command: the figures RESULTS.md keeps."""
    if not ENDINGS:
        return
    tr = terminalreporter
    tr.section("wire faults")
    by: dict[str, dict[str, int]] = {}
    for command, _at, _kind, ending in ENDINGS:
        by.setdefault(command, {})
        by[command][ending] = by[command].get(ending, 0) + 1
    for command, endings in by.items():
        runs = sum(endings.values())
        told = ", ".join(f"{n} {e}" for e, n in sorted(endings.items()))
        base = command.split(" (")[0]
        total = f" (uncut: {TOTALS[base]:,} bytes)" if base in TOTALS else ""
        tr.write_line(f"{command}{total}: {runs} cut runs: {told}")


def md5_of(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()
