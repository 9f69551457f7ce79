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


def test_a_row_written_after_its_column_was_rewritten_is_reported(
    setup: tuple[str, str, Path, dict],
) -> None:
    """The application writes a row naming an old OID into a column the run rewrote
    already (while the run waits to lock the next one): the run says so, in a note and
    in --json, and leaves the row as it is (the old OID is the target's own LO here)."""
    _src, target, path, los = setup
    app = psycopg.connect(target, application_name="remaptest")
    app.execute(f"INSERT INTO notes VALUES ('{FIRST + 20}')")  # holds notes' ROW EXCLUSIVE
    args = ["restore", str(path), "-d", target, "--remap", "all", "--referenced-by", "docs.lo",
            "--referenced-by", "notes.ref", "--json"]  # fmt: skip
    proc = _start(*args)
    _wait_for(target, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
    app.execute(f"INSERT INTO docs VALUES ({FIRST + 5})")
    app.commit()  # the run goes on: notes, then the check
    out, err = proc.communicate(timeout=120)
    app.close()
    assert proc.returncode == 0, err
    late = {w["column"]: (w["late"], w["late_examples"]) for w in json.loads(out)["rewrites"]}
    assert late == {"public.docs.lo": (1, [FIRST + 5]), "public.notes.ref": (0, [])}
    assert "public.docs.lo: 1 row written after its rewrite name old OIDs" in err
    with psycopg.connect(target, autocommit=True) as conn:
        n = conn.execute(f"SELECT count(*) FROM docs WHERE lo = {FIRST + 5}").fetchone()
        conn.execute(f"DELETE FROM docs WHERE lo = {FIRST + 5}")  # the rest as restored
    assert n == (1,)
    _check(target, los, app_rows=1)


def test_interrupted_removes_what_it_made(setup: tuple[str, str, Path, dict]) -> None:
    """SIGINT in the middle: the LOs this run made go, with their map rows, in the same
    transactions; the run is forgotten, so the same command starts afresh."""
    _src, target, path, los = setup
    held = _hold(target, FIRST + COUNT + 1500)  # the second batch waits
    args = ["restore", str(path), "-d", target, "--remap", "all", "--referenced-by", "docs.lo",
            "--referenced-by", "notes.ref"]  # fmt: skip
    proc = _start(*args)
    _wait_for(target, WAITING)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "removed" in err and "Traceback" not in err
    with psycopg.connect(target) as conn:
        n = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        runs = conn.execute("SELECT count(*) FROM pgblobdump_remap.runs").fetchone()
        rows = conn.execute("SELECT count(*) FROM pgblobdump_remap.map").fetchone()
    held.close()
    assert (n, runs, rows) == ((100,), (0,), (0,))  # the target's own, nothing of ours
    result = run(*args)
    assert result.exit_code == 0, result.stderr
    _check(target, los)


def test_full_killed_after_its_data_resumed(pg17: EmbeddedCluster, new_db: NewDb,
                                            setup: tuple[str, str, Path, dict],
                                            tmp_path: Path) -> None:  # fmt: skip
    """restore --full --remap killed while restoring LOs, after pg_restore's data: the
    resumed run does not restore the tables again, finishes the LOs, rewrites the
    restored table's references, and runs post-data (its index exists)."""
    src, _target, _path, los = setup
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (id serial PRIMARY KEY, lo oid);"
                     " INSERT INTO kept (lo) SELECT oid FROM pg_largeobject_metadata ORDER BY oid;"
                     " CREATE INDEX kept_lo ON kept (lo)")  # fmt: skip
    path = tmp_path / "full"
    assert run("dump", "--full", "-d", src, "-o", str(path)).exit_code == 0
    target = new_db(pg17)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(f"SELECT lo_from_bytea({FIRST} + g, 'theirs') FROM generate_series(0, 99) g")
    held = _hold(target, FIRST + 1500)  # a kept OID of the second batch (taken mode)
    args = ["restore", "--full", str(path), "-d", target, "--remap"]
    proc = _start(*args)
    _wait_for(target, WAITING)
    _kill(proc, target)
    held.close()
    result = run(*args, "--resume", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["remapped"] == 100
    assert [(w["column"], w["rows"]) for w in record["rewrites"]] == [("public.kept.lo", 100)]
    with psycopg.connect(target) as conn:
        got = conn.execute("SELECT lo_get(lo) FROM kept ORDER BY id").fetchall()
        index = conn.execute("SELECT to_regclass('kept_lo') IS NOT NULL").fetchone()
    assert [bytes(g) for (g,) in got] == [los[o][0] for o in sorted(los)]
    assert index == (True,)


def test_an_oid_taken_meanwhile(setup: tuple[str, str, Path, dict]) -> None:
    """Another session creates an LO at an OID of the run's block, and commits while the
    run's batch waits for it: the run fails naming that, removes what it made (never the
    other's LO) and forgets itself; run again, it chooses anew."""
    _src, target, path, los = setup
    other = FIRST + COUNT + 1500
    held = _hold(target, other)
    args = ["restore", str(path), "-d", target, "--remap", "all", "--referenced-by", "docs.lo",
            "--referenced-by", "notes.ref"]  # fmt: skip
    proc = _start(*args)
    _wait_for(target, WAITING)
    held.commit()
    held.close()
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err
    assert f"LO {other} was created by another session meanwhile" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) >= 1
    with psycopg.connect(target) as conn:
        n = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        runs = conn.execute("SELECT count(*) FROM pgblobdump_remap.runs").fetchone()
    assert (n, runs) == ((101,), (0,))  # the target's 100, the other's one; none of ours
    assert run(*args).exit_code == 0
    _check(target, los)
