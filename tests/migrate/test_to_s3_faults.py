"""``migrate run --to s3://`` when things go wrong: kill -9 while objects are written, the
object store unreachable partway (a closed port; a SeaweedFS killed mid-run), then a
rerun. Nothing is switched or unlinked before every object is there and verified, and
the rerun ends with every row's key naming an object with the right bytes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psycopg
import pytest

from pgblobdump.errors import ObjectStorageError
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.servers.seaweed import BUCKET, LocalS3
from tests.conftest import NewDb
from tests.migrate.test_migrate import columns_of, contents, lo_count
from tests.migrate.test_to_s3 import assert_keys_name_the_bytes


def four_kib_los(db: str, n: int) -> None:
    """Table docs(id, lo) of ``n`` rows, each its own LO of 4 KiB of distinct text."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, lo oid)")
        conn.execute(
            "INSERT INTO docs SELECT i, lo_from_bytea(0, convert_to(repeat(md5(i::text), 128),"
            " 'UTF8')) FROM generate_series(1, %s) i",
            (n,),
        )


def argv(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "pgblobdump", "migrate", "run", "-d", db, "docs.lo", *args]


def entered(conn: psycopg.Connection) -> int:
    if not conn.execute("SELECT to_regclass('pgblobdump.migration_objects')").fetchone()[0]:  # type: ignore[index]
        return 0
    return int(conn.execute("SELECT count(*) FROM pgblobdump.migration_objects").fetchone()[0])  # type: ignore[index]


def run_until_stored(db: str, at_least: int, args: list[str],
                     env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    """A ``migrate run`` started, returned once it has entered ``at_least`` objects (a
    failure, saying so, if it ends first)."""
    proc = subprocess.Popen(argv(db, *args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, env=env)  # fmt: skip
    with psycopg.connect(db, autocommit=True) as conn:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if entered(conn) >= at_least:
                return proc
            time.sleep(0.01)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    _, err = proc.communicate()
    pytest.fail(f"the run ended (or stored fewer than {at_least} objects) first: {err!r}")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns


def test_kill_9_while_writing_objects_then_the_store_down_then_a_rerun(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    db = new_db(pg17)
    four_kib_los(db, 2000)
    before, los = contents(db), lo_count(db)
    proc = run_until_stored(db, 200, ["--to", s3_url, "--unlink"])
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    assert columns_of(db)["lo"][0] == "oid" and contents(db) == before  # nothing switched
    # The application writes while the run is stopped (its triggers stay): a new row, a
    # row pointed at a new LO, a row deleted. The rerun stores their objects too.
    with psycopg.connect(db, autocommit=True) as conn:
        unnamed = {int(r[0]) for r in conn.execute("SELECT lo FROM docs WHERE id IN (7, 8)")}
        conn.execute("INSERT INTO docs VALUES (5001, lo_from_bytea(0, 'written later'))")
        conn.execute("UPDATE docs SET lo = lo_from_bytea(0, 'pointed elsewhere') WHERE id = 7")
        conn.execute("DELETE FROM docs WHERE id = 8")
    before, los = contents(db), lo_count(db)
    # The store unreachable: one line, exit 12, still nothing switched or unlinked.
    down = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}"}
    got = subprocess.run(argv(db, "--to", s3_url, "--unlink"), capture_output=True, env=down,
                         timeout=300, check=False)  # fmt: skip
    assert got.returncode == ObjectStorageError.exit_code, got.stderr
    lines = got.stderr.decode().strip().splitlines()
    assert lines[-1].startswith("Error: ") and "Traceback" not in got.stderr.decode(), lines
    assert columns_of(db)["lo"][0] == "oid" and contents(db) == before
    assert lo_count(db) == los
    # Back up: the rerun resumes, reuses what the killed run stored, and finishes.
    again = subprocess.run(argv(db, "--to", s3_url, "--unlink"), capture_output=True, timeout=300,
                           check=False)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert b"resuming run" in again.stderr
    assert columns_of(db)["lo"][0] == "text"
    assert_keys_name_the_bytes(db, s3_url, before)
    with psycopg.connect(db) as conn:  # --unlink took the LOs the column named at the switch
        left = {int(r[0]) for r in conn.execute("SELECT oid FROM pg_largeobject_metadata")}
    assert left == unnamed


@pytest.mark.scale
@pytest.mark.s3  # a SeaweedFS of its own, killed mid-run
def test_store_killed_mid_run_switches_and_unlinks_nothing_and_a_rerun_finishes(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg17)
    four_kib_los(db, 6000)
    before, los = contents(db), lo_count(db)
    url = f"s3://{BUCKET}/down-{os.getpid()}"
    with LocalS3() as s3:
        env = {**os.environ, **s3.env()}
        proc = run_until_stored(db, 500, ["--to", url, "--unlink"], env=env)
        s3.stop()
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == ObjectStorageError.exit_code, err
        lines = err.decode().strip().splitlines()
        assert lines[-1].startswith("Error: "), err
        assert columns_of(db)["lo"][0] == "oid" and contents(db) == before
        assert lo_count(db) == los
        s3.restart()
        again = subprocess.run(argv(db, "--to", url, "--unlink"), capture_output=True, env=env,
                               timeout=300, check=False)  # fmt: skip
        assert again.returncode == 0, again.stderr
        for k, v in s3.env().items():
            monkeypatch.setenv(k, v)
        assert_keys_name_the_bytes(db, url, before)
        assert lo_count(db) == 0
