"""``export`` interrupted: kill -9 then the same command finishes it (a file of someone
else's left alone), SIGINT stops cleanly with a named remainder, a full disk is one
line and resumable; S3: a round trip, a missing bucket and a wrong secret refused
before any LO is read; an LO over 1 GiB (scale)."""

from __future__ import annotations

import csv
import hashlib
import json
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from pgblobdump.files.objects import Entry, open_place
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run, started, wait_for
from tests.conftest import NewDb


def _bulk(db: str, first: int, n: int, size: int) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), %s), 'hex')))"
            " FROM generate_series(%s, %s) o",
            (size // 16, first, first + n - 1),
        )


def _expected(oid: int, size: int) -> bytes:
    return bytes.fromhex(hashlib.md5(str(oid).encode()).hexdigest()) * (size // 16)


def _count(out: Path) -> int:
    return sum(1 for p in out.rglob("*") if p.is_file()) if out.exists() else 0


def _check_complete(out: Path, first: int, n: int, size: int) -> None:
    with open(out / "manifest.csv", newline="") as f:
        rows = {int(r["oid"]): r for r in csv.DictReader(f)}
    assert sorted(rows) == list(range(first, first + n))
    for oid in (first, first + n // 2, first + n - 1):
        data = _expected(oid, size)
        assert (out / str(oid)).read_bytes() == data
        assert rows[oid]["sha256"] == hashlib.sha256(data).hexdigest()


@pytest.fixture
def many(pg17: EmbeddedCluster, new_db: NewDb) -> str:
    """30,000 LOs of 2 KiB: an export takes a few seconds."""
    db = new_db(pg17)
    _bulk(db, 100_000, 30_000, 2048)
    return db


def test_kill_9_then_the_same_command_finishes(many: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["export", "-d", many, "-o", str(out), "--jobs", "2"]
    with started(*args) as proc:
        wait_for(proc, lambda: _count(out) > 3000, "the export")
        proc.kill()
        proc.communicate()
    assert not (out / "manifest.csv").exists()
    left = _count(out)
    assert 3000 < left < 30_000
    (out / "foreign.txt").write_bytes(b"someone else's")  # never touched
    with started(*args, "--json") as proc:
        stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "resuming:" in err
    record = json.loads(stdout)
    assert record["kept"] > 1000 and record["written"] < 30_000
    assert record["los"] == 30_000
    _check_complete(out, 100_000, 30_000, 2048)
    assert (out / "foreign.txt").read_bytes() == b"someone else's"
    assert not list(out.rglob(".pgblobdump-part-*"))


def test_an_unjournaled_file_at_an_lo_name_is_refused_unless_it_is_that_lo(
    many: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = ["export", "-d", many, "-o", str(out), "--oids", "100000-100099"]
    assert run(*args).exit_code == 0
    (out / "manifest.csv").unlink()  # as if killed before the manifest and the last segment
    (out / "100050").unlink()
    (out / "100050").write_bytes(b"x" * 2048)  # changed since: its size alone cannot tell
    (out / "100051").unlink()
    (out / "100051").write_bytes(b"other")  # not the LO: refused, left as it is
    refused = run(*args)
    assert refused.exit_code == 11, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and "100051 exists and is not LO 100051" in last
    assert (out / "100051").read_bytes() == b"other"
    (out / "100051").unlink()
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["written"] == 1  # 100051 again; 100050 kept as journaled


def test_sigint_stops_cleanly_and_names_the_remainder(many: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["export", "-d", many, "-o", str(out)]
    with started(*args) as proc:
        wait_for(proc, lambda: _count(out) > 2000, "the export")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: export interrupted by SIGINT"), err
    assert "run the same command again" in lines[0] and "OIDs" in lines[0]
    assert not list(out.rglob(".pgblobdump-part-*"))
    with started(*args) as proc:
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    _check_complete(out, 100_000, 30_000, 2048)


def test_a_full_disk_is_one_line_and_resumable(
    pg17: EmbeddedCluster, new_db: NewDb, small_disk: Path
) -> None:
    db = new_db(pg17)
    _bulk(db, 70_000, 800, 4096)  # 3.2 MB into 2 MiB
    out = small_disk / "out"
    assert_one_line_error(run("export", "-d", db, "-o", str(out)), 10, "disk is full")
    assert not (out / "manifest.csv").exists()
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
    result = run("export", "-d", db, "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["los"] == 800
    _check_complete(out, 70_000, 800, 4096)


def test_s3_round_trip_and_refusals(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg17)
    _bulk(db, 80_000, 300, 4096)
    with psycopg.connect(db, autocommit=True) as conn:  # one over the single-PUT size
        conn.execute("SELECT lo_create(90001), lo_put(90001, 12000000, 'end')")
    result = run("export", "-d", db, "-o", s3_url, "--jobs", "2", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["los"] == 301 and "no ACL" in record["access"]
    with open_place(s3_url) as place:
        keys = [e.key for e in place.walk()
                if isinstance(e, Entry) and not e.key.startswith(".pgblobdump")]  # fmt: skip
        assert len(keys) == 303  # and manifest.csv, manifest.json
        with place.open("80007") as f:
            assert f.read() == _expected(80_007, 4096)
        with place.open("90001") as f:
            big = f.read()
        assert big == bytes(12000000) + b"end"
        with place.open("manifest.json") as f:
            doc = json.loads(f.read())
    sha = {o["oid"]: o["sha256"] for o in doc["objects"]}
    assert sha[90001] == hashlib.sha256(big).hexdigest()
    # refused before any LO is read: the database named does not even exist
    nodb = db.replace("dbname=", "dbname=nope_") if "dbname=" in db else db + "_nope"
    missing = f"s3://no-such-bucket-x{time.time_ns()}/p"
    assert_one_line_error(run("export", "-d", nodb, "-o", missing), 12, "no-such-bucket")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    result = run("export", "-d", nodb, "-o", s3_url + "-2")
    assert_one_line_error(result, 12, "access denied")
    assert "not-the-secret" not in result.output + result.stderr


@pytest.mark.scale
def test_an_lo_over_1_gib(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    db = new_db(pg17)
    size = (1 << 30) + (1 << 20) + 5
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT lo_create(95001), lo_put(95001, %s, 'xxxxx')", (size - 5,))
        conn.execute("SELECT lo_put(95001, 0, decode(repeat('ab', 3000000), 'hex'))")
    out = tmp_path / "out"
    result = run("export", "-d", db, "-o", str(out))
    assert result.exit_code == 0, result.stderr
    path = out / "95001"
    assert path.stat().st_size == size
    assert path.stat().st_blocks * 512 < 64 << 20  # the hole stays a hole
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            sha.update(block)
    with open(out / "manifest.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["sha256"] == sha.hexdigest() and int(row["size"]) == size
