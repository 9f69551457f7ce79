"""Two writers given one archive name, as real processes on a real SeaweedFS and a real
directory: exactly one ends with an archive, the other is refused in one line, and the
archive verifies. The S3 layer's errors: a missing archive, bugs, what an abort left."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import Popen

import pytest

from pgblobdump.errors import FileError
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.servers.seaweed import BUCKET, LocalS3
from pgblobdump.storage import LocalDirectory
from pgblobdump.storage.base import CLAIM_NAME
from pgblobdump.storage.s3 import S3Prefix
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import fill
from tests.losets import roles as _roles
from tests.storage.flaky import SLOW_DOWN

# Enough that one run is still writing when the other starts (some 40 volumes).
LOS = {20000 + i: (99_000, i % 3, i % 3, i % 5 == 0) for i in range(400)}


def _two_at_once(args: list[str]) -> list[tuple[int, str]]:
    """Start two ``pgblobdump`` processes with ``args`` at once; their codes and stderr."""
    cmd = [sys.executable, "-m", "pgblobdump", *args]
    procs = [
        subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy()
        )
        for _ in range(2)
    ]
    out = []
    for p in procs:
        _, err = p.communicate(timeout=300)
        out.append((p.returncode, err.decode()))
    return out


def _one_won(results: list[tuple[int, str]]) -> None:
    codes = sorted(code for code, _ in results)
    assert codes == [0, 11], results
    err = next(err for code, err in results if code == 11)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    # Refused by the other's claim, or (it was that quick) by its finished archive.
    assert "is writing here" in lines[0] or "choose a new" in lines[0], lines[0]
    print(f"\nloser: {lines[0]}")


def _verify(archive: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pgblobdump", "verify", archive],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_two_dumps_into_one_s3_prefix(pg17: EmbeddedCluster, new_db: NewDb, s3_url: str) -> None:
    _roles(pg17)
    db = new_db(pg17)
    fill(db, LOS)
    _one_won(_two_at_once(["dump", "-d", db, "-o", s3_url, "--volume-size", "1MiB", "-j", "2"]))
    _verify(s3_url)
    assert CLAIM_NAME not in S3Prefix(s3_url).names()  # released by the winner


def test_two_dumps_into_one_directory(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    _roles(pg17)
    db = new_db(pg17)
    fill(db, LOS)
    out = tmp_path / "archive"
    _one_won(_two_at_once(["dump", "-d", db, "-o", str(out), "--volume-size", "1MiB", "-j", "2"]))
    _verify(str(out))
    assert not (out / CLAIM_NAME).exists()
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("where", ["s3", "local"])
def test_claims_made_at_the_same_moment_one_wins(where: str, s3_url: str, tmp_path: Path) -> None:
    """Eight claims released by one barrier: the store's conditional write (SeaweedFS
    honours If-None-Match: *) or O_EXCL lets exactly one through."""
    stores: list[S3Prefix | LocalDirectory] = [
        S3Prefix(s3_url, create=True) if where == "s3" else LocalDirectory(tmp_path, create=True)
        for _ in range(8)
    ]
    barrier = threading.Barrier(len(stores))
    won: list[int] = []
    refused: list[str] = []

    def claim(k: int) -> None:
        barrier.wait()
        try:
            stores[k].claim(f"claim {k}")
            won.append(k)
        except FileError as e:
            refused.append(str(e))

    threads = [threading.Thread(target=claim, args=(k,)) for k in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == len(stores) - 1, (won, refused)
    assert all(f"claim {won[0]} started " in r or "another run" in r for r in refused), refused
    stores[won[0]].release()
    stores[0].claim("again")  # released: free to claim
    stores[0].release()


def test_a_stale_claim_is_named(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str, tmp_path: Path
) -> None:
    """A dump killed with kill -9 leaves its claim: a rerun is refused, saying whose it
    is and what to delete."""
    _roles(pg17)
    db = new_db(pg17)
    fill(db, {20000: (10, 0, 0, False)})
    S3Prefix(s3_url, create=True).claim("pgblobdump dump")  # and never released
    with S3Prefix(s3_url).create("data-1-000001.pbd") as f:
        f.write(b"what a killed dump left")
    result = run("dump", "-d", db, "-o", s3_url)
    assert_one_line_error(result, 11, "pgblobdump dump started ")
    assert "is writing here" in result.stderr and "if that run was killed, delete" in result.stderr
    assert f"left: {CLAIM_NAME}, data-1-000001.pbd; see docs/s3.md)" in result.stderr  # no uploads
    out = tmp_path / "a"
    LocalDirectory(out, create=True).claim("pgblobdump dump")
    result = run("dump", "-d", db, "-o", str(out))
    assert_one_line_error(result, 11, f"if that run was killed, remove {out} first")
    assert sorted(p.name for p in out.iterdir()) == [CLAIM_NAME]  # the other's: kept


def test_a_missing_s3_archive_is_not_found(s3_url: str, tmp_path: Path) -> None:
    """Nothing under a prefix is what a missing directory is: exit 8, not 7."""
    for args in (["ls", s3_url], ["verify", s3_url], ["cat", s3_url, "1"]):
        assert_one_line_error(run(*args), 8, "no such archive")
    assert_one_line_error(run("ls", str(tmp_path / "none")), 8, "no such archive")


def test_a_bug_is_not_a_storage_error(s3_url: str) -> None:
    """Only the store's own errors become exit 12; a programming error propagates as
    itself (and the upload it was in is still aborted: nothing is stored)."""
    store = S3Prefix(s3_url, create=True)
    with pytest.raises(TypeError, match="bytes-like"), store.create("x") as f:
        f.write("text")  # type: ignore[arg-type]
    assert store.names() == []


class _CutOff:
    """A TCP proxy in front of the real server that forwards until ``cut()``; then it
    drops every connection and answers every new one 503 (a server gone bad mid-dump)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.cut_off = False
        self._server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if self.cut_off:
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)
                conn.sendall(SLOW_DOWN)
            return
        up = socket.create_connection(("127.0.0.1", self.target_port))
        with self._lock:
            self._open += [conn, up]
        threading.Thread(target=_pump, args=(up, conn), daemon=True).start()
        _pump(conn, up)

    def cut(self) -> None:
        self.cut_off = True
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.cut()
        self._server.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    for s in (src, dst):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


