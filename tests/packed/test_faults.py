"""The server lost in the middle of a packed dump or restore, for real: the tool's
backends terminated from another session, or the whole server stopped by an immediate
shutdown, while ``python -m pgblobdump`` runs as a process of its own.

What must hold: a non-zero exit and one ``Error:`` line on stderr saying the connection to
the server was lost (never a traceback, never the password); an interrupted dump leaves
nothing that restore or verify takes for an archive; an interrupted restore removes what
it made, or names what it left and says ``--resume``, and ``restore --resume`` then
completes it, every LO equal to the source's. And one LO over 1 GiB, from 17 to 18."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgblobdump.packed import DumpRequest
from pgblobdump.packed.dump.run import dump
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.servers.runas import reachable_bin_dir
from pgblobdump.storage import LocalDirectory
from pgblobdump.units import noun, plural
from tests.conftest import NewDb
from tests.losets import State, fill, state
from tests.losets import roles as _roles

SECRET = "pgbd-Fault-Secret-Pw"
"""A password in every connection string handed to the tool (the clusters trust local
connections and ignore it): it must appear in nothing the tool prints."""

FIRST = 200_000
"""The first OID of the bulk LOs."""


LOST = r"lost the connection to the server \(database \S+ on [^)]+\): "
"""How a lost server is told: which database on which server, then libpq's reason."""


def _with_password(conninfo: str) -> str:
    return f"{conninfo} password={SECRET}"


def _fill(db: str, n: int, size: int) -> None:
    """``n`` LOs of ``size`` bytes (distinct per OID) from OID FIRST on, in one statement;
    and 30 more with owners, ACLs (by the owner and by another grantor) and comments."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT count(lo_from_bytea(o, decode(repeat(md5(o::text), %s), 'hex')))"
            " FROM generate_series(%s, %s) o",
            (size // 16, FIRST, FIRST + n - 1),
        )
    fill(db, {oid: (oid % 3000, oid % 3, oid % 3, oid % 2 == 0) for oid in range(20_000, 20_030)})


@pytest.fixture(scope="module")
def source(pg17: EmbeddedCluster) -> Iterator[str]:
    """A database of pg17 with 200,030 small LOs: ``dump --jobs 2`` of it takes seconds."""
    _roles(pg17)
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS faults_src WITH (FORCE)")
        conn.execute("CREATE DATABASE faults_src")
    db = pg17.conninfo("faults_src")
    _fill(db, 200_000, 320)
    yield db
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS faults_src WITH (FORCE)")


@dataclass(frozen=True)
class Archive:
    path: Path
    expected: State


@pytest.fixture(scope="module")
def archive(pg17: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archive]:
    """A directory archive of 60,030 LOs (2 KiB each, but the 30 decorated ones), and
    their state: its restore commits about 15 batches over a few seconds."""
    _roles(pg17)
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS faults_arc WITH (FORCE)")
        conn.execute("CREATE DATABASE faults_arc")
    db = pg17.conninfo("faults_arc")
    _fill(db, 60_000, 2048)
    path = tmp_path_factory.mktemp("faults") / "a"
    dump(db, DumpRequest(jobs=2), storage=LocalDirectory(path, create=True))
    yield Archive(path, state(db))
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS faults_arc WITH (FORCE)")


def _pgbd(*args: str, stdout: int | None = subprocess.PIPE) -> subprocess.Popen[str]:
    """``python -m pgblobdump ARGS`` as a process of its own, stderr captured."""
    return subprocess.Popen([sys.executable, "-m", "pgblobdump", *args], stdout=stdout,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _run(*args: str, timeout: float = 120) -> tuple[int, str]:
    with _pgbd(*args) as proc:
        _out, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def _scalar(db: str, query: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def _los(db: str) -> int:
    return _scalar(db, "SELECT count(*) FROM pg_largeobject_metadata")


def _tool_sessions(db: str) -> int:
    """The tool's sessions on ``db``'s database (application_name ``pgblobdump <command>``)."""
    return _scalar(
        db,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name LIKE 'pgblobdump%%'",
    )


def _terminate_others(conn: psycopg.Connection) -> int:
    """pg_terminate_backend of every other session on ``conn``'s database; how many."""
    rows = conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    return sum(bool(r[0]) for r in rows)


