"""The server lost in the middle: a dump leaves no archive (and restore refuses what is
there), a restore removes what it made or names it, and --resume then completes it.
Real faults: the backends terminated from another session, the whole server stopped."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from pgblobdump.packed import DumpRequest, dump
from pgblobdump.pg.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from tests.conftest import NewDb
from tests.losets import state


def _fill(db: str, n: int, size: int = 300) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), %s), 'hex')))"
            " FROM generate_series(200000, 200000 + %s - 1) o",
            (size // 16, n),
        )


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pgblobdump", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _count(db: str) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
    assert row is not None
    return int(row[0])


def _terminate_others(db: str) -> int:
    """pg_terminate_backend of every other session on ``db``'s database."""
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname ="
            " current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchall()
    return len(rows)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("Error: "), err
    assert "Traceback" not in err, err
    return lines[-1]


def test_backends_terminated_mid_dump(pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    db = new_db(pg16)
    _fill(db, 200_000)
    out = tmp_path / "a"
    with _start("dump", "-d", db, "-o", str(out), "--jobs", "2") as proc:
        deadline = time.monotonic() + 30
        while not list(out.glob("data-*")) and not list(out.glob(".data-*")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert _terminate_others(db) >= 1
        _stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    line = _one_line(err)
    assert "lost the connection" in line or "terminat" in line, line
    assert not (out / "manifest.json").exists()
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())
    refused = _start("restore", str(out), "-d", new_db(pg16))
    _o, err = refused.communicate(timeout=60)
    assert refused.returncode != 0 and "Traceback" not in err


def test_backend_terminated_mid_restore_then_resume(
    pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src = new_db(pg16)
    _fill(src, 100_000)
    path = tmp_path / "a"
    dump(src, DumpRequest(), storage=LocalDirectory(path, create=True))
    dst = new_db(pg16)
    with _start("restore", str(path), "-d", dst) as proc:
        deadline = time.monotonic() + 60
        while _count(dst) < 10_000:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert _terminate_others(dst) >= 1
        _stdout, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    line = _one_line(err)
    assert "lost the connection" in line, line
    # the clean-up ran on a new connection: nothing, or a named remainder and the advice
    left = _count(dst)
    assert (left == 0 and "removed the" in line) or "--resume" in line, (left, line)
    done = _start("restore", str(path), "-d", dst, "--resume")
    _o, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    assert state(dst) == state(src)


@pytest.mark.slow  # a cluster of its own: 10 s
def test_server_stopped_mid_restore_then_resume(tmp_path: Path) -> None:
    with EmbeddedCluster(17, settings={"synchronous_commit": "on"}) as cluster:
        db = cluster.conninfo()
        _fill(db, 200_000)
        path = tmp_path / "a"
        dump(db, DumpRequest(), storage=LocalDirectory(path, create=True))
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("CREATE DATABASE dst")
        dst = cluster.conninfo("dst")
        with _start("restore", str(path), "-d", dst) as proc:
            deadline = time.monotonic() + 60
            while _count(dst) < 20_000:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline
                time.sleep(0.02)
            cluster.remove = False  # a fast shutdown that keeps the data (removed at the end)
            cluster.stop()
            cluster.remove = True
            _stdout, err = proc.communicate(timeout=120)
        assert proc.returncode == 3, err
        line = _one_line(err)
        assert "lost the connection" in line or "cannot connect" in line, line
        assert "--resume" in line, line  # clean-up could not connect: the remainder is named
        cluster.start()
        db, dst = cluster.conninfo(), cluster.conninfo("dst")  # the port may be new
        done = _start("restore", str(path), "-d", dst, "--resume")
        _o, err = done.communicate(timeout=120)
        assert done.returncode == 0, err
        assert state(dst) == state(db)


@pytest.mark.slow
def test_an_lo_over_1_gib(pg17: EmbeddedCluster, pg18: EmbeddedCluster, new_db: NewDb,
                          tmp_path: Path) -> None:  # fmt: skip
    src = new_db(pg17)
    size = (1 << 30) + (5 << 20)
    piece = bytes(range(256)) * (1 << 18)  # 64 MiB
    with psycopg.connect(src, autocommit=True) as conn, conn.transaction():
        conn.execute("SELECT lo_create(77000)")
        for at in range(0, size, len(piece)):
            conn.execute("SELECT lo_put(77000, %s, %s)", (at, piece[: size - at]))
    path = tmp_path / "big"
    done = _start("dump", "-d", src, "-o", str(path))
    assert done.communicate(timeout=600)[1] is not None and done.returncode == 0
    dst = new_db(pg18)
    done = _start("restore", str(path), "-d", dst)
    _o, err = done.communicate(timeout=600)
    assert done.returncode == 0, err
    digests = "SELECT md5(lo_get(77000, o, 64 << 20)) FROM generate_series(0, %s, 64 << 20) o"

    def sums(db: str) -> list[str]:
        with psycopg.connect(db) as conn:
            return [r[0] for r in conn.execute(digests, (size - 1,))]

    assert sums(dst) == sums(src)
    verify = _start("verify", str(path), "-d", dst)
    _o, err = verify.communicate(timeout=600)
    assert verify.returncode == 0, err
