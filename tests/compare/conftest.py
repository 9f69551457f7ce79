"""Fixtures for compare tests: saved results folders, roles and databases of their own."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pgblobdump.compare import results
from pgblobdump.compare.archive_stats import ArchiveStats
from pgblobdump.compare.matrix import Contender, RestoreMode
from pgblobdump.compare.records import DumpRecord, RestoreRecord
from pgblobdump.proc import ProcessStats
from pgblobdump.servers.cluster import EmbeddedCluster

_counter = itertools.count()


def _stats(wall: float) -> ProcessStats:
    return ProcessStats(
        ("pg_dump", "-Fc", "-f", "x.dump", "-d", "dbname=src"), 0, wall, 50_000, wall / 2,
        0.2, "gnu-time", wall + 0.01, check_max_rss_kb=50_100, check_user_s=wall / 2,
        check_sys_s=0.2, rss_floor_kb=2_000, timer="/usr/bin/time",
    )  # fmt: skip


def save_results(folder: Path, counts: int = 2) -> Path:
    """A results folder as compare writes it, without measuring: 16 and 17, both formats,
    at ``counts`` LO counts, and one restore. Returns its results.json."""
    dumps, restores = [], []
    for i in range(counts):
        count = 100 * (i + 1)
        for fmt in ("custom", "directory"):
            for major in (16, 17):
                c = Contender("pg_dump", major, fmt)
                toc = 1000 * count if fmt == "directory" else None
                archive = ArchiveStats(300 * count, 4096 * count, 1, 0, toc)
                dumps.append(DumpRecord(count, c, 1, _stats(1.0 + major / 100), archive,
                                        {"BLOB": count, "BLOBS": 1}, "native"))  # fmt: skip
    restores.append(RestoreRecord(100, Contender("pg_dump", 17, "custom"), 1, RestoreMode(),
                                  _stats(2.0), 100, 100, True))  # fmt: skip
    meta = {
        "format_version": results.FORMAT_VERSION, "created": "2025-01-01T00:00:00+00:00",
        "invocation": ["pgblobdump", "compare"], "complete": True,
        "source": {"description": "test", "server_version": "16.14"},
        "machine": {"hostname": "here"},
    }  # fmt: skip
    results.save(results.Results(dumps, restores, ["pg_dump -Fc"], meta), folder)
    return folder / results.RESULTS_FILE


@pytest.fixture
def results_folder(tmp_path: Path) -> Path:
    """A saved results folder (two LO counts) to render."""
    save_results(tmp_path / "saved")
    return tmp_path / "saved"


def pgblobdump(*args: str) -> list[str]:
    """The command line of a real ``pgblobdump`` process (signals installed as in use)."""
    return [sys.executable, "-m", "pgblobdump", *args]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(pgblobdump(*args), capture_output=True, text=True, timeout=timeout)


@dataclass(frozen=True)
class RoleDb:
    """A login role and a database of its own (owned by the superuser) on ``cluster``."""

    cluster: EmbeddedCluster
    role: str
    password: str | None
    dbname: str

    def conninfo(self, with_password: bool = True) -> str:
        """Over TCP, where pg_hba may ask for the password; as the role."""
        info = self.cluster.info()
        text = f"host=127.0.0.1 port={info.port} user={self.role} dbname={self.dbname}"
        if with_password and self.password is not None:
            text += f" password={self.password}"
        return text

    def admin(self) -> str:
        """The same database, as the superuser."""
        return self.cluster.conninfo(self.dbname)


MakeRole = Callable[..., RoleDb]


def _hba_line(role: str) -> str:
    return f"host all {role} 127.0.0.1/32 scram-sha-256  # pgblobdump test\n"


def _wait_until_asked(rd: RoleDb) -> None:
    """pg_reload_conf() only signals the postmaster: wait until pg_hba asks for it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            psycopg.connect(rd.conninfo(with_password=False)).close()
        except psycopg.OperationalError:
            return
        time.sleep(0.02)
    raise AssertionError(f"pg_hba.conf never asked {rd.role} for a password")


@pytest.fixture
def role_db(pg16: EmbeddedCluster) -> Iterator[MakeRole]:
    """``role_db(createdb=..., password=...)``: a new role and database on the 16 cluster.

    With a password, pg_hba.conf gets a line for that role alone asking for it over TCP
    (scram-sha-256), ahead of the cluster's ``trust`` lines; removed afterwards. Every
    database the role owns (a restore left behind by a failing test) is dropped with it.
    """
    made: list[RoleDb] = []
    hba = pg16.datadir / "pg_hba.conf"
    original = hba.read_text()

    def make(createdb: bool = True, password: str | None = None) -> RoleDb:
        n = next(_counter)
        rd = RoleDb(pg16, f"pgbd_cmp_role_{n}", password, f"pgbd_cmp_db_{n}")
        with psycopg.connect(pg16.conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN {} PASSWORD {}").format(
                    sql.Identifier(rd.role),
                    sql.SQL("CREATEDB" if createdb else "NOCREATEDB"),
                    sql.Literal(password),
                )
            )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(rd.dbname)))
            made.append(rd)
            if password is not None:
                hba.write_text(_hba_line(rd.role) + hba.read_text())
                conn.execute("SELECT pg_reload_conf()")
        if password is not None:
            _wait_until_asked(rd)
        return rd

    yield make
    with psycopg.connect(pg16.conninfo(), autocommit=True) as conn:
        if hba.read_text() != original:
            hba.write_text(original)
            conn.execute("SELECT pg_reload_conf()")
        for rd in made:
            owned = conn.execute(
                "SELECT datname FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba"
                " WHERE r.rolname = %s",
                (rd.role,),
            ).fetchall()
            for (name,) in [(rd.dbname,), *owned]:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(rd.role)))