def _terminate(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        return _terminate_others(conn)


def _wrote(out: Path) -> bool:
    """Whether a dump has written something to ``out`` (a stream file or a directory)."""
    if out.is_dir():
        return any(out.iterdir())
    return out.is_file() and out.stat().st_size > 0


def _wait_until(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout: float) -> None:
    """Poll ``ready`` until true; the process must run all along (else it ended before the
    fault could be injected: the data set is too small for this machine)."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"ended (exit {proc.returncode}) before the fault: {err}{out}")
        assert time.monotonic() < deadline, "the run never got under way"
        time.sleep(0.01)


def _error_line(err: str) -> str:
    """stderr must be exactly one ``Error: ...`` line: no traceback, no password."""
    assert "Traceback" not in err, err
    assert SECRET not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    return lines[0]


def _lo_counts(text: str) -> list[int]:
    """The counts of a message's ``12,345 LOs (OIDs a..b)`` phrases, in order."""
    return [int(n.replace(",", "")) for n in re.findall(r"([\d,]+) LOs? \(OIDs ", text)]


def _stop_immediately(cluster: EmbeddedCluster) -> None:
    """``pg_ctl stop -m immediate``: every server process quits at once, no checkpoint,
    as in a crash (recovery runs at the next start)."""
    pg_ctl = reachable_bin_dir(cluster.tc.bin_dir, cluster.who) / "pg_ctl"
    done = cluster.who.run(
        [str(pg_ctl), "-D", str(cluster.datadir), "-m", "immediate", "-w", "stop"], 60
    )
    assert done.returncode == 0, done.stderr


# -- dump -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "into",
    [
        "new directory",
        pytest.param("empty directory", marks=pytest.mark.scale),
        pytest.param("stream", marks=pytest.mark.scale),
    ],
)
def test_backends_terminated_mid_dump(
    source: str, pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, into: str
) -> None:
    """``dump --jobs 2`` whose two sessions are terminated while they read: exit 3, one
    line saying the connection was lost, and nothing restore or verify takes for an
    archive: no manifest; a directory the dump made is gone, one it was given is left
    empty; a stream (stdout into a file) ends without its manifest, and restore refuses
    it, removing the LOs it had restored from it."""
    out = tmp_path / ("a.stream" if into == "stream" else "a")
    if into == "empty directory":
        out.mkdir()
    args = ["dump", "-d", _with_password(source), "--jobs", "2", "-o"]
    stream = into == "stream"
    with (
        out.open("wb") if stream else open(os.devnull, "wb") as sink,
        _pgbd(*args, "-" if stream else str(out), stdout=sink.fileno()) as proc,
    ):
        # both workers connected (the second imports the first's snapshot), writing
        _wait_until(proc, lambda: _tool_sessions(source) >= 2 and _wrote(out), 30)
        assert _terminate(source) >= 1
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err
    line = _error_line(err)
    print(f"\n{into}: dump: {line}")
    assert re.match(
        r"Error: dump( worker \d)?: lost the connection to the server \(database \S+ on .+\): ",
        line,
    ), line

    if into == "new directory":
        assert not out.exists(), sorted(p.name for p in out.iterdir())
        no_archive = "no such archive"
    elif into == "empty directory":
        assert out.is_dir() and not any(out.iterdir()), sorted(p.name for p in out.iterdir())
        no_archive = "not a packed archive (no manifest.json)"
    else:
        assert out.stat().st_size > 0  # what it wrote before the fault
        no_archive = "ends before its manifest: an interrupted dump"  # and what it restored
        # of it is removed: "; removed the N LOs (OIDs ...) this run created"
    assert not (out / "manifest.json").exists()

    dst = new_db(pg17)
    code, err = _run("restore", str(out), "-d", _with_password(dst))
    refused = _error_line(err)
    print(f"restore: {refused}")
    assert code == (8 if into == "new directory" else 7), refused
    assert no_archive in refused, refused
    assert _los(dst) == 0, refused
    if not stream:  # verify reads directories only
        code, err = _run("verify", str(out), "-d", _with_password(dst))
        refused = _error_line(err)
        print(f"verify: {refused}")
        assert code == (8 if into == "new directory" else 7), refused
        assert no_archive in refused, refused


