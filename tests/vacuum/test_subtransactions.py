"""vacuum keeps an LO whose reference (or the LO itself) was written in a savepoint of a
transaction still open when the orphans were found. A snapshot lists only top-level xids
in progress: a subtransaction's xid (above its top-level one, below the snapshot's xmax)
looks finished to ``pg_visible_in_snapshot``, so a re-check that trusted it never read
the row."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.vacuum import VacuumRequest, run, vacuum
from pgblobdump.vacuum.refs import References
from tests.conftest import NewDb

NOW = VacuumRequest(min_age=0)


def los(db: str) -> set[int]:
    with psycopg.connect(db, autocommit=True) as c:
        return {int(r[0]) for r in c.execute("SELECT oid::int8 FROM pg_largeobject_metadata")}


def _waiting_on_r(db: str) -> bool:
    with psycopg.connect(db, autocommit=True) as c:
        row = c.execute("SELECT count(*) FROM pg_locks WHERE NOT granted"
                        " AND relation = 'r'::regclass").fetchone()  # fmt: skip
        return bool(row and row[0])


def _later_commit(db: str) -> None:
    """Another transaction commits: the snapshot's xmax passes the savepoint's xid."""
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("SELECT txid_current()")


def test_a_reference_inserted_in_a_savepoint_keeps_its_lo(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """The reviewer's case: the row naming 7000 is inserted in a released savepoint of a
    transaction open while vacuum finds the orphans; vacuum's lock waits for it, the
    re-check must read the row. Before the fix: "removed 2" and 7000 gone."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("CREATE TABLE r (id int, o oid)")
        c.execute("SELECT lo_from_bytea(7000, 'a'), lo_from_bytea(7001, 'b')")
    errors: list[BaseException] = []
    results: list[run.VacuumResult] = []
    with psycopg.connect(db) as a:
        a.execute("SELECT txid_current()")
        a.execute("SAVEPOINT a")
        a.execute("INSERT INTO r VALUES (1, 7000)")
        a.execute("RELEASE a")
        _later_commit(db)

        def go() -> None:
            try:
                results.append(vacuum(db, NOW))
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        th = threading.Thread(target=go)
        th.start()
        deadline = time.monotonic() + 30
        while not _waiting_on_r(db):
            assert time.monotonic() < deadline and th.is_alive(), "vacuum never waited"
            time.sleep(0.05)
        a.commit()
        th.join(60)
        assert not th.is_alive(), "vacuum hangs"
    assert not errors, errors
    assert los(db) == {7000}
    assert results[0].removed == 1 and results[0].referenced_meanwhile == 1


@pytest.mark.parametrize("depth", [1, 2])
def test_an_lo_created_in_a_savepoint_of_an_open_transaction_keeps_its_lo(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch, depth: int
) -> None:
    """LO 7002 and the row naming it are written in a savepoint (``depth`` nested ones)
    of a transaction open when vacuum reads the references, which commits before the
    orphans are selected (the LO now visible, its reference not in the first pass):
    the re-check must read the row, --min-age 0 or not."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("CREATE TABLE r (id int, o oid)")
        c.execute("SELECT lo_from_bytea(7001, 'b')")
    with psycopg.connect(db) as a:
        a.execute("SELECT txid_current()")
        for k in range(depth):
            a.execute(f"SAVEPOINT s{k}")
        a.execute("SELECT lo_from_bytea(7002, 'c')")
        a.execute("INSERT INTO r VALUES (2, 7002)")
        for k in reversed(range(depth)):
            a.execute(f"RELEASE s{k}")
        _later_commit(db)
        real = run.collect_refs

        def collect_then_commit(conn: psycopg.Connection, refs: References) -> str:
            since = real(conn, refs)
            a.commit()  # between the first pass and the candidates: 7002 an orphan now
            return since

        monkeypatch.setattr(run, "collect_refs", collect_then_commit)
        result = vacuum(db, NOW)
    assert los(db) == {7002}
    assert result.removed == 1 and result.referenced_meanwhile == 1
