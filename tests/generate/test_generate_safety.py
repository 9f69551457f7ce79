"""generate never touches what it did not create: other sessions' LOs taken mid-run, two
runs at once, roles made by a run that fails part-way."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest

from pgblobdump.errors import DatabaseError
from pgblobdump.generate import GenerateSpec, SizeSpec, generate
from pgblobdump.generate import generator as gen
from pgblobdump.report.reporter import Reporter
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb


def _one(conninfo: str, query: str) -> object:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return row[0]


def _once(action: Callable[[], None]) -> Callable[[int, int], None]:
    """A progress callback that runs ``action`` (another session's work) after batch 1."""
    done: list[int] = []

    def progress(n: int, _bytes: int) -> None:
        if not done:
            done.append(n)
            action()

    return progress


@pytest.mark.parametrize("sized", [False, True], ids=["empty-fast-path", "with-data"])
def test_an_oid_taken_by_another_session_is_left_alone(
    pg16: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch, sized: bool
) -> None:
    db = new_db(pg16)
    monkeypatch.setattr(gen, "EMPTY_BATCH", 1000)
    start, theirs = 5_000_000, 5_001_500

    def other_session() -> None:
        with psycopg.connect(db, autocommit=True) as other:
            other.execute("SELECT lo_from_bytea(%s, 'not yours')", (theirs,))

    spec = GenerateSpec(5000, SizeSpec(10, 10) if sized else SizeSpec(0, 0), start_oid=start)
    with pytest.raises(DatabaseError) as err:
        generate(db, spec, Reporter(progress=_once(other_session)))
    message = str(err.value)
    assert f"OID {theirs} was taken by another session" in message
    assert "removed the 1,000 LOs (OIDs 5000000..5000999) this run created" in message
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 1
    assert _one(db, f"SELECT convert_from(lo_get({theirs}), 'UTF8')") == "not yours"


def test_a_run_started_while_another_runs_picks_other_oids(
    pg16: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second run starts (and finishes) between two batches of the first."""
    db = new_db(pg16)
    monkeypatch.setattr(gen, "EMPTY_BATCH", 1000)
    second = []
    first = generate(
        db,
        GenerateSpec(5000),
        Reporter(progress=_once(lambda: second.append(generate(db, GenerateSpec(3000))))),
    )
    (other,) = second
    assert first.count == 5000 and other.count == 3000
    assert other.first_oid is not None and first.last_oid is not None
    assert other.first_oid > first.last_oid
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 8000


def test_a_start_oid_inside_a_running_reservation_is_refused(
    pg16: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg16)
    monkeypatch.setattr(gen, "EMPTY_BATCH", 1000)
    errors: list[str] = []

    def intruder() -> None:
        with pytest.raises(DatabaseError) as e:
            generate(db, GenerateSpec(10, start_oid=16384 + 4000))
        errors.append(str(e.value))

    generate(db, GenerateSpec(5000), Reporter(progress=_once(intruder)))
    assert "OIDs 16384..21383 are reserved by another pgblobdump run" in errors[0]
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 5000


def test_two_runs_in_parallel_both_succeed(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    results: list[object] = []

    def run() -> None:
        try:
            results.append(generate(db, GenerateSpec(20_000, SizeSpec(1, 1))))
        except Exception as e:  # reported below, in the test's thread
            results.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(not isinstance(r, Exception) for r in results), results
    assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 40_000


def test_roles_are_all_or_nothing_when_a_grant_is_refused(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A CREATEROLE user may create pgbd_owner_2 but not be granted an existing
    pgbd_owner_1: the run fails and leaves no role behind."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as admin:
        for r in ("pgbd_owner_1", "pgbd_owner_2", "pgbd_maker"):
            admin.execute(f"DROP ROLE IF EXISTS {r}")
        admin.execute("CREATE ROLE pgbd_owner_1 NOLOGIN")
        admin.execute("CREATE ROLE pgbd_maker LOGIN CREATEROLE")
    try:
        maker = psycopg.conninfo.make_conninfo(db, user="pgbd_maker")
        with pytest.raises(DatabaseError, match="permission denied to grant role"):
            generate(maker, GenerateSpec(10, SizeSpec(1, 1), owners=2))
        assert _one(db, "SELECT count(*) FROM pg_roles WHERE rolname = 'pgbd_owner_2'") == 0
        assert _one(db, "SELECT count(*) FROM pg_largeobject_metadata") == 0
    finally:
        with psycopg.connect(db, autocommit=True) as admin:
            for r in ("pgbd_owner_1", "pgbd_owner_2", "pgbd_maker"):
                admin.execute(f"DROP ROLE IF EXISTS {r}")