# -- restore ----------------------------------------------------------------------------


@pytest.mark.scale  # 8 s; the fast run keeps the dump case (the default run stays < 2 min)
@pytest.mark.parametrize("storm", [False, True], ids=["once", "until-it-exits"])
def test_backend_terminated_mid_restore_then_resume(
    archive: Archive, pg17: EmbeddedCluster, new_db: NewDb, storm: bool
) -> None:
    """restore's session terminated once its first batches committed (once; or every
    session of the tool, its clean-up's too, until it exits): exit 3, one line; what it
    made is removed (and counted), or exactly what is left is named with --resume advice;
    then ``restore --resume`` completes it, every LO equal to the source's."""
    dst = new_db(pg17)
    seen = 0

    def some_restored() -> bool:
        nonlocal seen
        seen = _los(dst)
        return seen > 0

    with _pgbd("restore", str(archive.path), "-d", _with_password(dst)) as proc:
        _wait_until(proc, some_restored, 60)
        with psycopg.connect(dst, autocommit=True) as conn:
            terminated = _terminate_others(conn)
            while storm and proc.poll() is None:
                terminated += _terminate_others(conn)
                time.sleep(0.005)
        assert terminated >= 1
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    line = _error_line(err)
    print(f"\nrestore: {line}")
    assert re.match(
        r"Error: restore failed: lost the connection to the server \(database \S+ on .+\): ", line
    ), line
    left = _los(dst)
    if "; removed the" in line:
        assert left == 0, line
        assert _lo_counts(line.split("; removed the", 1)[1])[0] >= seen, (seen, line)
    else:
        assert "; run the restore again with --resume to finish it: pgblobdump restore " in line
        # what it knows it committed, and perhaps the batch in flight (fate unknown to it)
        named = _lo_counts(line.split("what this restore created remains: ", 1)[1])
        assert left in (named[0], sum(named)), (left, line)
    assert left < len(archive.expected)

    code, err = _run("restore", str(archive.path), "-d", _with_password(dst), "--resume")
    assert code == 0, err
    assert state(dst) == archive.expected


@pytest.mark.scale  # a cluster of its own (like the rest of the suite's slow ones): ~8 s
def test_server_stopped_mid_restore_then_resume(archive: Archive) -> None:
    """The whole server stopped (immediate shutdown) under a restore: exit 3, one line
    naming the lost server and exactly what is left, with --resume advice (its clean-up
    cannot connect); once the server is back, ``restore --resume`` completes it."""
    with EmbeddedCluster(17, settings={"synchronous_commit": "on"}) as cluster:
        _roles(cluster)
        with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE dst")
        dst = cluster.conninfo("dst")
        with _pgbd("restore", str(archive.path), "-d", _with_password(dst)) as proc:
            _wait_until(proc, lambda: _los(dst) > 0, 60)
            _stop_immediately(cluster)
            _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 3, err
        line = _error_line(err)
        print(f"\nrestore: {line}")
        assert re.match(
            r"Error: restore failed: lost the connection to the server \(database \S+ on .+\): ",
            line,
        ), line
        assert f"cannot connect to database dst on {cluster.socket_dir}:" in line, line
        assert "; run the restore again with --resume to finish it: pgblobdump restore " in line
        named = _lo_counts(line.split("what this restore created remains: ", 1)[1])

        cluster.start()
        dst = cluster.conninfo("dst")  # on a new port, perhaps
        left = _los(dst)
        assert left > 0 and left in (named[0], sum(named)), (left, line)
        code, err = _run("restore", str(archive.path), "-d", _with_password(dst), "--resume")
        assert code == 0, err
        assert state(dst) == archive.expected


# -- one LO over 1 GiB ------------------------------------------------------------------

PIECE = 64 << 20
BIG = (1 << 30) + (5 << 20)
BIG_OID = 77_000


