"""Whether a server can use WAL summaries (pg/wal/ready.py), as inspect and doctor -d say
it: 16 cannot; 17 and 18 with summarize_wal off, then on by the fix they print; a role
without EXECUTE on the functions; a sync state's mark covered or not."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import psycopg
import pytest

from pgblobdump.errors import ToolchainError
from pgblobdump.pg.wal import ready as walready
from pgblobdump.pg.wal.ready import Summary, covers, readiness, summary_file
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import run
from tests.conftest import NewDb

pytestmark = pytest.mark.pg  # starts clusters of its own: summarize_wal is turned on there


def test_a_summary_file_is_named_as_walsummary_c_names_it() -> None:
    # as a 17 server wrote it: timeline 1, 0/147A4B8 to 0/147A5B8
    name = summary_file(1, 0x147A4B8, 0x147A5B8)
    assert name == "00000001000000000147A4B8000000000147A5B8.summary"


def test_summaries_cover_a_mark_only_without_a_gap() -> None:
    run_of = [Summary(1, 100, 200), Summary(1, 200, 300), Summary(1, 300, 400)]
    assert covers(run_of, 1, 150, 400) == Summary(1, 100, 200)
    assert covers(run_of, 1, 50, 400) is None  # removed by wal_summary_keep_time
    assert covers(run_of, 2, 150, 400) is None  # another timeline
    gap = [Summary(1, 100, 200), Summary(1, 250, 400)]  # summarize_wal off for a while
    assert covers(gap, 1, 150, 400) is None
    assert covers(gap, 1, 260, 400) == Summary(1, 250, 400)


def test_16_has_no_summaries(pg16: EmbeddedCluster) -> None:
    with psycopg.connect(pg16.conninfo(), autocommit=True) as conn:
        r = readiness(conn)
    assert not r.ready and r.summarize_wal is None and r.fixes == ()
    assert "has no WAL summaries (17 and later do)" in r.blockers[0]


def test_wal_level_minimal_needs_a_restart(pg17: EmbeddedCluster) -> None:
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:  # the tests' settings
        r = readiness(conn)
    assert not r.ready and r.blockers[0].startswith("wal_level is minimal")
    assert r.fixes[0] == "ALTER SYSTEM SET wal_level = replica; -- then restart the server"


@pytest.fixture(scope="module", params=[17, 18])
def cluster(request: pytest.FixtureRequest) -> Iterator[EmbeddedCluster]:
    """A cluster of its own, as servers run by default (wal_level replica, not the test
    clusters' minimal): the tests turn summarize_wal on."""
    try:
        c = EmbeddedCluster(request.param, settings={"wal_level": "replica"})
    except ToolchainError as e:  # a machine without that wheel
        pytest.skip(f"PostgreSQL {request.param}: {e}")
    with c:
        yield c


def _wait_for_summarizer(conninfo: str) -> None:
    """Until the summarizer has summarized past the WAL written so far (it lags)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        conn.execute("CHECKPOINT")  # a summary ends at a redo point, as basebackup's does
        for _ in range(300):
            row = conn.execute(
                "SELECT summarized_lsn >= %s FROM pg_get_wal_summarizer_state()", target
            ).fetchone()
            if row and row[0]:
                return
            time.sleep(0.1)
    raise AssertionError("the WAL summarizer did not catch up in 30 s")


def test_off_then_on_by_the_printed_fix(cluster: EmbeddedCluster, new_db: NewDb) -> None:
    src, dst = new_db(cluster), new_db(cluster)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(0, 'x') FROM generate_series(1, 3)")
        conn.execute("ALTER SYSTEM RESET summarize_wal")
        conn.execute("SELECT pg_reload_conf()")
        time.sleep(0.5)
        off = readiness(conn)
    assert not off.ready and off.summarize_wal is False and off.keep_minutes == 14400
    assert off.blockers == ("summarize_wal is off",) and off.fixes == (walready.TURN_ON,)

    # a copy inside this cluster: the target's sync state marks this very server
    assert run("copy", "-d", src, "--target-dbname", dst).exit_code == 0
    r = run("inspect", "-d", dst, "--json")
    assert r.exit_code == 0, r.output
    wal = json.loads(r.stdout)["wal_summaries"]
    assert wal["ready"] is False and wal["fixes"] == [walready.TURN_ON]
    (mark,) = wal["marks"]
    assert mark["covered"] is False and mark["why"] == "summarize_wal is off"

    with psycopg.connect(src, autocommit=True) as conn:
        for statement in walready.TURN_ON.split(";")[:2]:  # as psql runs the line printed
            conn.execute(statement)  # a reload, no restart
    time.sleep(0.5)
    assert run("sync", "-d", src, "--target-dbname", dst).exit_code == 0  # a new mark
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_put(min(oid), 0, 'y') FROM pg_largeobject_metadata")
    _wait_for_summarizer(src)
    r = run("inspect", "-d", dst, "--json")
    wal = json.loads(r.stdout)["wal_summaries"]
    assert wal["ready"] is True and wal["blockers"] == [] and wal["fixes"] == []
    assert wal["summarize_wal"] is True and wal["summarizer_running"] is True
    (mark,) = wal["marks"]
    assert mark["covered"] is True and mark["wal_since"] > 0
    assert mark["summarized_ago"] is not None and 0 < mark["removed_in"] <= 14400 * 60

    table = run("inspect", "-d", dst).stdout
    assert "WAL summaries (dump --since, sync)" in table and "ready" in table
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM RESET summarize_wal")
        conn.execute("SELECT pg_reload_conf()")


def test_a_role_without_execute_is_told_the_grant(cluster: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(cluster)
    functions = ", ".join(walready.FUNCTIONS)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute('DROP ROLE IF EXISTS "Walker"')
        conn.execute('CREATE ROLE "Walker" LOGIN')
        conn.execute('GRANT SELECT ON pg_largeobject TO "Walker"')
    as_walker = f"{db} user=Walker"
    wal = json.loads(run("doctor", "-d", as_walker, "--json").stdout)["wal_summaries"]
    assert wal["may_execute"] is True  # PUBLIC may, on a new cluster
    with psycopg.connect(db, autocommit=True) as conn:  # pg_proc is per database: this one
        conn.execute(f"REVOKE EXECUTE ON FUNCTION {functions} FROM PUBLIC")
    wal = json.loads(run("doctor", "-d", as_walker, "--json").stdout)["wal_summaries"]
    assert wal["may_execute"] is False and wal["summarized_lsn"] is None
    assert any("may not execute pg_available_wal_summaries()" in b for b in wal["blockers"])
    grant = walready.grant_fix('"Walker"')
    assert grant in wal["fixes"]
    shown = run("doctor", "-d", as_walker)
    assert "GRANT EXECUTE ON FUNCTION" in " ".join((shown.stdout + shown.stderr).split())
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(grant)  # as printed
    wal = json.loads(run("doctor", "-d", as_walker, "--json").stdout)["wal_summaries"]
    assert wal["may_execute"] is True
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute('REVOKE SELECT ON pg_largeobject FROM "Walker"')
    wal = json.loads(run("doctor", "-d", as_walker, "--json").stdout)["wal_summaries"]
    assert any("may not read pg_largeobject" in b for b in wal["blockers"])
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute('DROP OWNED BY "Walker"')
        conn.execute('DROP ROLE "Walker"')


def test_doctor_without_a_server_reads_none() -> None:
    doc = json.loads(run("doctor", "--json").stdout)
    assert doc["server"] is None and doc["wal_summaries"] is None
