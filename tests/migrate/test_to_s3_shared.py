"""``--to s3://`` of two columns naming one LO, under one prefix: an object one run
found at its key (another run's) is never removed by it, whatever the LO does."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tracemalloc

import psycopg
import pytest

from pgblobdump.errors import PgBlobDumpError
from pgblobdump.migrate.objects.upload import Uploader
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb
from tests.migrate.test_to_s3 import go, keys_of, objects

DATA = b"shared by t1 and t2 " * 100


def test_an_object_reused_from_another_run_is_not_removed_when_the_lo_goes(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE t1 (id int PRIMARY KEY, lo oid)")
        conn.execute("CREATE TABLE t2 (id int PRIMARY KEY, lo oid)")
        oid = conn.execute("SELECT lo_from_bytea(0, %s)", (DATA,)).fetchone()[0]  # type: ignore[index]
        conn.execute("INSERT INTO t1 VALUES (1, %s)", (oid,))
        conn.execute("INSERT INTO t2 VALUES (1, %s)", (oid,))
    assert go(db, "t1.lo", to="s3", store=s3_url).phase == "done"  # type: ignore[attr-defined]
    key = keys_of(db, "t1")[1]
    assert key is not None and key.endswith(f"/{oid}")

    store = Uploader._store

    def store_then_unlink(self: Uploader, *a: object) -> None:
        store(self, *a)  # type: ignore[arg-type]
        # t2's application unlinks the LO once t2's run has reused t1's object.
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("SELECT lo_unlink(%s)", (oid,))

    monkeypatch.setattr(Uploader, "_store", store_then_unlink)
    with contextlib.suppress(PgBlobDumpError):
        go(db, "t2.lo", to="s3", store=s3_url)
    got = objects(s3_url)
    assert str(oid) in got, "t2's run removed the object t1's rows name"
    data, meta = got[str(oid)]
    assert data == DATA and meta["sha256"] == hashlib.sha256(DATA).hexdigest()


def test_the_way_back_gives_the_new_los_no_grants_without_allow_acl_widening(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, lo oid)")
        conn.execute("INSERT INTO docs SELECT i, lo_from_bytea(0, %s) FROM generate_series(1, 3) i",
                     (DATA,))  # fmt: skip
        conn.execute("DO $$ BEGIN CREATE ROLE pgbd_s3back_reader; EXCEPTION WHEN duplicate_object"
                     " THEN NULL; END $$")  # fmt: skip
        conn.execute("GRANT SELECT ON docs TO pgbd_s3back_reader")  # the keys, never the LOs

    def reader_reads() -> bool:
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("SET ROLE pgbd_s3back_reader")
            try:
                conn.execute("SELECT lo_get(lo) FROM docs").fetchall()
            except psycopg.errors.InsufficientPrivilege:
                return False
            return True

    assert not reader_reads()  # the LOs are owner-only
    assert go(db, to="s3", store=s3_url).phase == "done"  # type: ignore[attr-defined]
    r = go(db, to="lo")
    assert r.phase == "done" and r.direction == "s3lo"  # type: ignore[attr-defined]
    with psycopg.connect(db) as conn:
        got = conn.execute("SELECT lo_get(lo) FROM docs").fetchall()
    assert [bytes(g[0]) for g in got] == [DATA] * 3
    assert not reader_reads(), "the way back granted pgbd_s3back_reader the new LOs"
    # --allow-acl-widening grants the column's readers, as it says.
    assert go(db, to="s3", store=s3_url).phase == "done"  # type: ignore[attr-defined]
    assert go(db, to="lo", allow_acl_widening=True).phase == "done"  # type: ignore[attr-defined]
    assert reader_reads()


def test_a_20_mib_lo_is_streamed_to_its_object_not_held_whole(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    big = os.urandom(20 << 20)
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, lo oid)")
        conn.execute("INSERT INTO docs VALUES (1, lo_from_bytea(0, %s))", (big,))
        conn.execute("INSERT INTO docs VALUES (2, lo_from_bytea(0, 'small'))")
    tracemalloc.start()
    try:
        assert go(db, to="s3", store=s3_url).phase == "done"  # type: ignore[attr-defined]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Held whole, the LO's ranges and their join were 40 MiB at once.
    assert peak < 28 << 20, f"peak {peak / (1 << 20):.1f} MiB for a 20 MiB LO"
    stored = objects(s3_url)
    keys = keys_of(db)
    data, meta = stored[keys[1].rsplit("/", 1)[1]]  # type: ignore[union-attr]
    assert data == big
    assert meta["sha256"] == hashlib.sha256(big).hexdigest()
    assert stored[keys[2].rsplit("/", 1)[1]][0] == b"small"  # type: ignore[union-attr]