def _piece(k: int, size: int) -> bytes:
    """Piece ``k`` of the big LO: a random MiB of its own, repeated (every piece differs,
    every MiB from its neighbours: a piece or a page out of place changes a digest)."""
    block = random.Random(k).randbytes(1 << 20)
    return (block * (PIECE >> 20))[:size]


def _digests(db: str) -> list[tuple[int, str]]:
    """(length, md5) of each 64 MiB of the big LO, computed by the server."""
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT octet_length(b), md5(b) FROM (SELECT o, lo_get(%s, o, %s) AS b"
            " FROM generate_series(0, %s, %s) o) s ORDER BY o",
            (BIG_OID, PIECE, BIG - 1, PIECE),
        ).fetchall()
    return [(int(n), str(h)) for n, h in rows]


def _peak_mib(pid: int) -> int | None:
    """A process's peak resident set so far (VmHWM, reset by exec: the tool's own)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(m.group(1)) >> 10 if m else None


def _measured(*args: str, timeout: float = 900) -> tuple[float, int]:
    """Run the tool to its end, watching its memory: (seconds, peak RSS in MiB as last
    seen before it exited); it must succeed."""
    with tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        with subprocess.Popen([sys.executable, "-m", "pgblobdump", *args],
                              stdout=subprocess.DEVNULL, stderr=err) as proc:  # fmt: skip
            peak = 0
            while proc.poll() is None:
                peak = max(peak, _peak_mib(proc.pid) or 0)
                assert time.monotonic() - t0 < timeout, f"{args[0]} still runs"
                time.sleep(0.05)
        seconds = time.monotonic() - t0
        err.seek(0)
        assert proc.returncode == 0, err.read().decode(errors="replace")
    return seconds, peak


@pytest.mark.scale  # ~75 s
def test_an_lo_over_1_gib_from_17_to_18(
    pg17: EmbeddedCluster, pg18: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """One LO of 1 GiB + 5 MiB, written in 64 MiB pieces (never whole in this process),
    dumped from 17 and restored into 18: same size, same bytes 64 MiB by 64 MiB as the
    pieces written, verify -d clean; no command holds the LO in memory."""
    src, dst = new_db(pg17), new_db(pg18)
    expected = []
    with psycopg.connect(src) as conn, conn.transaction():
        conn.execute("SELECT lo_create(%s)", (BIG_OID,))
        for k, at in enumerate(range(0, BIG, PIECE)):
            data = _piece(k, min(PIECE, BIG - at))
            expected.append((len(data), hashlib.md5(data).hexdigest()))
            conn.execute("SELECT lo_put(%s, %s, %s)", (BIG_OID, at, data))
            del data
    assert _digests(src) == expected
    path = tmp_path / "big"
    dump_s, dump_mib = _measured("dump", "-d", src, "-o", str(path))
    restore_s, restore_mib = _measured("restore", str(path), "-d", dst)
    assert _digests(dst) == expected
    verify_s, verify_mib = _measured("verify", str(path), "-d", dst)
    print(f"\n1 GiB LO: dump {dump_s:.1f} s ({dump_mib} MiB peak), restore {restore_s:.1f} s"
          f" ({restore_mib} MiB), verify -d {verify_s:.1f} s ({verify_mib} MiB)")  # fmt: skip
    assert max(dump_mib, restore_mib, verify_mib) < 256, (dump_mib, restore_mib, verify_mib)


# -- clean-up that cannot hang ------------------------------------------------------------


def _waiting_on_a_lock(db: str) -> bool:
    """Whether a session of the tool waits for a lock (its clean-up's lo_unlink)."""
    return bool(
        _scalar(
            db,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name LIKE 'pgblobdump%%' AND wait_event_type = 'Lock'",
        )
    )


@pytest.mark.parametrize("second_signal", [False, True], ids=["lock-timeout", "second-sigint"])
def test_cleanup_blocked_by_a_lock_names_what_is_left(
    archive: Archive, pg17: EmbeddedCluster, new_db: NewDb, second_signal: bool
) -> None:
    """Ctrl-C of a restore whose clean-up finds one of its LOs locked by another session
    (``lo_unlink`` in a transaction still open): the clean-up gives up at its lock
    timeout (or at once at a second Ctrl-C), exit 130, one line naming exactly what is
    left and the command that finishes the job; that command then does."""
    from pgblobdump.pg.ledger import LOCK_TIMEOUT_MS

    dst = new_db(pg17)
    with (
        _pgbd("restore", str(archive.path), "-d", _with_password(dst), "--no-comments") as proc,
        psycopg.connect(dst) as locker,
    ):
        _wait_until(proc, lambda: _los(dst) > 1000, 60)
        row = locker.execute("SELECT min(oid) FROM pg_largeobject_metadata").fetchone()
        assert row is not None
        locker.execute("SELECT lo_unlink(%s)", (row[0],))  # a lock until it ends
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        if second_signal:
            _wait_until(proc, lambda: _waiting_on_a_lock(dst), 30)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"the clean-up hung: {proc.communicate()[1]}")
        seconds = time.monotonic() - t0
        locker.rollback()
    line = _error_line(err)
    print(f"\n{seconds:.2f} s: {line}")
    assert proc.returncode == 130, err
    assert line.startswith("Error: restore interrupted by SIGINT; "), line
    if second_signal:
        assert "; clean-up stopped by SIGINT; " in line, line
        assert seconds < LOCK_TIMEOUT_MS / 1000, seconds
    else:
        assert "; clean-up failed (" in line and "lock timeout" in line, line
        assert "another session holds a lock on one of them" in line, line
        assert seconds < LOCK_TIMEOUT_MS / 1000 + 10, seconds
    named = _lo_counts(line.split("what this restore created remains: ", 1)[1])
    left = _los(dst)
    assert left > 1000 and left in (named[0], sum(named)), (left, line)
    m = re.search(r"run the restore again with --resume to finish it: (pgblobdump .*)$", line)
    assert m, line
    command = shlex.split(m.group(1))
    assert command[:3] == ["pgblobdump", "restore", str(archive.path)], command
    assert command[-2:] == ["--no-comments", "--resume"] and SECRET not in line, command
    code, err = _run(*command[1:])
    assert code == 0, err
    expected = {oid: (*lo[:3], None) for oid, lo in archive.expected.items()}  # no comments
    assert state(dst) == expected


