"""``server start|stop|status`` as a user meets them a second time: a restarted cluster
keeps its port, a second stop says it was not running, no clusters is said in words."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.clirun import run

pytestmark = pytest.mark.pg  # starts named clusters of its own


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty clusters folder the server user can traverse (tmp_path may be private)."""
    base = Path(tempfile.mkdtemp(prefix="pgbd-home-"))
    base.chmod(0o755)
    monkeypatch.setenv("PGBLOBDUMP_HOME", str(base))
    try:
        yield base
    finally:
        run("server", "stop", "--name", "kept", "--remove")
        shutil.rmtree(base, ignore_errors=True)


def _port(conninfo: str) -> int:
    return int(dict(kv.split("=", 1) for kv in conninfo.split())["port"])


def test_a_restarted_cluster_keeps_its_port_unless_taken(home: Path) -> None:
    first = run("server", "start", "--name", "kept")
    assert first.exit_code == 0, first.stderr
    port = _port(first.stdout)
    assert run("server", "stop", "--name", "kept").exit_code == 0
    again = run("server", "start", "--name", "kept")
    assert again.exit_code == 0, again.stderr
    assert _port(again.stdout) == port, "a restarted cluster moved to another port"
    assert "taken" not in again.stderr
    assert run("server", "stop", "--name", "kept").exit_code == 0
    # Its port taken meanwhile: it starts on another and says so, naming both.
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", port))
        busy.listen()
        moved = run("server", "start", "--name", "kept")
        assert moved.exit_code == 0, moved.stderr
        new = _port(moved.stdout)
        assert new != port
        assert f"port {port} is taken" in moved.stderr and f"on port {new}" in moved.stderr
        with psycopg.connect(moved.stdout.strip()) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    # The new port is the one it keeps from now on.
    assert run("server", "stop", "--name", "kept").exit_code == 0
    last = run("server", "start", "--name", "kept")
    assert _port(last.stdout) == new, last.stderr


def test_stopping_a_stopped_cluster_says_it_was_not_running(home: Path) -> None:
    assert run("server", "start", "--name", "kept").exit_code == 0
    once = run("server", "stop", "--name", "kept")
    assert once.exit_code == 0 and once.stderr.startswith("stopped "), once.stderr
    twice = run("server", "stop", "--name", "kept")
    assert twice.exit_code == 0, twice.stderr
    assert twice.stderr.strip() == f"{home / 'kept'} was not running", twice.stderr
    removed = run("server", "stop", "--name", "kept", "--remove")
    assert removed.exit_code == 0
    assert removed.stderr.strip() == f"{home / 'kept'} was not running; removed it"
    assert not (home / "kept").exists()


@pytest.mark.parametrize("make_home", [True, False])
def test_status_with_no_clusters_says_so(home: Path, make_home: bool) -> None:
    if not make_home:
        home.rmdir()
    shown = run("server", "status")
    assert shown.exit_code == 0
    assert shown.stdout == ""
    assert shown.stderr.strip().splitlines() == [
        f"no clusters under {home}; start one with: pgblobdump server start"
    ]
    listed = run("server", "status", "--json")
    assert listed.exit_code == 0
    assert json.loads(listed.stdout) == []


def _show(conninfo: str, setting: str) -> str:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(f"SHOW {setting}").fetchone()
    assert row is not None
    return str(row[0])


def test_wal_is_laptop_sized_unless_raised(home: Path) -> None:
    """A new cluster keeps at most 1 GB of WAL (PostgreSQL's default); --max-wal-size
    raises it for a benchmark, on a new cluster, an existing one or a running one."""
    made = run("server", "start", "--name", "kept")
    assert made.exit_code == 0, made.stderr
    assert _show(made.stdout.strip(), "max_wal_size") == "1GB"
    assert "keeps up to 1GB of WAL" in made.stderr
    raised = run("server", "start", "--name", "kept", "--max-wal-size", "8GiB")  # running
    assert raised.exit_code == 0, raised.stderr
    assert _show(raised.stdout.strip(), "max_wal_size") == "8GB"
    assert run("server", "stop", "--name", "kept").exit_code == 0
    again = run("server", "start", "--name", "kept")  # kept as set
    assert _show(again.stdout.strip(), "max_wal_size") == "8GB"
    assert "keeps up to 8GB of WAL" in again.stderr
    refused = run("server", "start", "--name", "kept", "--max-wal-size", "16MiB")
    assert refused.exit_code == 2 and "--max-wal-size" in refused.stderr
