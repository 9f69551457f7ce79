"""Packed dump and restore against real servers: every byte and attribute back, across
majors, through a directory and through a pipe; bad input refused before writing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgblobdump.errors import CorruptArchive, DatabaseError
from pgblobdump.packed import DumpRequest, OnConflict, RestoreRequest, open_source
from pgblobdump.packed.dump.run import dump
from pgblobdump.packed.restore.restorer import restore
from pgblobdump.pg.lostream import Selection
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from tests.conftest import NewDb
from tests.losets import fill, lo_specs, state
from tests.losets import roles as _roles


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(los=lo_specs, stream=st.booleans())
def test_round_trip_16_to_16_17_18(
    pg16: EmbeddedCluster, pg17: EmbeddedCluster, pg18: EmbeddedCluster, new_db: NewDb,
    los: dict[int, tuple[int, int, int, bool]], stream: bool,
) -> None:  # fmt: skip
    _roles(pg16, pg17, pg18)
    src = new_db(pg16)
    fill(src, los)
    expected = state(src)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("a.stream" if stream else "a")
        if stream:
            with path.open("wb") as f:
                dump(src, DumpRequest(jobs=2), stream=f)
        else:
            dump(src, DumpRequest(jobs=2), storage=LocalDirectory(path, create=True))
        for cluster in (pg16, pg17, pg18):
            dst = new_db(cluster)
            with open_source(str(path)) as s:
                r = restore(dst, s.items, RestoreRequest(), index=s.index, metas=s.metas)
            assert r.los == len(expected)
            assert state(dst) == expected


def test_through_a_pipe(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """``pgblobdump dump -o - | pgblobdump restore -``, two real processes."""
    src, dst = new_db(pg17), new_db(pg17)
    _roles(pg17)
    fill(src, {oid: (oid % 5000, 0, 0, oid % 7 == 0) for oid in range(20_000, 20_300)})
    cmd = (f"{sys.executable} -m pgblobdump dump -d '{src}' -o - --jobs 2 |"
           f" {sys.executable} -m pgblobdump restore - -d '{dst}' --json")  # fmt: skip
    done = subprocess.run(["/bin/bash", "-o", "pipefail", "-c", cmd], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert state(dst) == state(src)


def test_a_reader_that_goes_away_fails_the_dump(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """``dump -o - | head -c``: the consumer died (ssh, an upload), so the dump must not
    report success, as it would for a listing cut short by ``| head``."""
    src = new_db(pg17)
    _roles(pg17)
    fill(src, {oid: (8000, 0, 0, False) for oid in range(20_000, 20_400)})
    cmd = f"{sys.executable} -m pgblobdump dump -d '{src}' -o - | head -c 1000 >/dev/null"
    done = subprocess.run(["/bin/bash", "-o", "pipefail", "-c", cmd], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 11, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "Error: the reader of the stream (-o -) went away: what it got is incomplete"
    ), done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def _archive(db: str, tmp: Path) -> Path:
    path = tmp / "archive"
    dump(db, DumpRequest(), storage=LocalDirectory(path, create=True))
    return path


def test_an_existing_oid_is_refused_before_anything_is_written(
    pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src, dst = new_db(pg16), new_db(pg16)
    _roles(pg16)
    fill(src, {oid: (10, 0, 0, False) for oid in range(30_000, 30_100)})
    path = _archive(src, tmp_path)
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(30050, 'theirs')")
    with open_source(str(path)) as s, pytest.raises(DatabaseError, match="LO 30050 already"):
        restore(dst, s.items, RestoreRequest(), index=s.index, metas=s.metas)
    assert state(dst) == {30050: (b"theirs", "postgres", None, None)}
    with open_source(str(path)) as s:
        r = restore(dst, s.items, RestoreRequest(on_conflict=OnConflict.SKIP), index=s.index)
    assert (r.los, r.skipped) == (99, 1)
    assert state(dst)[30050][0] == b"theirs"


def test_a_missing_role_is_named(pg16: EmbeddedCluster, pg18: EmbeddedCluster, new_db: NewDb,
                                 tmp_path: Path) -> None:  # fmt: skip
    src = new_db(pg16)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS pgbd_t_only16")
        conn.execute("CREATE ROLE pgbd_t_only16")
        conn.execute("SET ROLE pgbd_t_only16")
        conn.execute("SELECT lo_from_bytea(40000, 'x')")
    path = _archive(src, tmp_path)
    dst = new_db(pg18)
    with (
        open_source(str(path)) as s,
        pytest.raises(DatabaseError, match="missing on the target: pgbd_t_only16"),
    ):
        restore(dst, s.items, RestoreRequest(), index=s.index, metas=s.metas)
    with open_source(str(path)) as s:
        restore(dst, s.items, RestoreRequest(no_owner=True), index=s.index, metas=s.metas)
    assert state(dst)[40000][1] == "postgres"


def test_an_interrupted_dump_is_refused(
    pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src = new_db(pg16)
    fill(src, {50_000: (10, 0, 0, False)})
    path = _archive(src, tmp_path)
    (path / "manifest.json").unlink()
    with pytest.raises(CorruptArchive, match="interrupted dump"), open_source(str(path)):
        pass


def test_dump_selections(pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    src = new_db(pg16)
    _roles(pg16)
    fill(src, {oid: (5, 0, 0, False) for oid in range(60_000, 60_050)})
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute('CREATE SCHEMA "My Schema"')
        conn.execute('CREATE TABLE "My Schema".docs (id int, "File" oid)')
        conn.execute('INSERT INTO "My Schema".docs VALUES (1, 60003), (2, 60007), (3, NULL)')
    a = dump(
        src,
        DumpRequest(Selection(60_010, 60_019)),
        storage=LocalDirectory(tmp_path / "r", create=True),
    )
    assert a.los == 10
    b = dump(src, DumpRequest(Selection(referenced_by=(("My Schema.docs", "File"),))),
             storage=LocalDirectory(tmp_path / "c", create=True))  # fmt: skip
    assert b.los == 2


@pytest.mark.scale
def test_ctrl_c_during_restore_removes_what_it_made_and_kill_9_then_resume(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src = new_db(pg17)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT count(lo_from_bytea(o, decode(repeat('ab', 1000), 'hex')))"
                     " FROM generate_series(100000, 159999) o")  # fmt: skip
    path = _archive(src, tmp_path)

    def start(dst: str, *extra: str) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "pgblobdump", "restore", str(path), "-d", dst, *extra]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def count(db: str) -> int:
        with psycopg.connect(db) as conn:
            row = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        assert row is not None
        return int(row[0])

    def wait_some(db: str, proc: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + 60
        while count(db) < 5_000:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)

    dst = new_db(pg17)
    with start(dst) as proc:
        wait_some(dst, proc)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "removed the" in err and count(dst) == 0

    with start(dst) as proc:
        wait_some(dst, proc)
        proc.kill()
        proc.communicate(timeout=60)
    assert 0 < count(dst) < 60_000
    with start(dst, "--resume", "--json") as proc:
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert state(dst) == state(src)


def test_a_full_disk_leaves_no_archive(
    pg16: EmbeddedCluster, new_db: NewDb, small_disk: Path
) -> None:
    src = new_db(pg16)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), 3200), 'hex')))"
                     " FROM generate_series(70000, 70049) o")  # fmt: skip
    out = small_disk / "lobs.pbd"
    done = subprocess.run(
        [sys.executable, "-m", "pgblobdump", "dump", "-d", src, "-o", str(out),
         "--volume-size", "1MiB", "--level", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 10, done.stderr
    assert done.stderr.startswith("Error: ") and "disk is full" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert list(small_disk.iterdir()) == []


def test_awkward_names_and_comments(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    """Role names that need quoting, comments with tabs, newlines, backslashes, quotes."""
    src, dst = new_db(pg17), new_db(pg17)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute('DROP ROLE IF EXISTS "Odd ""Role"", x"')
        conn.execute('CREATE ROLE "Odd ""Role"", x"')
        conn.execute('SET ROLE "Odd ""Role"", x"')
        conn.execute("SELECT lo_from_bytea(80000, 'a'), lo_create(80001)")
        conn.execute('GRANT SELECT ON LARGE OBJECT 80000, 80001 TO "Odd ""Role"", x", PUBLIC')
        conn.execute("RESET ROLE")
        conn.execute("COMMENT ON LARGE OBJECT 80000 IS %s" % psycopg.sql.quote("t\tn\nb\\q'\"ü"))  # noqa: UP031
    path = _archive(src, tmp_path)
    with open_source(str(path)) as s:
        restore(dst, s.items, RestoreRequest(), index=s.index, metas=s.metas)
    assert state(dst) == state(src)
    assert state(dst)[80000][3] == "t\tn\nb\\q'\"ü"


def test_large_los_are_read_in_ranges_not_held(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """LOs over lostream.BIG are read in ranges of that size, their size known first
    (memory stays flat for a 4 TB LO); their bytes, holes (pages never written: zeros)
    included, come back exactly."""
    src = new_db(pg17)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(91000, %s)", (os.urandom(3 << 20),))
        conn.execute("SELECT lo_create(91001)")
        conn.execute("SELECT lo_put(91001, 5 << 20, 'after a 5 MiB hole')")
        conn.execute("SELECT lo_from_bytea(91002, 'small')")
    path = _archive(src, tmp_path)
    dst = new_db(pg17)
    with open_source(str(path)) as s:
        restore(dst, s.items, RestoreRequest(), index=s.index, metas=s.metas)
    assert state(dst) == state(src)
