"""Shared fixtures: real embedded PostgreSQL clusters of each major, fresh databases."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import psycopg
import pytest

from pgblobdump.pg.cluster import EmbeddedCluster

_counter = itertools.count()


def _cluster(major: int) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(major) as c:
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
