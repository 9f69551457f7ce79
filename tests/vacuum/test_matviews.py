"""Materialized views not populated (WITH NO DATA), on a real server: inspect and vacuum
read them as holding no references and say so; a REFRESH waits for vacuum's round, and
one that lands between the look and the round is read whole; a view the role may not
read is refused like any table it may not read."""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
import pytest

from pgblobdump.errors import UnsafeToRemove
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.vacuum import VacuumRequest, batches, vacuum
from pgblobdump.vacuum import run as vacuum_run
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.vacuum.test_safety import ROLE, as_role, los, roles, setup

NOW = VacuumRequest(min_age=0, jobs=1)
NOTE = "materialized view public.mv is not populated (WITH NO DATA): it holds no references"


def _db(new_db: NewDb, cluster: EmbeddedCluster) -> str:
    """LOs 1..4: 1 named by a table, 3 by a populated view, 2 and 4 only by the query of a
    view not populated (computed from an int4 column whose own values name no LO, so it
    is no suspected reference either)."""
    db = new_db(cluster)
    setup(db, "CREATE TABLE a (x oid)", "INSERT INTO a VALUES (1)",
          "CREATE TABLE src (id int4)", "INSERT INTO src VALUES (1002), (1004)",
          "CREATE MATERIALIZED VIEW mv AS SELECT (id - 1000)::oid AS o FROM src WITH NO DATA",
          "CREATE MATERIALIZED VIEW full_mv AS SELECT 3::oid AS o", n=4)  # fmt: skip
    return db


def test_inspect_and_vacuum_read_it_as_empty_and_say_so(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = _db(new_db, pg17)
    r = run("inspect", "-d", db, "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert NOTE in got["notes"] and got["orphans"] == 2
    cols = {c["column"]: c for c in got["columns"]}
    assert cols["public.mv.o"]["populated"] is False and cols["public.mv.o"]["references"] == 0
    assert NOTE in run("inspect", "-d", db).stdout
    r = run("vacuum", "-d", db, "--min-age", "0", "--json")
    assert r.exit_code == 0, r.output
    assert NOTE in json.loads(r.stdout)["notes"] and NOTE in r.stderr
    assert los(db) == {1, 3}


def _before(monkeypatch: pytest.MonkeyPatch, hook: Callable[[], None], where: str) -> None:
    """Run ``hook`` once, just before vacuum's first call of ``where``: ``run.collect_refs``
    (after the look at the columns, before the orphans are found), ``batches.candidate_chunk``
    (after the orphans were found, before the first round) or ``batches.still_orphans``
    (inside the first round, its locks held)."""
    module, name = where.split(".")
    owner = {"run": vacuum_run, "batches": batches}[module]
    real = getattr(owner, name)
    done: list[bool] = []

    def wrapped(*args: object, **kwargs: object) -> object:
        if not done:
            done.append(True)
            hook()
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapped)


@pytest.mark.parametrize("when", ["run.collect_refs", "batches.candidate_chunk"])
def test_a_refresh_after_the_look_is_read_before_anything_goes(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """REFRESHed after the look found the view empty (before the snapshot the orphans are
    found under, or after): the round sees the view populated and reads it whole (not
    only rows newer than that snapshot: the view was never read), so 2 and 4 stay."""
    db = _db(new_db, pg17)

    def refresh() -> None:
        with psycopg.connect(db, autocommit=True) as c:
            c.execute("REFRESH MATERIALIZED VIEW mv")

    _before(monkeypatch, refresh, when)
    r = vacuum(db, NOW)
    assert los(db) == {1, 2, 3, 4}
    assert r.orphans == 2 and r.referenced_meanwhile == 2 and r.removed == 0


def test_a_refresh_waits_for_the_round(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a round holds its locks, a REFRESH of the view it read as empty cannot
    fill it (it would name LOs the round is about to unlink)."""
    db = _db(new_db, pg17)
    outcome: list[str] = []

    def refresh() -> None:
        with psycopg.connect(db, autocommit=True) as c:
            c.execute("SET lock_timeout = '200ms'")
            try:
                c.execute("REFRESH MATERIALIZED VIEW mv")
                outcome.append("refreshed")
            except psycopg.errors.LockNotAvailable:
                outcome.append("waited")

    _before(monkeypatch, refresh, "batches.still_orphans")
    vacuum(db, NOW)
    assert outcome == ["waited"] and los(db) == {1, 3}


def test_a_view_the_role_may_not_read_is_refused(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """As a table it may not read: the view is empty now, but the run could not hold a
    REFRESH off (that takes a lock only a reader may take)."""
    db = _db(new_db, pg17)
    roles(db)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute(f"GRANT SELECT ON a, full_mv TO {ROLE}")
        c.execute(f"ALTER LARGE OBJECT 2 OWNER TO {ROLE}")
    with pytest.raises(UnsafeToRemove, match=r"public\.mv\.o \(the role may not read it\)"):
        vacuum(as_role(db, ROLE), NOW)
    assert_one_line_error(run("vacuum", "-d", as_role(db, ROLE), "--min-age", "0"), 13,
                          "public.mv.o (the role may not read it)")  # fmt: skip
    assert los(db) == {1, 2, 3, 4}