BIG = {30000 + i: (99_000, 0, 0, False) for i in range(400)}  # 40 MB, random
"""Volumes of 20 MiB: each one a multipart upload (parts are 16 MiB)."""
BIG_DUMP = ["--volume-size", "20MiB", "--level", "0"]


def _dump_until(
    db: str, url: str, env: dict[str, str], ready: Callable[[], bool], *more: str
) -> Popen:
    """A dump process, returned once ``ready()`` (or it ended, or 60 s passed)."""
    cmd = [sys.executable, "-m", "pgblobdump", "dump", "-d", db, "-o", url, *BIG_DUMP, *more]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and not ready():
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("full", [False, True], ids=["los", "full"])
def test_an_abort_names_the_volumes_and_upload_it_could_not_remove(
    full: bool, pg17: EmbeddedCluster, new_db: NewDb, s3_url: str, local_s3: LocalS3
) -> None:
    """The server stops answering after a volume is complete and while the next one is
    uploading: the dump fails (12) and its one line names each volume, the unfinished
    upload, pg_dump's file (--full) and the claim it could not remove."""
    _roles(pg17)
    db = new_db(pg17)
    fill(db, BIG)
    proxy = _CutOff(int(local_s3.endpoint.rsplit(":", 1)[1]))
    direct = S3Prefix(s3_url)
    before = _uploads(local_s3)

    volume_1: set[str] = set()  # the uploads listed before volume 1 was there

    def second_volume_uploading() -> bool:
        # SeaweedFS lists volume 1 a moment before it drops volume 1's upload (a busy
        # machine once cut that completion instead of volume 2's), and the dump starts
        # volume 2 only once volume 1's completion has answered: an upload never listed
        # before volume 1 was there is volume 2's.
        names = direct.names()
        uploads = set(_uploads(local_s3))
        if "data-1-000001.pbd" not in names:
            volume_1.update(uploads)
            return False
        return ("database.dump" in names or not full) and bool(uploads - volume_1 - set(before))

    try:
        env = {**os.environ, "AWS_ENDPOINT_URL": proxy.endpoint}
        with _dump_until(db, s3_url, env, second_volume_uploading, *["--full"] * full) as proc:
            proxy.cut()
            _, err = proc.communicate(timeout=300)
    finally:
        proxy.close()
    # One Error line, the last (--full notes "waiting for pg_dump" before it).
    lines = err.decode().strip().splitlines()
    line = lines[-1]
    print(f"\n{line}")
    assert proc.returncode == 12 and [x for x in lines if "Error" in x] == [line], lines
    assert line.startswith("Error: ")
    assert direct.names() == [CLAIM_NAME, "data-1-000001.pbd", *["database.dump"] * full]
    if full:
        assert f"could not remove {s3_url}/database.dump (the server kept" in line, line
    assert f"could not remove {s3_url}/data-1-000001.pbd, " in line
    # Named where it failed: on aborting it, or on completing it.
    assert re.search(
        rf"{s3_url}/data-1-000002.pbd \(its unfinished upload\) \(the server kept"
        rf"|writing {s3_url}/data-1-000002.pbd: .*; its multipart upload may be left unfinished",
        line,
    ), line
    assert f"could not remove {s3_url}/{CLAIM_NAME} (the server kept answering 503" in line
    assert len(_uploads(local_s3)) == len(before) + 1  # the one it named


