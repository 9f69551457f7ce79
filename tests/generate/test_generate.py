"""generate against real servers: counts, sizes, owners, ACLs, comments, OIDs, failures."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.errors import DatabaseError, Interrupted
from pgblobdump.generate import Content, GenerateSpec, SizeSpec, generate
from pgblobdump.generate import generator as gen
from pgblobdump.pg.ledger import Ledger, Pending
from pgblobdump.report.reporter import Reporter
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb


def _one(conninfo: str, query: str) -> object:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return row[0]


def test_empty_los_seed_style(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    r = generate(db, GenerateSpec(25_000))
    assert r.count == 25_000 and r.total_bytes == 0
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 25_000
    assert _one(db, "SELECT count(*) FROM pg_largeobject") == 0


def test_everything_at_once(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    spec = GenerateSpec(
        3000,
        SizeSpec(100, 5000),
        Content.TEXT,
        table="docs",
        owners=3,
        grant_fraction=0.2,
        comment_fraction=0.05,
        start_oid=3_000_000_000,
        seed=7,
    )
    r = generate(db, spec)
    assert (r.first_oid, r.last_oid) == (3_000_000_000, 3_000_002_999)
    with psycopg.connect(db) as conn:
        owners = dict(
            conn.execute(
                "SELECT lomowner::regrole::text, count(*) FROM pg_largeobject_metadata GROUP BY 1"
            ).fetchall()
        )
        assert set(owners) == {"pgbd_owner_1", "pgbd_owner_2", "pgbd_owner_3"}
        assert sum(owners.values()) == 3000
        acl = conn.execute(
            "SELECT count(*) FROM pg_largeobject_metadata WHERE lomacl IS NOT NULL"
        ).fetchone()
        assert acl == (600,)
        comments = conn.execute(
            "SELECT count(*) FROM pg_description WHERE classoid = 'pg_largeobject'::regclass"
        ).fetchone()
        assert comments == (150,)
        # The table points at each LO and records its true size.
        bad = conn.execute(
            "SELECT count(*) FROM docs WHERE size <> length(lo_get(lo))"
            " OR size NOT BETWEEN 100 AND 5000"
        ).fetchone()
        assert bad == (0,)
        assert conn.execute("SELECT count(DISTINCT lo) FROM docs").fetchone() == (3000,)
        assert r.total_bytes == conn.execute("SELECT sum(size) FROM docs").fetchone()[0]  # type: ignore[index]


def test_same_seed_same_bytes(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    spec = GenerateSpec(200, SizeSpec(1, 9000), Content.RANDOM, seed=42, start_oid=5000)
    digests = []
    for _ in range(2):
        db = new_db(pg16)
        generate(db, spec)
        digests.append(
            _one(
                db,
                "SELECT md5(string_agg(md5(lo_get(oid)), '' ORDER BY oid))"
                " FROM pg_largeobject_metadata",
            )
        )
    assert digests[0] == digests[1]


def test_many_grants_at_default_lock_settings(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    assert _one(db, "SHOW max_locks_per_transaction") == "64"
    # 20,000 per-LO ACL changes in one transaction would overflow the lock table.
    generate(db, GenerateSpec(20_000, SizeSpec(1, 1), owners=2, grant_fraction=1.0))
    assert _one(db, "SELECT count(lomacl) FROM pg_largeobject_metadata") == 20_000


def test_existing_oid_is_refused_and_nothing_is_made(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    _one(db, "SELECT lo_create(1500)")
    with pytest.raises(DatabaseError, match=r"1 large objects already exist in OIDs 1000\.\.2999"):
        generate(db, GenerateSpec(2000, start_oid=1000))
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 1


def test_existing_table_is_refused(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (x int)")
    with pytest.raises(DatabaseError, match="table docs already exists"):
        generate(db, GenerateSpec(10, table="docs"))
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 0


def test_failure_midway_removes_what_was_made(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    """Another session makes batch 3 fail for real: a CHECK on the owning table."""
    db = new_db(pg16)
    seen = []

    def after(done: int, _bytes: int) -> None:
        seen.append(done)
        if len(seen) == 2:
            with psycopg.connect(db, autocommit=True) as other:
                other.execute("ALTER TABLE t ADD CONSTRAINT few CHECK (id <= 2000)")

    removed = r"removed the 2,000 LOs \(OIDs 16384..18383\) and table t this run created"
    with pytest.raises(DatabaseError, match=f"violates check constraint.*; {removed}"):
        generate(db, GenerateSpec(5000, SizeSpec(10, 10), table="t"), Reporter(progress=after))
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 0
    assert _one(db, "SELECT to_regclass('t')") is None


@pytest.mark.scale
def test_a_million_empty_los(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    assert generate(db, GenerateSpec(1_000_000)).count == 1_000_000
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 1_000_000


def test_interrupt_after_a_batch_committed_still_removes_it(
    pg16: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C can land after the server committed a batch but before we counted it."""
    db = new_db(pg16)
    real = Ledger._enter
    seen = []

    def enter(self: Ledger, pending: Pending) -> None:
        if pending.los:
            seen.append(1)
            if len(seen) == 2:
                raise KeyboardInterrupt
        real(self, pending)

    monkeypatch.setattr(Ledger, "_enter", enter)
    monkeypatch.setattr(gen, "EMPTY_BATCH", 1000)
    with pytest.raises(Interrupted, match=r"removed the 2,000 LOs \(OIDs 16384..18383\) this"):
        generate(db, GenerateSpec(5000))
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 0


def test_table_name_is_taken_literally(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (x int)")
    # "Docs" is another table than docs: created under exactly that name.
    generate(db, GenerateSpec(10, SizeSpec(1, 1), table="Docs"))
    assert _one(db, 'SELECT count(*) FROM "Docs"') == 10
    with pytest.raises(DatabaseError, match="table Docs already exists"):
        generate(db, GenerateSpec(10, SizeSpec(1, 1), table="Docs"))


def test_roles_made_by_a_failed_run_are_dropped(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """Another session takes an OID the run needs: the run fails and drops its role."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS pgbd_owner_8")

    def after(done: int, _bytes: int) -> None:
        with psycopg.connect(db, autocommit=True) as other:
            other.execute("SELECT lo_create(9000009)")

    spec = GenerateSpec(16, SizeSpec(1, 1), owners=8, start_oid=9_000_000)
    with pytest.raises(DatabaseError, match=r"OID 9000009 was taken.*roles .*pgbd_owner_8 this"):
        generate(db, spec, Reporter(progress=after))
    assert _one(db, "SELECT count(*) FROM pg_roles WHERE rolname = 'pgbd_owner_8'") == 0
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 1


def test_owners_share_the_los(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    generate(db, GenerateSpec(900, SizeSpec(10, 10), owners=3))
    with psycopg.connect(db) as conn:
        counts = conn.execute(
            "SELECT count(*) FROM pg_largeobject_metadata GROUP BY lomowner ORDER BY 1"
        ).fetchall()
    assert counts == [(300,), (300,), (300,)]


def test_read_only_database_gives_a_database_error(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16) + " options='-c default_transaction_read_only=on'"
    with pytest.raises(DatabaseError, match="read-only transaction"):
        generate(db, GenerateSpec(10, SizeSpec(1, 1), owners=7))
