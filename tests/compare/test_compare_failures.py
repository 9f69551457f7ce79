"""``pgblobdump compare`` as a real process against real servers, roles and sessions:
passwords stay out of everything it writes, refusals are one line with a code, checks
come before any work, and SIGTERM stops the running pg_dump and cleans up."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from pgblobdump.compare import safety
from pgblobdump.compare.matrix import Contender
from pgblobdump.errors import InsufficientResources, UsageError
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.compare.conftest import MakeRole, pgblobdump, run_cli
from tests.conftest import NewDb

SMALL = ("--majors", "16", "--formats", "custom")
"""One pg_dump of the 16 source server: the least a run can do."""
PASSWORD = "Sekr1t-pw-7f3a"


def _error_line(stderr: str) -> str:
    """The one ``Error:`` line, last on stderr, and no traceback."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr
    assert [ln for ln in lines if ln.startswith("Error:")] == lines[-1:], stderr
    return lines[-1]


def _lo_count(conninfo: str) -> int:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
    assert row is not None
    return int(row[0])


def test_the_password_is_never_written(role_db: MakeRole, tmp_path: Path) -> None:
    """A role that must give its password (scram over TCP): the dump and the restore
    get it (they succeed), and it is in none of stdout, stderr, results.json and
    commands.txt, though the command line we were given holds it."""
    rd = role_db(createdb=True, password=PASSWORD)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(rd.conninfo(with_password=False)).close()  # pg_hba asks for it
    folder = tmp_path / "results"
    done = run_cli("compare", "-d", rd.conninfo(), "--generate", "--los", "20", *SMALL,
                   "--restore", "--jobs", "1", "--results", str(folder), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    # pg_restore's and the packed archive's restore (pgblobdump's own children get it too)
    assert [r["all_ok"] for r in doc["restores"]] == [True, True]
    written = {
        "stdout": done.stdout,
        "stderr": done.stderr,
        "results.json": (folder / "results.json").read_text(),
        "commands.txt": (folder / "commands.txt").read_text(),
    }
    for name, text in written.items():
        assert PASSWORD not in text, name
    commands = written["commands.txt"]
    assert f"user={rd.role}" in commands and "pg_restore" in commands
    assert "invoked as: pgblobdump compare -d" in commands and "password=***" in commands


def test_a_role_without_createdb_is_refused_before_any_work(role_db: MakeRole) -> None:
    rd = role_db(createdb=False)
    done = run_cli("compare", "-d", rd.conninfo(), "--los", "1000", "--generate", "--restore",
                   *SMALL)  # fmt: skip
    assert done.returncode == 4, done.stderr
    line = _error_line(done.stderr)
    assert line.startswith("Error: --restore creates a database for each restore on the")
    assert f"role {rd.role} may not create databases; grant it CREATEDB" in line
    assert _lo_count(rd.admin()) == 0  # refused before generating anything


def test_los_the_role_cannot_read(role_db: MakeRole) -> None:
    """LOs another role made, without grants: the checksum of the source says so."""
    rd = role_db(createdb=True)
    with psycopg.connect(rd.admin(), autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(0, 'not yours') FROM generate_series(1, 3)")
    done = run_cli("compare", "-d", rd.conninfo(), "--restore", *SMALL)
    assert done.returncode == 4, done.stderr
    line = _error_line(done.stderr)
    assert line.startswith("Error: checksumming LOs in database pgbd_cmp_db_")
    assert "permission denied for large object" in line


def test_what_the_source_tells_is_checked_before_any_dump(
    pg16: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg16)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT lo_create(0) FROM generate_series(1, 5)")
    # pg_dump 15 refuses a 16 server: said before it runs (it used to fail with status 9).
    done = run_cli("compare", "-d", db, "--majors", "15", "--formats", "custom")
    assert done.returncode == 2, done.stderr
    assert "pg_dump 15 cannot dump a PostgreSQL 16 server (database t" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    # More LOs than the smallest count: said before a restore cluster starts.
    done = run_cli("compare", "-d", db, "--generate", "--los", "3", "--restore",
                   "--majors", "17", "--formats", "custom")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "holds 5 LOs, more than --los 3" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_the_space_hint_fits_the_format(tmp_path: Path) -> None:
    """A custom archive too large for the disk: --formats custom would change nothing."""
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    count = free // safety.CUSTOM_BYTES_PER_LO + 1
    for fmt, hint in (("custom", False), ("directory", True)):
        with pytest.raises(InsufficientResources) as caught:
            safety.check_space(tmp_path, Contender("pg_dump", 17, fmt), count, 0)
        assert ("--formats custom" in str(caught.value)) is hint, caught.value
        assert "choose another --workdir" in str(caught.value)


def test_a_dump_too_large_for_the_disk_is_refused_before_a_cluster_starts() -> None:
    count = 4_000_000_000
    free = shutil.disk_usage(os.environ.get("TMPDIR", "/tmp")).free
    if free > count * safety.CUSTOM_BYTES_PER_LO:
        pytest.skip("this disk could hold a custom archive of 4,000M LOs")
    done = run_cli("compare", "--los", str(count), "--majors", "17", "--formats", "custom")
    assert done.returncode == 10, done.stderr
    line = _error_line(done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # no cluster started
    assert "pg_dump 17 -Fc of 4,000,000,000 LOs into " in line
    assert line.endswith("free; choose another --workdir or fewer --los")


def _pg_dump_waiting(conninfo: str) -> bool:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'pg_dump' AND wait_event_type = 'Lock'"
            " AND datname = current_database()"
        ).fetchone()
    return row is not None and row[0] > 0


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile
    return found


def test_sigterm_stops_pg_dump_and_cleans_up(
    pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """A second session holds a lock pg_dump needs, so the dump waits: SIGTERM then."""
    db = new_db(pg16)
    work, folder = tmp_path / "work", tmp_path / "results"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE held (x int); SELECT lo_create(0) FROM generate_series(1, 5)")
    with psycopg.connect(db) as locker:
        locker.execute("LOCK TABLE held IN ACCESS EXCLUSIVE MODE")
        argv = pgblobdump(
            "compare", "-d", db, *SMALL, "--workdir", str(work), "--results", str(folder)
        )
        with subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            deadline = time.monotonic() + 30
            while not _pg_dump_waiting(db):
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
                time.sleep(0.02)
            # pg_dump -f WORK/... (and GNU time), besides pgblobdump --workdir WORK itself
            assert set(_processes_mentioning(str(work))) - {proc.pid}
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=60)
        locker.rollback()
    assert proc.returncode == 143, err
    line = _error_line(err)
    assert line == (
        "Error: interrupted by SIGTERM during pg_dump 16 -Fc; its processes were stopped"
    )
    assert _processes_mentioning(str(work)) == []
    assert list(work.iterdir()) == []  # the partial archive is gone
    saved = json.loads((folder / "results.json").read_text())
    assert saved["complete"] is False and saved["dumps"] == []


def test_a_library_caller_gets_the_cli_refusals() -> None:
    """The request checks its own combinations, so a caller of the core gets what the
    command line says, before anything starts."""
    from pgblobdump.compare.session import CompareRequest

    base = {"counts": (10,), "majors": (17,), "formats": ("custom",)}
    cases = [
        ({"conninfo": "dbname=x"}, "--los with -d needs --generate"),
        ({"may_generate": True}, "--generate applies to a database given with -d"),
        ({"verify_sample": -1}, "--verify-sample must be 0"),
        ({"counts": (2**33,)}, "more LOs than a database can hold"),
        ({"majors": (16,), "embedded_major": 17}, "pg_dump 16 cannot dump a PostgreSQL 17"),
    ]
    for extra, message in cases:
        with pytest.raises(UsageError, match=message):
            CompareRequest(**{**base, **extra})  # type: ignore[arg-type]
    CompareRequest(**base, conninfo="dbname=x", counts_given=False)  # type: ignore[arg-type]