def test_interrupted_dump_aborts_its_upload_and_a_killed_one_is_named(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str, local_s3: LocalS3
) -> None:
    """SIGTERM mid-upload: the multipart upload is aborted, nothing is left under the
    prefix. kill -9 mid-upload: the claim stays, and a rerun says whose it is and what
    to delete (the upload itself stays until a lifecycle rule or the user aborts it)."""
    _roles(pg17)
    db = new_db(pg17)
    fill(db, BIG)
    before = _uploads(local_s3)
    env = os.environ.copy()

    def uploading() -> bool:
        return len(_uploads(local_s3)) > len(before)

    with _dump_until(db, s3_url, env, uploading) as proc:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143, err
    assert _uploads(local_s3) == before
    assert S3Prefix(s3_url).names() == []

    killed = s3_url + "-killed"
    with _dump_until(db, killed, env, uploading) as proc:
        proc.kill()
        proc.wait()
    assert len(_uploads(local_s3)) == len(before) + 1
    rerun = pgbd("dump", "-d", db, "-o", killed)
    lines = rerun.stderr.strip().splitlines()
    assert rerun.returncode == 11 and len(lines) == 1, rerun.stderr
    assert "pgblobdump dump started " in lines[0] and "is writing here" in lines[0], lines[0]
    assert f"delete what it left: {CLAIM_NAME}" in lines[0], lines[0]
    upload = "the unfinished multipart upload of data-1-000001.pbd (started 20"
    assert f", and abort {upload}" in lines[0], lines[0]
    verify = pgbd("verify", killed)
    lines = verify.stderr.strip().splitlines()
    assert verify.returncode == 7 and len(lines) == 1, verify.stderr
    assert f"an interrupted dump, not an archive; it left {upload}" in lines[0], lines[0]


def pgbd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgblobdump", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _uploads(s3: LocalS3) -> list[str]:
    """The multipart uploads SeaweedFS holds unfinished (its filer lists them)."""
    import json
    import urllib.error
    import urllib.request

    url = f"http://127.0.0.1:{s3.ports[4]}/buckets/{BUCKET}/.uploads/"
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            listing = json.load(r)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise
    return [e["FullPath"].rsplit("/", 1)[-1] for e in listing.get("Entries") or []]
