"""Embedded clusters: real initdb/pg_ctl, as an unprivileged user when we are root."""

from __future__ import annotations

import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

import psycopg
import pytest

from pgblobdump.errors import ServerError, UsageError
from pgblobdump.servers.cluster import EmbeddedCluster

pytestmark = pytest.mark.pg  # every test starts clusters of its own


def test_temporary_cluster_starts_serves_and_vanishes() -> None:
    with EmbeddedCluster(16) as c:
        info = c.status()
        assert info.running and info.port > 0
        with psycopg.connect(c.conninfo()) as conn:
            row = conn.execute("SHOW server_version_num").fetchone()
            assert row is not None and row[0].startswith("16")
            locks = conn.execute("SHOW max_locks_per_transaction").fetchone()
            assert locks == ("64",)  # defaults, so LO work is proven at defaults
        with psycopg.connect(c.conninfo(tcp=True)) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        datadir = c.datadir
    assert not datadir.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root must switch user")
def test_root_runs_the_server_as_another_user() -> None:
    with EmbeddedCluster(17) as c, psycopg.connect(c.conninfo()) as conn:
        assert c.who.uid not in (None, 0)
        assert c.datadir.stat().st_uid == c.who.uid
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        assert os.stat(f"/proc/{row[0]}").st_uid == c.who.uid


def test_named_cluster_is_kept_and_restarted() -> None:
    base = Path(tempfile.mkdtemp(prefix="pgbd-t-"))
    base.chmod(0o755)
    try:
        c = EmbeddedCluster(18, datadir=base / "c18")
        c.start()
        with psycopg.connect(c.conninfo(), autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
        c.stop()
        assert (base / "c18" / "PG_VERSION").is_file()
        assert not c.status().running
        again = EmbeddedCluster(18, datadir=base / "c18")
        with again, psycopg.connect(again.conninfo()) as conn:
            assert conn.execute("SELECT to_regclass('kept')::text").fetchone() == ("kept",)
        with pytest.raises(UsageError, match="PostgreSQL 18 cluster, not 16"):
            EmbeddedCluster(16, datadir=base / "c18").start()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _log_paths_cited(message: str) -> list[Path]:
    return [Path(p) for p in re.findall(r"\(log: ([^)]+)\)", message)]


def test_a_port_in_use_is_quoted_from_the_log_not_cited() -> None:
    """The server cannot bind its port: the message says why in the server's own words,
    and names its log only when the log is still there to read."""
    base = Path(tempfile.mkdtemp(prefix="pgbd-t-"))
    base.chmod(0o755)
    try:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            # A temporary cluster is removed, log and all, when it fails to start.
            temporary = EmbeddedCluster(16, port=port)
            with pytest.raises(ServerError) as caught, temporary:
                pass
            message = str(caught.value)
            assert "starting PostgreSQL 16" in message and f"on port {port} failed" in message
            assert 'could not bind IPv4 address "127.0.0.1": Address already in use' in message
            assert "FATAL: could not create any TCP/IP sockets" in message
            assert not temporary.datadir.exists() and _log_paths_cited(message) == []
            # A cluster that was there before is kept: its log is cited, and exists.
            kept = EmbeddedCluster(16, datadir=base / "kept", port=port)
            kept.init()
            with pytest.raises(ServerError) as caught:
                kept.start()
            message = str(caught.value)
            assert "Address already in use" in message
            assert _log_paths_cited(message) == [kept.logfile] and kept.logfile.is_file()
    finally:
        shutil.rmtree(base, ignore_errors=True)
