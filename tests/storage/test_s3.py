"""Packed archives on a real S3-compatible server (SeaweedFS on loopback): round trips,
restores split across processes, and the failures a user meets, each a one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.servers.seaweed import BUCKET, SECRET_KEY, LocalS3
from pgblobdump.storage.s3 import S3Prefix
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import fill, state
from tests.losets import roles as _roles
from tests.packed.test_pack import _as_pg_dump_sees
from tests.storage.flaky import FlakyProxy

LOS = {
    **{16384 + i: (i * 97 % 5000, i % 3, i % 3, i % 4 == 0) for i in range(300)},
    70000: (3 << 20, 1, 2, True),  # several frames
    2**31 + 5: (10, 0, 0, False),
}


def pgbd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgblobdump", *args], capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=300, check=False,
    )  # fmt: skip


def test_dump_restore_ls_cat_verify_through_s3(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    _roles(pg17)
    src, dst = new_db(pg17), new_db(pg17)
    fill(src, LOS)
    dumped = run("dump", "-d", src, "-o", s3_url, "--volume-size", "1MiB", "--json")
    assert dumped.exit_code == 0, dumped.stderr
    names = S3Prefix(s3_url).names()
    assert "manifest.json" in names and any(n.startswith("data-") for n in names)
    listed = run("ls", s3_url, "--oids", "70000-70000", "--json")
    assert listed.exit_code == 0 and '"size": 3145728' in listed.stdout
    out = run("cat", s3_url, "16390")
    assert out.exit_code == 0 and out.stdout_bytes == state(src)[16390][0]
    restored = run("restore", s3_url, "-d", dst, "--json")
    assert restored.exit_code == 0, restored.stderr
    assert state(dst) == state(src)
    assert run("verify", s3_url, "-d", dst).exit_code == 0


def test_restore_split_across_three_processes(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    _roles(pg17)
    src, dst = new_db(pg17), new_db(pg17)
    fill(src, LOS)
    assert run("dump", "-d", src, "-o", s3_url, "--volume-size", "1MiB", "-j", "2").exit_code == 0
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "pgblobdump", "restore", s3_url, "-d", dst, "--part", f"{k}/3"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=os.environ.copy(),
        )
        for k in (1, 2, 3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert state(dst) == state(src)
    assert run("verify", s3_url, "-d", dst).exit_code == 0


def test_wrong_credentials_missing_bucket_unreachable_endpoint(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg17)
    bad = f"s3://no-such-bucket-{os.getpid()}/x"
    assert_one_line_error(run("dump", "-d", db, "-o", bad), 12, "no bucket")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    result = run("ls", f"s3://{BUCKET}/anything")
    assert_one_line_error(result, 12, "access denied")
    assert "not-the-secret" not in result.output + result.stderr
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert_one_line_error(run("ls", s3_url), 12, "cannot reach http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "not a url")
    assert_one_line_error(run("ls", s3_url), 2, "is not an http(s):// URL")
    assert_one_line_error(run("dump", "-d", db, "-o", "s3://UPPER/x"), 2, "not s3://BUCKET")


def test_no_secret_in_any_output(pg17: EmbeddedCluster, new_db: NewDb, s3_url: str) -> None:
    db = new_db(pg17)
    fill(db, {20000: (10, 0, 0, False)})
    result = pgbd("dump", "-d", db, "-o", s3_url, "--json")
    assert result.returncode == 0, result.stderr
    assert SECRET_KEY not in result.stdout + result.stderr
    manifest = S3Prefix(s3_url).read_range("manifest.json", 0, 1 << 20)
    assert SECRET_KEY.encode() not in manifest


def test_a_corrupt_object_is_named(pg17: EmbeddedCluster, new_db: NewDb, s3_url: str) -> None:
    db = new_db(pg17)
    fill(db, {20000 + i: (2000, 0, 0, False) for i in range(20)})
    assert run("dump", "-d", db, "-o", s3_url).exit_code == 0
    store = S3Prefix(s3_url)
    volume = next(n for n in store.names() if n.startswith("data-"))
    data = bytearray(store.read_range(volume, 0, store.size(volume)))
    data[len(data) // 2] ^= 0xFF
    store.remove(volume)
    with store.create(volume) as f:
        f.write(bytes(data))
    result = run("verify", s3_url)
    assert result.exit_code == 7, result.stderr
    assert volume in result.stderr


@pytest.mark.scale
@pytest.mark.s3  # a SeaweedFS of its own
def test_server_killed_mid_upload_leaves_no_archive_and_a_rerun_works(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    _roles(pg17)
    db = new_db(pg17)
    fill(db, {30000 + i: (90_000, 0, 0, False) for i in range(400)})  # ~36 MB, random
    url = f"s3://{BUCKET}/killed"
    with LocalS3() as s3:
        env = s3.env()
        with subprocess.Popen(
            [sys.executable, "-m", "pgblobdump", "dump", "-d", db, "-o", url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, **env},
        ) as proc:  # fmt: skip
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not _uploading(s3.data_dir):
                time.sleep(0.05)
            s3.stop()
            _, err = proc.communicate(timeout=300)
        assert proc.returncode == 12, err
        lines = err.decode().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), err
        s3.restart()
        again = pgbd("ls", url, env=env)
        assert again.returncode != 0  # no manifest: not an archive
        for name in _names(url, env):  # finished volumes a re-run into this prefix meets
            _remove(url, name, env)
        rerun = pgbd("dump", "-d", db, "-o", url, env=env)
        assert rerun.returncode == 0, rerun.stderr
        assert pgbd("verify", url, env=env).returncode == 0


def _uploading(data_dir: object) -> bool:
    """Whether the server has received some of the dump (its volume files grew)."""
    from pathlib import Path

    files = Path(str(data_dir), "data").rglob("*.dat")
    return sum(f.stat().st_size for f in files) > 4 << 20


def _names(url: str, env: dict[str, str]) -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        return S3Prefix(url).names()


def _remove(url: str, name: str, env: dict[str, str]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        S3Prefix(url).remove(name)


def test_throttling_is_retried_then_reported(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str, local_s3: LocalS3,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    db = new_db(pg17)
    _roles(pg17)
    fill(db, {40000 + i: (100, 0, 0, False) for i in range(10)})
    assert run("dump", "-d", db, "-o", s3_url).exit_code == 0
    port = int(local_s3.endpoint.rsplit(":", 1)[1])
    flaky = FlakyProxy(port, fail=3)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", flaky.endpoint)
        result = run("ls", s3_url, "--json")
        assert result.exit_code == 0, result.stderr
        assert flaky.failed == 3 and '"oid": 40009' in result.stdout
    finally:
        flaky.close()
    always = FlakyProxy(port, fail=None)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", always.endpoint)
        assert_one_line_error(run("ls", s3_url), 12, "503")
        assert always.failed > 3  # it retried before giving up
    finally:
        always.close()


def test_pack_into_s3_and_unpack_from_it(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str, tmp_path: Path
) -> None:
    _roles(pg17)
    src, dst = new_db(pg17), new_db(pg17)
    fill(src, {50000 + i: (i * 31 % 3000, i % 3, i % 3, i % 2 == 0) for i in range(40)})
    pg_dump = toolchain.find(17, ("pg_dump",)).tool("pg_dump")
    dumped = tmp_path / "db.dump"
    subprocess.run([str(pg_dump), "-Fc", "-f", str(dumped), "-d", src], check=True)
    assert run("pack", str(dumped), "-o", s3_url).exit_code == 0
    assert run("restore", s3_url, "-d", dst).exit_code == 0
    assert state(dst) == _as_pg_dump_sees(state(src))
    back = tmp_path / "back.dump"
    result = run("unpack", s3_url, "--format", "custom", "-o", str(back))
    assert result.exit_code == 0, result.stderr
    assert back.stat().st_size > 0
    assert_one_line_error(run("unpack", s3_url, "-o", s3_url + "-x"), 2, "give a local -o")


def test_an_incremental_chain_on_s3(pg17: EmbeddedCluster, new_db: NewDb, s3_url: str) -> None:
    """dump --since an s3:// base into s3://, restore and merge read the chain there."""
    _roles(pg17)
    src, dst = new_db(pg17), new_db(pg17)
    fill(src, LOS)
    full, inc = f"{s3_url}-full", f"{s3_url}-inc"
    assert run("dump", "-d", src, "-o", full).exit_code == 0
    fill(src, {90_000: (100, 0, 0, False)})
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_put(16390, 0, 'changed on the way')")
    done = run("dump", "-d", src, "-o", inc, "--since", full, "--json")
    assert done.exit_code == 0, done.stderr
    assert '"changed": 1' in done.stdout and '"new": 1' in done.stdout
    listed = run("ls", inc, "--oids", "16390-16391", "--json")
    assert listed.exit_code == 0 and full in listed.stdout and inc in listed.stdout
    restored = run("restore", inc, "-d", dst, "--json")
    assert restored.exit_code == 0, restored.stderr
    assert state(dst) == state(src)
    assert run("merge", inc, "-o", f"{s3_url}-merged").exit_code == 0
    assert run("verify", f"{s3_url}-merged", "-d", src).exit_code == 0