def test_ctrl_c_while_a_batch_waits_for_a_lock(
    archive: Archive, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Ctrl-C while restore's writer thread waits on the server (another session's open
    transaction created one of the archive's OIDs, so the batch holding it waits for that
    transaction to end): the batch is cancelled and waited for before the clean-up closes
    its connection (closed under the writer, its socket's number went to the clean-up's
    connection, which then hung for ever); everything the restore made is removed."""
    dst = new_db(pg17)
    last = max(archive.expected)
    with (
        psycopg.connect(dst) as blocker,
        _pgbd("restore", str(archive.path), "-d", _with_password(dst)) as proc,
    ):
        blocker.execute("SELECT lo_create(%s)", (last,))  # uncommitted: restore cannot see it
        _wait_until(proc, lambda: _los(dst) > 1000, 60)
        _wait_until(proc, lambda: _waiting_on_a_lock(dst), 60)
        time.sleep(0.3)  # the main thread is waiting for that batch by now
        proc.send_signal(signal.SIGINT)
        try:
            _out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"the clean-up hung: {proc.communicate()[1]}")
        blocker.rollback()
    line = _error_line(err)
    print(f"\n{line}")
    assert proc.returncode == 130, err
    assert line.startswith("Error: restore interrupted by SIGINT; removed the "), line
    assert _los(dst) == 0


@pytest.mark.parametrize("part", [None, "1/2"], ids=["whole", "part"])
def test_kill_9_then_the_same_restore_says_resume(
    archive: Archive,
    pg17: EmbeddedCluster,
    new_db: NewDb,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    part: str | None,
) -> None:
    """kill -9 of a restore (no clean-up can run), then the same restore again: its
    refusal says the LOs are an earlier run's of this archive and names --resume with the
    whole command (the journal told); that command finishes it, every LO equal to the
    source's; and LOs that no interrupted run made get the plain refusal."""
    state_home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state_home))
    dst = new_db(pg17)
    share = ["--part", part] if part else []
    args = ["restore", str(archive.path), "-d", _with_password(dst), *share]
    with _pgbd(*args) as proc:
        _wait_until(proc, lambda: _los(dst) > 1000, 60)
        proc.kill()
        proc.communicate()
    left = _los(dst)
    assert 0 < left < len(archive.expected)

    def refusal() -> tuple[int, str]:
        code, err = _run(*args)
        if part:  # restore --part first says which OIDs its share is
            assert err.startswith(f"part {part}: OIDs "), err
            err = err.split("\n", 1)[1]
        return code, _error_line(err)

    code, line = refusal()
    print(f"\n{line}")
    assert code == 4, line
    assert re.match(r"Error: LO \d+ already exists in the target", line), line
    assert "an earlier restore of this archive into this database was interrupted" in line
    m = re.search(r"run the restore again with --resume to finish it: (pgblobdump .*)$", line)
    assert m, line
    command = shlex.split(m.group(1))
    assert command[:4] == ["pgblobdump", *args[:3]], command
    assert conninfo_to_dict(command[4]) == conninfo_to_dict(dst), command
    assert command[5:] == [*share, "--resume"], command
    assert _los(dst) == left  # the refusal wrote nothing
    # the numbers reconcile: "left" is what the target holds, and the batch in flight
    # when the kill came (in the journal, never committed) is said apart
    said = re.search(r"was interrupted and left ([\d,]+) LOs?( of the ([\d,]+) )?", line)
    assert said, line
    assert int(said.group(1).replace(",", "")) == left, (left, line)
    begun = int(said.group(3).replace(",", "")) if said.group(2) else left
    if begun > left:
        other = plural(begun - left, "LO")
        assert f"the other {other} {noun(begun - left, 'was')} in a batch" in line, line

    with _pgbd(*command[1:], "--json") as proc:
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    done = json.loads(out)
    assert (done["skipped"], done["redone"]) == (left, begun - left), (done, left, begun)
    if not part:
        assert done["los"] == len(archive.expected) - left, done
    print(f"left {left:,} of {begun:,} begun; resumed: {done}")
    if part:
        code, err = _run("restore", str(archive.path), "-d", dst, "--part", "2/2")
        assert code == 0, err
    assert state(dst) == archive.expected
    assert not list(state_home.rglob("*.json"))  # finished: no journal is left

    code, line = refusal()  # now the LOs exist, but no interrupted run made them
    assert code == 4 and "--on-conflict skip" in line and "--resume" not in line, line


