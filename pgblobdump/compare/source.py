"""The database every contender dumps, fresh restore targets, and LO checksums.

For fairness there is one source database per run: every contender dumps the same LOs
over the same connection path (TCP loopback for the embedded cluster, as in the anchors).
Counts ascend, so the source grows by ``generate`` from one count to the next.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass

from psycopg import conninfo as pgconninfo
from psycopg import sql

from pgblobdump.errors import DatabaseError, UsageError
from pgblobdump.generate import GenerateSpec, generate
from pgblobdump.pg import catalog
from pgblobdump.pg.connect import connect, describe
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster
from pgblobdump.servers.toolchain import Toolchain
from pgblobdump.signals import uninterrupted

SOURCE_DB = "pgbd_compare_source"
RESTORE_DB_PREFIX = "pgbd_compare_restore_"


@dataclass(frozen=True)
class Source:
    """Where to dump from. ``generate``: whether compare may add LOs to reach a count."""

    conninfo: str
    server_version: str
    description: str
    generate: bool
    embedded: bool


def _server_version(conninfo: str) -> str:
    with connect(conninfo, doing="reading the server version") as conn:
        row = conn.execute("SHOW server_version").fetchone()
    assert row is not None
    return str(row[0]).split()[0]


@contextlib.contextmanager
def embedded_source(major: int, tc: Toolchain | None = None) -> Iterator[Source]:
    """A throwaway cluster of ``major`` (run by ``tc`` when given) with an empty source
    database, removed afterwards."""
    with EmbeddedCluster(major, tc=tc, settings=BENCHMARK_WAL) as cluster:
        with connect(cluster.conninfo(tcp=True), doing="creating the source database") as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(SOURCE_DB)))
        conninfo = cluster.conninfo(SOURCE_DB, tcp=True)
        yield Source(
            conninfo,
            _server_version(conninfo),
            f"embedded PostgreSQL {cluster.tc.version} ({describe(conninfo)})",
            generate=True,
            embedded=True,
        )


@contextlib.contextmanager
def restore_server(major: int, tc: Toolchain | None = None) -> Iterator[str]:
    """A throwaway cluster of ``major`` to restore into; yields its admin conninfo.

    Restores need a server at least as new as pg_restore: pg_restore 17 sends
    ``SET transaction_timeout``, which a 16 server rejects. One server of the newest
    major in the plan keeps the target the same for every contender.
    """
    with EmbeddedCluster(major, tc=tc, settings=BENCHMARK_WAL) as cluster:
        yield cluster.conninfo(tcp=True)


def external_source(conninfo: str, may_generate: bool) -> Source:
    """A database the user named with ``-d``; LOs are added only when ``may_generate``."""
    return Source(
        conninfo, _server_version(conninfo), describe(conninfo), may_generate, embedded=False
    )


def check_may_create_databases(conninfo: str) -> None:
    """DatabaseError, before anything runs, when restores would go into fresh databases on
    this server and the role may not create them (no CREATEDB, not a superuser)."""
    with connect(conninfo, doing="checking that the role may create restore databases") as conn:
        row = conn.execute(
            "SELECT current_user, rolcreatedb OR rolsuper FROM pg_roles"
            " WHERE rolname = current_user"
        ).fetchone()
    if row is not None and not row[1]:
        raise DatabaseError(
            f"--restore creates a database for each restore on the server of"
            f" {describe(conninfo)}, and role {row[0]} may not create databases; grant it"
            " CREATEDB or connect as a role that has it"
        )


SETTINGS_SHOWN = (
    "server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_level",
    "shared_buffers", "work_mem", "maintenance_work_mem", "max_wal_size", "max_connections",
    "max_locks_per_transaction",
)  # fmt: skip
"""Server settings that move dump and restore figures, kept with every results file."""


def server_settings(conninfo: str) -> dict[str, str]:
    """SETTINGS_SHOWN as the server reports them (``128MB``, ``off``), in that order."""
    with connect(conninfo, doing="reading the server's settings") as conn:
        rows = conn.execute(
            "SELECT name, pg_catalog.current_setting(name) FROM pg_catalog.pg_settings"
            " WHERE name = ANY(%s)",
            (list(SETTINGS_SHOWN),),
        ).fetchall()
    got = {str(name): str(value) for name, value in rows}
    return {name: got[name] for name in SETTINGS_SHOWN if name in got}


def lo_count(conninfo: str) -> int:
    with connect(conninfo, doing="counting LOs") as conn:
        return catalog.count(conn)


def lo_data_bytes(conninfo: str) -> int:
    """On-disk size of pg_largeobject: an upper bound of LO data (any user may ask)."""
    with connect(conninfo, doing="measuring pg_largeobject") as conn:
        row = conn.execute(
            "SELECT pg_catalog.pg_total_relation_size('pg_catalog.pg_largeobject')"
        ).fetchone()
    assert row is not None
    return int(row[0])


def grow_to(source: Source, count: int) -> int:
    """Make the source hold exactly ``count`` LOs (adding the missing ones); returns it."""
    have = lo_count(source.conninfo)
    if have == count:
        return count
    if have > count or not source.generate:
        raise UsageError(
            f"{source.description} holds {have:,} LOs, not {count:,};"
            + (" use --generate to add LOs to it" if not source.generate else " counts ascend")
        )
    generate(source.conninfo, GenerateSpec(count=count - have))
    return lo_count(source.conninfo)


_restore_counter = itertools.count(1)


@contextlib.contextmanager
def fresh_database(conninfo: str) -> Iterator[str]:
    """An empty database on the source's server (from template0); dropped afterwards."""
    name = f"{RESTORE_DB_PREFIX}{os.getpid()}_{next(_restore_counter)}"
    with connect(conninfo, doing="creating a restore database") as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        yield pgconninfo.make_conninfo(conninfo, dbname=name)
    finally:
        # Held signals: a second Ctrl-C must not leave the restore database behind.
        with uninterrupted(), connect(conninfo, doing=f"dropping restore database {name}") as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@dataclass(frozen=True)
class Checksum:
    """LO count, how many LOs the digest covers (every ``stride``-th OID), and the digest."""

    count: int
    checked: int
    digest: str


def lo_checksum(conninfo: str, sample: int) -> Checksum:
    """md5 over (OID, md5 of contents) of all LOs, or of an OID-stride sample of ~``sample``.

    The stride depends only on the count, and restores keep OIDs, so source and copy
    sample the same LOs.
    """
    count = lo_count(conninfo)
    stride = max(1, -(-count // sample)) if sample > 0 else 1
    with connect(conninfo, doing=f"checksumming LOs in {describe(conninfo)}") as conn:
        row = conn.execute(
            "SELECT count(*), md5(coalesce(string_agg(oid::text || ':' || md5(lo_get(oid)),"
            " ',' ORDER BY oid), '')) FROM pg_catalog.pg_largeobject_metadata"
            " WHERE oid::int8 %% %s = 0",
            (stride,),
        ).fetchone()
    assert row is not None
    return Checksum(count, int(row[0]), str(row[1]))
