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

from pgblobdump.errors import UsageError
from pgblobdump.generate import GenerateSpec, generate
from pgblobdump.pg.cluster import EmbeddedCluster
from pgblobdump.pg.connect import connect, describe

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
    with connect(conninfo) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    assert row is not None
    return str(row[0]).split()[0]


@contextlib.contextmanager
def embedded_source(major: int) -> Iterator[Source]:
    """A throwaway cluster of ``major`` with an empty source database, removed afterwards."""
    with EmbeddedCluster(major) as cluster:
        with connect(cluster.conninfo(tcp=True)) as conn:
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
def restore_server(major: int) -> Iterator[str]:
    """A throwaway cluster of ``major`` to restore into; yields its admin conninfo.

    Restores need a server at least as new as pg_restore: pg_restore 17 sends
    ``SET transaction_timeout``, which a 16 server rejects. One server of the newest
    major in the plan keeps the target the same for every contender.
    """
    with EmbeddedCluster(major) as cluster:
        yield cluster.conninfo(tcp=True)


def external_source(conninfo: str, may_generate: bool) -> Source:
    """A database the user named with ``-d``; LOs are added only when ``may_generate``."""
    return Source(
        conninfo, _server_version(conninfo), describe(conninfo), may_generate, embedded=False
    )


def lo_count(conninfo: str) -> int:
    with connect(conninfo) as conn:
        row = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
    assert row is not None
    return int(row[0])


def lo_data_bytes(conninfo: str) -> int:
    """On-disk size of pg_largeobject: an upper bound of LO data (any user may ask)."""
    with connect(conninfo) as conn:
        row = conn.execute("SELECT pg_total_relation_size('pg_largeobject')").fetchone()
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
    with connect(conninfo) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    try:
        yield pgconninfo.make_conninfo(conninfo, dbname=name)
    finally:
        with connect(conninfo) as conn:
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
    with connect(conninfo) as conn:
        row = conn.execute(
            "SELECT count(*), md5(coalesce(string_agg(oid::text || ':' || md5(lo_get(oid)),"
            " ',' ORDER BY oid), '')) FROM pg_largeobject_metadata WHERE oid::int8 %% %s = 0",
            (stride,),
        ).fetchone()
    assert row is not None
    return Checksum(count, int(row[0]), str(row[1]))