@pytest.mark.scale  # waits out STOP_WAIT (30 s) for a worker whose server does not answer
def test_ctrl_c_of_a_dump_whose_server_does_not_answer(source: str, tmp_path: Path) -> None:
    """``dump --jobs 2`` whose backends are frozen (SIGSTOP: the server neither answers
    nor hangs up, as across a cut network) when Ctrl-C comes: the workers are waited for
    STOP_WAIT at most, then the dump removes what it wrote and exits 130 all the same
    (it waited for the stuck worker for ever)."""
    from pgblobdump.packed.dump.run import STOP_WAIT

    out = tmp_path / "a"
    frozen: list[int] = []
    with _pgbd("dump", "-d", source, "--jobs", "2", "-o", str(out)) as proc:
        try:
            _wait_until(proc, lambda: _tool_sessions(source) >= 2 and _wrote(out), 30)
            with psycopg.connect(source, autocommit=True) as conn:
                frozen = [int(r[0]) for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name LIKE 'pgblobdump%%'"
                ).fetchall()]  # fmt: skip
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            time.sleep(0.5)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            try:
                _out, err = proc.communicate(timeout=STOP_WAIT + 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                pytest.fail(f"the dump hung: {proc.communicate()[1]}")
            seconds = time.monotonic() - t0
        finally:
            for pid in frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
    line = _error_line(err)
    print(f"\n{seconds:.1f} s: {line}")
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT" in line, line
    assert not out.exists(), sorted(p.name for p in out.iterdir())
