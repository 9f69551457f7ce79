"""``restore --jobs 2``: two connections restore one directory archive (contiguous OID
ranges cut by the index), on real servers and real signals: every LO equal to the
source, --part with --jobs, --on-conflict skip around foreign LOs (--skip-damaged with
--jobs 2: tests/packed/test_skip_damaged.py), and an interrupted
or killed run that removes exactly what it made, or names it and --resume finishes it."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pgblobdump.packed import DumpRequest
from pgblobdump.packed.dump.run import dump
from pgblobdump.packed.read.parts import share
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from pgblobdump.storage import open as open_storage
from tests.conftest import NewDb
from tests.losets import State, fill, state
from tests.losets import roles as _roles

COUNT = 20_000


@dataclass(frozen=True)
class Archive:
    path: Path
    expected: State


def _pgbd(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "pgblobdump", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _run(*args: str) -> tuple[int, str]:
    with _pgbd(*args) as proc:
        _out, err = proc.communicate(timeout=300)
    return proc.returncode, err


def _los(db: str) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
    return int(row[0]) if row else 0


def _error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def archive(pg17: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archive]:
    """``generate --owners 2 --grants 0.3 --comments 0.2`` (20,000 LOs of 1-8 KiB), 30
    LOs with ACLs by another grantor than the owner, then ``dump``."""
    _roles(pg17)
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS rjobs_src WITH (FORCE)")
        conn.execute("CREATE DATABASE rjobs_src")
    db = pg17.conninfo("rjobs_src")
    code, err = _run("generate", "-d", db, "-n", str(COUNT), "--size", "1KiB-8KiB",
                     "--owners", "2", "--grants", "0.3", "--comments", "0.2",
                     "--start-oid", "100000")  # fmt: skip
    assert code == 0, err
    fill(db, {oid: (oid % 3000, oid % 3, oid % 3, oid % 2 == 0) for oid in range(20_000, 20_030)})
    path = tmp_path_factory.mktemp("rjobs") / "a"
    dump(db, DumpRequest(), storage=LocalDirectory(path, create=True))
    yield Archive(path, state(db))
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS rjobs_src WITH (FORCE)")


def test_jobs_2_restores_every_lo_equal(
    archive: Archive, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Bytes, owner, ACL with its grantors, comment: all as in the source."""
    dst = new_db(pg17)
    # the archive has ACLs by another grantor than the owner
    assert any(a and any("pgbd_t_granter" in i.split("/")[1] for i in a)
               for _, _, a, _ in archive.expected.values())  # fmt: skip
    code, err = _run("restore", str(archive.path), "-d", dst, "--jobs", "2")
    assert code == 0, err
    assert state(dst) == archive.expected


