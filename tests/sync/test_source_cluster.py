"""``sync`` where the role may not run pg_control_system(), so a mark names its cluster
by when the postmaster started: another cluster holding a database of the same name and
OID (CREATE DATABASE ... OID, as pg_upgrade keeps them) is not taken for the source. A
restart of the source itself is, but only through the same connection (database, host,
port) the last copy or sync recorded."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator

import psycopg
import pytest

from pgblobdump.errors import UsageError
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.run import SyncRequest, sync
from pgblobdump.sync.state import SCHEMA
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import state

ROLE = "pgbd_t_no_control"
"""A role that may not run pg_control_system() in the twin databases (nor is superuser)."""

_names = itertools.count()


def _superuser(cluster: EmbeddedCluster, db: str = "postgres") -> psycopg.Connection:
    return psycopg.connect(cluster.conninfo(db), autocommit=True)


def _dbname(conninfo: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(conninfo)["dbname"])


def _role(cluster: EmbeddedCluster, db: str) -> None:
    """ROLE on ``cluster``, free to create schemas in ``db``."""
    with _superuser(cluster) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone():
            with contextlib.suppress(psycopg.errors.DuplicateObject):  # another test's
                conn.execute(f"CREATE ROLE {ROLE} LOGIN NOSUPERUSER")
        conn.execute(f"GRANT CREATE ON DATABASE {db} TO {ROLE}")


def _free_oid(clusters: tuple[EmbeddedCluster, ...]) -> int:
    """A database OID that none of ``clusters`` uses yet."""
    top = 16_384
    for c in clusters:
        with _superuser(c) as conn:
            row = conn.execute("SELECT max(oid)::int8 FROM pg_database").fetchone()
            top = max(top, int(row[0]) if row and row[0] is not None else 0)
    return top + 1_000 + os.getpid() % 1_000


@contextlib.contextmanager
def twins(*clusters: EmbeddedCluster) -> Iterator[list[str]]:
    """A database of one name and one OID on each of ``clusters``, where ROLE may create
    schemas and may not run pg_control_system(); their conninfos as ROLE. Dropped after."""
    name = f"rv_app_{os.getpid()}_{next(_names)}"
    oid = _free_oid(clusters)
    made: list[EmbeddedCluster] = []
    try:
        for c in clusters:
            with _superuser(c) as conn:
                conn.execute(f"CREATE DATABASE {name} OID {oid}")
            made.append(c)
            _role(c, name)
            with _superuser(c, name) as conn:
                conn.execute("REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC")
        dbs = [f"{c.conninfo(name)} user={ROLE}" for c in clusters]
        for db in dbs:
            with psycopg.connect(db) as conn:
                row = conn.execute(
                    "SELECT has_function_privilege('pg_control_system()', 'EXECUTE'),"
                    " (SELECT oid::int8 FROM pg_database WHERE datname = current_database())"
                ).fetchone()
                assert row == (False, oid)
        yield dbs
    finally:
        for c in made:
            with _superuser(c) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _los(db: str, oids: range, data: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:  # as ROLE: its LOs
        conn.execute(
            "SELECT count(lo_from_bytea(o, convert_to(%s, 'UTF8')))"
            " FROM generate_series(%s::int8, %s::int8) o",
            (data, oids.start, oids.stop - 1),
        )


def _tables(db: str) -> list[tuple[object, ...]]:
    with psycopg.connect(db) as conn:
        return [
            *conn.execute(f"SELECT * FROM {SCHEMA}.made ORDER BY 1, 3").fetchall(),
            *conn.execute(f"SELECT * FROM {SCHEMA}.marks ORDER BY 1, 2").fetchall(),
        ]


def _sql(db: str, query: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(db, autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


def test_a_database_of_the_same_name_and_oid_on_another_cluster_is_refused(
    pg16: EmbeddedCluster, pg17: EmbeddedCluster, pg18: EmbeddedCluster, new_db: NewDb
) -> None:
    with twins(pg16, pg18) as (old, other):
        _los(old, range(20_000, 20_100), "x")
        _los(other, range(20_000, 20_003), "y")
        target = new_db(pg17)
        _role(pg17, _dbname(target))
        dst = f"{target} user={ROLE}"
        assert copy(old, dst, CopyRequest()).los == 100
        before, tables = state(target), _tables(target)
        assert len(before) == 100

        # the other cluster's rv_app: same name, same OID, another start time
        result = run("sync", "-d", other, "--target-dbname", dst, "--delete")
        assert_one_line_error(result, 2, "--source-changed")
        line = result.stderr.strip()
        assert "the cluster could not be identified" in line and "pg_control_system()" in line
        assert "it was not read through this host, port and database name" in line
        assert state(target) == before and _tables(target) == tables  # nothing written

        # the source restarted (the mark's start time is another now): the same database
        # through another host is not taken for it, nor is a state that does not say
        # through which connection it read
        _sql(target, f"UPDATE {SCHEMA}.marks SET mark = jsonb_set(mark::jsonb, '{{0}}',"
                     " to_jsonb('started 2001-02-03 04:05:06.789+00'::text))::text")  # fmt: skip
        tcp = f"{pg16.conninfo(_dbname(old), tcp=True)} user={ROLE}"
        with pytest.raises(UsageError, match="not read through this host, port and database"):
            sync(tcp, dst, SyncRequest(delete=True))
        (saved,) = _sql(target, f"SELECT source FROM {SCHEMA}.marks")
        _sql(target, f"UPDATE {SCHEMA}.marks SET source = NULL")
        with pytest.raises(UsageError, match="does not record through which host and port"):
            sync(old, dst, SyncRequest(delete=True))
        assert state(target) == before
        _sql(target, f"UPDATE {SCHEMA}.marks SET source = %s", saved)

        # through the connection it recorded: taken for the source, digests compared
        r = sync(old, dst, SyncRequest(delete=True))
        assert r.method.startswith("digests computed on each server: the last sync read a")
        assert "a restart or another cluster" in r.method
        assert r.deleted == 0 and state(target) == before
        # no restart since: the same start time proves it, whatever the connection
        assert sync(tcp, dst, SyncRequest(delete=True)).deleted == 0

        # on purpose: the other cluster's, all the same
        r = sync(other, dst, SyncRequest(delete=True, source_changed=True))
        assert r.deleted == 97 and state(target) == state(other)
