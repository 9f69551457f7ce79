"""Embedded clusters: real initdb/pg_ctl, as an unprivileged user when we are root."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest

from pgblobdump.errors import UsageError
from pgblobdump.pg.cluster import EmbeddedCluster


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