def test_jobs_2_as_a_non_superuser_grants_as_each_grantor(
    archive: Archive, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A role that may not update the catalog: the ACLs are GRANTs made as each grantor,
    on two connections."""
    dst = new_db(pg17)
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'pgbd_rjobs'").fetchone():
            conn.execute("CREATE ROLE pgbd_rjobs LOGIN")
        roles = [r for (r,) in conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname LIKE 'pgbd\\_%' AND rolname <> 'pgbd_rjobs'"
        ).fetchall()]  # fmt: skip
        for r in roles:
            conn.execute(f"GRANT {r} TO pgbd_rjobs WITH ADMIN OPTION")
    code, err = _run("restore", str(archive.path), "-d", f"{dst} user=pgbd_rjobs", "--jobs", "2")
    assert code == 0, err
    got = state(dst)
    assert got.keys() == archive.expected.keys()
    for oid, (data, owner, acl, comment) in archive.expected.items():
        if acl == [f"{owner}=rw/{owner}"]:  # as GRANTs, one restore connection or two:
            acl = None  # the owner's lone entry is implied (NULL), see the report
        assert got[oid] == (data, owner, acl, comment), oid


def test_part_with_jobs_2(archive: Archive, pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """--part 1/2 --jobs 2 restores exactly share 1 of 2; --part 2/2 --jobs 2 the rest."""
    dst = new_db(pg17)
    first, last = share(PackedDirectory(open_storage(str(archive.path))), 1, 2)
    code, err = _run("restore", str(archive.path), "-d", dst, "--part", "1/2", "--jobs", "2")
    assert code == 0, err
    assert state(dst) == {o: v for o, v in archive.expected.items() if first <= o <= last}
    code, err = _run("restore", str(archive.path), "-d", dst, "--part", "2/2", "--jobs", "2")
    assert code == 0, err
    assert state(dst) == archive.expected


def test_on_conflict_skip_never_touches_a_foreign_lo(
    archive: Archive, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Foreign LOs at OIDs of both halves of the archive: refused before anything is
    written without --on-conflict skip; with it, they are left as they were and every
    other LO is restored."""
    dst = new_db(pg17)
    oids = sorted(archive.expected)
    foreign = [oids[5], oids[len(oids) // 2 + 7], oids[-3]]
    with psycopg.connect(dst, autocommit=True) as conn:
        for o in foreign:
            conn.execute("SELECT lo_from_bytea(%s::int8::oid, 'foreign')", (o,))
            conn.execute(f"COMMENT ON LARGE OBJECT {o} IS 'mine'")
    before = state(dst)
    code, err = _run("restore", str(archive.path), "-d", dst, "--jobs", "2")
    assert code == 4, err
    assert f"LO {foreign[0]} already exists in the target" in _error_line(err)
    assert state(dst) == before
    code, err = _run("restore", str(archive.path), "-d", dst, "--jobs", "2", "--on-conflict",
                     "skip")  # fmt: skip
    assert code == 0, err
    want = dict(archive.expected) | before
    assert state(dst) == want


def test_jobs_on_a_stream_is_refused() -> None:
    code, err = _run("restore", "-", "-d", "dbname=x", "--jobs", "2")
    assert code == 2, err
    assert "not a stream" in _error_line(err)


def _wait_for(db: str, at_least: int, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while _los(db) < at_least:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)


def _sessions(db: str) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE 'pgblobdump%%'"
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_removes_what_both_connections_made(
    archive: Archive, pg17: EmbeddedCluster, new_db: NewDb, sig: signal.Signals
) -> None:
    """Ctrl-C or SIGTERM once LOs are in: exit 130/143, one line, and nothing this run
    made is left (both connections' LOs); a foreign LO stays."""
    dst = new_db(pg17)
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(42, 'foreign')")
    with _pgbd("restore", str(archive.path), "-d", dst, "--jobs", "2") as proc:
        _wait_for(dst, 2, proc)
        assert _sessions(dst) >= 2  # both connections at work
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    line = _error_line(err)
    print(f"\n{line}")
    assert line.startswith(f"Error: restore interrupted by {sig.name}"), line
    assert "removed the" in line, line
    assert state(dst) == {42: (b"foreign", state(dst)[42][1], None, None)}


def test_killed_then_resume_completes(
    archive: Archive, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """kill -9 mid-restore: the next run is refused naming --resume (the journal holds
    both connections' LOs), and --resume --jobs 2 completes it."""
    dst = new_db(pg17)
    with _pgbd("restore", str(archive.path), "-d", dst, "--jobs", "2") as proc:
        _wait_for(dst, 2, proc)
        proc.kill()
        proc.communicate(timeout=60)
    left = _los(dst)
    assert 0 < left < len(archive.expected)
    code, err = _run("restore", str(archive.path), "-d", dst, "--jobs", "2")
    assert code == 4, err
    line = _error_line(err)
    assert re.search(r"interrupted and left [\d,]+ LOs", line), line
    assert "--jobs 2 --resume" in line, line
    code, err = _run("restore", str(archive.path), "-d", dst, "--jobs", "2", "--resume")
    assert code == 0, err
    assert state(dst) == archive.expected


def test_backend_terminated_names_remainder_then_resume(
    archive: Archive, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """One connection's backend terminated: the whole restore stops (exit 3, one line),
    and what is left is removed or named with --resume, which then completes it."""
    dst = new_db(pg17)
    with _pgbd("restore", str(archive.path), "-d", dst, "--jobs", "2") as proc:
        _wait_for(dst, 2, proc)
        with psycopg.connect(dst, autocommit=True) as conn:
            row = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname ="
                " current_database() AND application_name LIKE 'pgblobdump%%' LIMIT 1"
            ).fetchone()
            assert row is not None
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    line = _error_line(err)
    print(f"\n{line}")
    assert line.startswith("Error: restore failed: lost the connection to the server"), line
    if _los(dst):
        assert "run the restore again with --resume" in line, line
    code, err = _run("restore", str(archive.path), "-d", dst, "--jobs", "2", "--resume")
    assert code == 0, err
    assert state(dst) == archive.expected


@pytest.mark.scale  # a cluster of its own, as test_faults' server-stopped case: ~10 s
def test_server_stopped_mid_restore_names_remainder_then_resume(archive: Archive) -> None:
    """The whole server stopped (immediate shutdown) under ``restore --jobs 2``: exit 3,
    one line naming what is left with --jobs 2 --resume (its clean-up cannot connect);
    once the server is back, --resume completes it."""
    from pgblobdump.servers.runas import reachable_bin_dir

    with EmbeddedCluster(17, settings={"synchronous_commit": "on"}) as cluster:
        _roles(cluster)
        with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
            for r in ("pgbd_owner_1", "pgbd_owner_2", "pgbd_reader", "pgbd_writer"):
                conn.execute(f"CREATE ROLE {r}")
            conn.execute("CREATE DATABASE dst")
        dst = cluster.conninfo("dst")
        with _pgbd("restore", str(archive.path), "-d", dst, "--jobs", "2") as proc:
            _wait_for(dst, 2, proc)
            pg_ctl = reachable_bin_dir(cluster.tc.bin_dir, cluster.who) / "pg_ctl"
            done = cluster.who.run(
                [str(pg_ctl), "-D", str(cluster.datadir), "-m", "immediate", "-w", "stop"], 60
            )
            assert done.returncode == 0, done.stderr
            _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 3, err
        line = _error_line(err)
        print(f"\n{line}")
        assert line.startswith("Error: restore failed: lost the connection to the server"), line
        assert "what this restore created remains: " in line, line
        assert "--jobs 2 --resume" in line, line
        cluster.start()
        dst = cluster.conninfo("dst")
        assert _los(dst) > 0
        code, err = _run("restore", str(archive.path), "-d", dst, "--jobs", "2", "--resume")
        assert code == 0, err
        assert state(dst) == archive.expected


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_empty_los_with_owners_acls_and_comments(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, jobs: str
) -> None:
    """Empty LOs take the column path (a frame of them is read with no object per LO):
    owners, ACLs and comments still come back to each LO as in the source, on one
    connection and on two."""
    _roles(pg17)
    src = new_db(pg17)
    code, err = _run("generate", "-d", src, "-n", "6000", "--owners", "2", "--grants", "0.3",
                     "--comments", "0.2", "--start-oid", "500000")  # fmt: skip
    assert code == 0, err
    dump(src, DumpRequest(), storage=LocalDirectory(tmp_path / "a", create=True))
    dst = new_db(pg17)
    code, err = _run("restore", str(tmp_path / "a"), "-d", dst, "--jobs", jobs)
    assert code == 0, err
    want = state(src)
    assert len(want) == 6000 and {d for d, _, _, _ in want.values()} == {b""}
    assert len({(o, str(a), c) for _, o, a, c in want.values()}) > 3
    assert state(dst) == want


def test_jobs_2_together_take_one_batch_of_the_lock_table(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """``restore --jobs 2`` while the lock table has room for one restore's batch of
    comment locks and a little more (as when other sessions hold the rest): each
    connection's batches take half of that share, so the two at once fit, where two
    batches sized for a restore alone would run out of shared memory."""
    from pgblobdump.pg.locks import LockBudget
    from tests.faults.test_load import _free_locks

    src, dst = new_db(pg17), new_db(pg17)
    code, err = _run("generate", "-d", src, "-n", "8000", "--comments", "1")
    assert code == 0, err
    dump(src, DumpRequest(), storage=LocalDirectory(tmp_path / "a", create=True))
    with psycopg.connect(dst) as conn:
        share = LockBudget.read(conn).per_transaction
    free = _free_locks(dst)
    assert free > 2 * share
    with psycopg.connect(dst) as others:
        others.execute(
            "SELECT count(pg_advisory_xact_lock(g)) FROM generate_series(1, %s::int8) g",
            (free - share - share // 4,),
        )
        code, err = _run("restore", str(tmp_path / "a"), "-d", dst, "--jobs", "2")
        others.rollback()
    assert code == 0, err
    assert state(dst) == state(src)
