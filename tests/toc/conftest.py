"""Session fixtures: real archives of one small database, made by pg_dump 15 to 18."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pgblobdump.errors import PgBlobDumpError
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.toc import build


@dataclass(frozen=True, repr=False)
class Corpus:
    """Every archive built, and the source database's LOs to check them against."""

    def __repr__(self) -> str:  # Hypothesis prints arguments; keep it short
        return f"Corpus({len(self.archives)} archives, {len(self.los)} LOs)"

    archives: dict[str, build.Built]
    los: dict[int, bytes]
    metadata: dict[int, tuple[str, str | None, str | None]]
    plain_sql: Path
    tar: build.Built


def _make_db(cluster: EmbeddedCluster, name: str) -> str:
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    conninfo = cluster.conninfo(name)
    build.populate(conninfo)
    return conninfo


@pytest.fixture(scope="session")
def corpus(pg16: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    out = tmp_path_factory.mktemp("archives")
    conninfo = _make_db(pg16, "toc_src")
    archives = {}
    for plan in build.PLAN:
        built = build.dump(conninfo, out, *plan)
        archives[built.name] = built
    tar = build.dump(conninfo, out, 16, "tar", "none", False)
    plain = out / "plain.sql"
    pg_dump = toolchain.find(16).tool("pg_dump")
    subprocess.run([str(pg_dump), "-Fp", "-f", str(plain), "-d", conninfo], check=True)
    return Corpus(archives, build.source_los(conninfo), build.source_metadata(conninfo), plain, tar)


@pytest.fixture(scope="session")
def corpus15(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    """Archives of Debian's pg_dump 15 (archive 1.14) from a PostgreSQL 15 server."""
    try:
        cluster = EmbeddedCluster(15)
        cluster.start()
    except PgBlobDumpError as e:
        pytest.skip(f"no PostgreSQL 15 server: {e}")
    try:
        out = tmp_path_factory.mktemp("archives15")
        conninfo = _make_db(cluster, "toc_src")
        archives = {}
        for plan in build.PLAN_15:
            built = build.dump(conninfo, out, *plan)
            archives[built.name] = built
        yield Corpus(
            archives,
            build.source_los(conninfo),
            build.source_metadata(conninfo),
            out / "none.sql",
            archives["pg15-custom-gzip"],
        )
    finally:
        cluster.stop()
