"""``restore --remap`` killed (kill -9) in each phase and finished by ``--resume``: the
LOs of the batches that committed are kept, with their mapping, and not made twice; a
column rewritten before the kill is not rewritten again (its new OIDs may equal other
LOs' old ones), the others are; a row the application wrote meanwhile, naming an old
OID, is rewritten with the rest."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from pgblobdump.packed import DumpRequest
from pgblobdump.packed.dump.run import dump
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import state

FIRST = 200_000
COUNT = 3_000  # 8 KiB each: three batches of 8 MiB


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pgblobdump", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _wait_for(db: str, query: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    with psycopg.connect(db, autocommit=True, application_name="remaptest") as conn:
        while time.monotonic() < deadline:
            row = conn.execute(query).fetchone()
            if row and row[0]:
                return
            time.sleep(0.05)
    raise AssertionError(f"never: {query}")


def _kill(proc: subprocess.Popen[str], db: str) -> None:
    """kill -9 the run, and end its backends (no clean-up ran; nothing waits on them)."""
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    others = (
        "FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND application_name <> 'remaptest'"
    )
    with psycopg.connect(db, autocommit=True, application_name="remaptest") as conn:
        conn.execute(f"SELECT pg_terminate_backend(pid) {others}")
    _wait_for(db, f"SELECT count(*) = 0 {others}")


def _hold(db: str, oid: int) -> psycopg.Connection:
    """A transaction, left open, that created LO ``oid``: a run's batch that creates an
    LO at that OID waits for it (the unique index), so the run is killed with the batches
    before committed. Roll it back (close it) after the kill."""
    conn = psycopg.connect(db, application_name="remaptest")
    conn.execute("SELECT lo_create(%s::int8::oid)", (oid,))
    return conn


WAITING = (
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    " AND datname = current_database() AND application_name <> 'remaptest'"
)
"""A run's batch waiting on ``_hold``'s transaction."""


@pytest.fixture
def setup(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> tuple[str, str, Path, dict]:
    src = new_db(pg17)
    assert run("generate", "-d", src, "-n", str(COUNT), "--size", "8KiB", "--start-oid",
               str(FIRST)).exit_code == 0  # fmt: skip
    path = tmp_path / "a"
    dump(src, DumpRequest(), storage=LocalDirectory(path, create=True))
    target = new_db(pg17)
    with psycopg.connect(target, autocommit=True) as conn:
        # the target's own LOs at the archive's OIDs, and the rows the user loaded
        conn.execute(f"SELECT lo_from_bytea({FIRST} + g, 'theirs') FROM generate_series(0, 99) g")
        conn.execute("CREATE TABLE docs (lo oid); CREATE TABLE notes (ref text)")
        conn.execute(
            f"INSERT INTO docs SELECT g FROM generate_series({FIRST}, {FIRST + COUNT - 1}) g"
        )
        conn.execute(
            f"INSERT INTO notes SELECT g::text FROM generate_series({FIRST}, {FIRST + 9}) g"
        )
    return src, target, path, state(src)


def _check(target: str, src_los: dict, app_rows: int = 0) -> None:
    with psycopg.connect(target) as conn:
        pairs = dict(
            conn.execute("SELECT old::int8, new::int8 FROM pgblobdump_remap.map").fetchall()
        )
        docs = conn.execute("SELECT lo_get(lo) FROM docs ORDER BY lo").fetchall()
        notes = conn.execute(
            "SELECT ref, lo_get(ref::int8::oid) FROM notes ORDER BY ref"
        ).fetchall()
        theirs = conn.execute(
            f"SELECT count(*) FROM pg_largeobject_metadata WHERE oid BETWEEN"
            f" {FIRST} AND {FIRST + 99} AND lo_get(oid) = 'theirs'"
        ).fetchone()
    assert sorted(pairs) == sorted(src_los)  # each LO once
    now = state(target)
    assert all(now[new] == src_los[old] for old, new in pairs.items())
    assert sorted(bytes(d) for (d,) in docs) == sorted(v[0] for v in src_los.values())
    assert len(notes) == 10 + app_rows
    assert all(bytes(d) == src_los[FIRST][0] or bytes(d) in {v[0] for v in src_los.values()}
               for _r, d in notes)  # fmt: skip
    assert theirs == (100,)  # the target's own LOs untouched


def test_killed_while_restoring_los(setup: tuple[str, str, Path, dict]) -> None:
    _src, target, path, los = setup
    # the second batch waits (its new OIDs start at FIRST + COUNT, --remap all): the run is
    # killed with one batch committed
    held = _hold(target, FIRST + COUNT + 1500)
    args = ["restore", str(path), "-d", target, "--remap", "all", "--referenced-by", "docs.lo",
            "--referenced-by", "notes.ref"]  # fmt: skip
    proc = _start(*args)
    _wait_for(target, WAITING)
    _kill(proc, target)
    held.close()
    with psycopg.connect(target, autocommit=True) as conn:
        made = conn.execute("SELECT count(*) FROM pgblobdump_remap.map").fetchone()
        rows = conn.execute(f"SELECT count(*) FROM docs WHERE lo >= {FIRST + COUNT}").fetchone()
    assert made is not None and 0 < made[0] < COUNT
    assert rows == (0,)  # no column rewritten yet
    assert_one_line_error(run(*args), 4, "add --resume")
    result = run(*args, "--resume", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["los"] == COUNT - made[0]
    _check(target, los)


def test_killed_between_two_columns(setup: tuple[str, str, Path, dict]) -> None:
    _src, target, path, los = setup
    app = psycopg.connect(target, application_name="remaptest")
    app.execute(f"INSERT INTO notes VALUES ('{FIRST + 20}')")  # holds notes' ROW EXCLUSIVE
    args = ["restore", str(path), "-d", target, "--remap", "all", "--referenced-by", "docs.lo",
            "--referenced-by", "notes.ref"]  # fmt: skip
    proc = _start(*args)
    _wait_for(target, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
    _kill(proc, target)  # docs rewritten, notes waiting for its lock
    app.close()  # the application's row is committed? no: its transaction ends with it
    with psycopg.connect(target, autocommit=True) as conn:
        done = conn.execute("SELECT qualified FROM pgblobdump_remap.rewrites").fetchall()
        conn.execute(f"INSERT INTO notes VALUES ('{FIRST + 20}')")  # written during the run
    assert done == [("public.docs.lo",)]
    result = run(*args, "--resume", "--json")
    assert result.exit_code == 0, result.stderr
    rewrites = {w["column"]: w["rows"] for w in json.loads(result.stdout)["rewrites"]}
    assert rewrites == {"public.docs.lo": COUNT, "public.notes.ref": 11}
    _check(target, los, app_rows=1)
