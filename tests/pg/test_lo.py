"""The shared LO writer and reader (pg/lo.py) against real servers."""

from __future__ import annotations

import hashlib
import os

import psycopg
import pytest

from pgblobdump.pg.catalog import count
from pgblobdump.pg.ledger import Ledger
from pgblobdump.pg.lo import Grant, LockBudget, LoWriter, digests, read_chunks, read_range
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb


def test_write_then_read_back_with_owner_acl_and_comments(
    pg18: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg18)
    datas = [os.urandom(n) for n in (0, 1, 2048, 100_000)]
    oids = [3_000_000_000 + i for i in range(len(datas))]
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS pgbd_lo_owner")
        conn.execute("DROP ROLE IF EXISTS pgbd_lo_reader")
        conn.execute("CREATE ROLE pgbd_lo_owner")
        conn.execute("CREATE ROLE pgbd_lo_reader")
        writer = LoWriter(conn, Ledger(db))
        with writer.batch(oids[0], oids[-1]) as b:
            b.create(oids, datas, owner="pgbd_lo_owner")
            b.grant(Grant("pgbd_lo_reader", ("SELECT",)), oids[:2])
            b.grant(Grant(None, ("SELECT", "UPDATE")), oids[3:])
            b.comment([(oids[1], "it's one byte")])
        assert writer.ledger.lo_ranges == [(oids[0], oids[-1])]
        assert count(conn) == 4 and count(conn, oids[1], oids[2]) == 2
        assert [(o, d) for o, d in read_range(conn, oids[0], oids[-1])] == list(
            zip(oids, datas, strict=True)
        )
        got = list(digests(conn, oids[0], oids[-1]))
        assert [(d.oid, d.size) for d in got] == [
            (o, len(d)) for o, d in zip(oids, datas, strict=True)
        ]
        assert got[2].digest == hashlib.blake2b(datas[2], digest_size=16).hexdigest()
        rows = conn.execute(
            "SELECT oid::int8, lomowner::regrole::text, lomacl::text[],"
            " obj_description(oid, 'pg_largeobject') FROM pg_largeobject_metadata ORDER BY oid"
        ).fetchall()
        assert {r[1] for r in rows} == {"pgbd_lo_owner"}
        assert rows[0][2] == [
            "pgbd_lo_owner=rw/pgbd_lo_owner",
            "pgbd_lo_reader=r/pgbd_lo_owner",
        ]
        assert rows[2][2] is None
        assert rows[3][2] == ["pgbd_lo_owner=rw/pgbd_lo_owner", "=rw/pgbd_lo_owner"]
        assert rows[1][3] == "it's one byte"
        writer.ledger.undo(None)
        assert count(conn) == 0
        conn.execute("DROP ROLE pgbd_lo_owner")
        conn.execute("DROP ROLE pgbd_lo_reader")


def test_an_lo_in_pieces(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    chunks = [os.urandom(3 << 20) for _ in range(3)] + [b"tail"]
    with psycopg.connect(db, autocommit=True) as conn:
        writer = LoWriter(conn, Ledger(db))
        with writer.batch(50_000, 50_000) as b:
            assert b.create_large(50_000, chunks) == 9 * (1 << 20) + 4
        assert b"".join(read_chunks(conn, 50_000, chunk=4 << 20)) == b"".join(chunks)
        assert list(read_chunks(conn, 50_000, chunk=9 * (1 << 20) + 4))[-1].endswith(b"tail")


def test_lock_budget_bounds_a_batchs_comments(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    """A batch may take a quarter of the lock table (64 x 50 on the test clusters), and
    that many comments (a lock each) fit in one transaction at default lock settings."""
    db = new_db(pg16)
    with psycopg.connect(db, autocommit=True) as conn:
        budget = LockBudget.read(conn)
        show = conn.execute("SHOW max_connections").fetchone()
        assert show is not None
        assert budget.total == 64 * int(show[0]) and budget.per_transaction == budget.total // 4
        writer = LoWriter(conn, Ledger(db))
        n = budget.per_transaction
        with writer.batch(1_000_000, 1_000_000 + n - 1) as b:
            b.create_empty(1_000_000, 1_000_000 + n - 1)
            b.comment([(1_000_000 + i, f"c{i}") for i in range(n)])
        with (
            pytest.raises(ValueError, match="lock budget"),
            writer.batch(2_000_000, 2_000_000) as b,
        ):
            b.comment([(1_000_000 + i, "again") for i in range(n + 1)])
        assert count(conn) == n


@pytest.mark.scale
def test_an_lo_over_one_gigabyte(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    piece = os.urandom(1 << 20)
    total = (1 << 30) + (5 << 20)
    with psycopg.connect(db, autocommit=True) as conn:
        writer = LoWriter(conn, Ledger(db))
        with writer.batch(70_000, 70_000) as b:
            b.create_large(70_000, (piece for _ in range(total >> 20)))
        h, size = hashlib.blake2b(), 0
        for chunk in read_chunks(conn, 70_000):
            h.update(chunk)
            size += len(chunk)
        expected = hashlib.blake2b()
        for _ in range(total >> 20):
            expected.update(piece)
        assert size == total and h.digest() == expected.digest()
