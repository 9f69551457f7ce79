"""WAL sized for a laptop: an embedded cluster keeps PostgreSQL's 1GB; the clusters a
benchmark times (compare's, bench's) raise it so no checkpoint falls inside a run."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.bench.server import server as bench_server
from pgblobdump.compare.source import embedded_source, restore_server
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster

pytestmark = pytest.mark.pg  # starts clusters of its own


def _wal(conninfo: str) -> str:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SHOW max_wal_size").fetchone()
    assert row is not None
    return str(row[0])


def test_an_embedded_cluster_keeps_1gb_of_wal() -> None:
    with EmbeddedCluster(16) as c:
        assert _wal(c.conninfo()) == "1GB"


def test_the_clusters_benchmarks_time_raise_it() -> None:
    raised = BENCHMARK_WAL["max_wal_size"]
    assert raised == "8GB"
    with embedded_source(16) as source:
        assert _wal(source.conninfo) == raised
    with restore_server(16) as conninfo:
        assert _wal(conninfo) == raised
    with bench_server(None, 16, cold=False) as s:
        assert _wal(s.conninfo) == raised
