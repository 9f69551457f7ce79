"""``sync`` pointed at another source than the last copy or sync read (a typo in -d, the
wrong port: at cut-over, with --delete) is refused before anything is written, unless
--source-changed says it is on purpose."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.errors import UsageError
from pgblobdump.pg import changes
from pgblobdump.pg.changes import Mark
from pgblobdump.pg.connect import describe
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.sync import state as state_mod
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.run import SyncRequest, sync
from pgblobdump.sync.state import SCHEMA, Marked, Recorded
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import state


def _tables(db: str) -> list[tuple[object, ...]]:
    with psycopg.connect(db) as conn:
        return [
            *conn.execute(f"SELECT * FROM {SCHEMA}.made ORDER BY 1, 3").fetchall(),
            *conn.execute(f"SELECT * FROM {SCHEMA}.marks ORDER BY 1, 2").fetchall(),
        ]


def _name(db: str) -> str:
    return str(psycopg.conninfo.conninfo_to_dict(db)["dbname"])


def test_sync_delete_from_another_source_is_refused_unless_source_changed(
    pg16: EmbeddedCluster, pg18: EmbeddedCluster, new_db: NewDb
) -> None:
    src, dst = new_db(pg16), new_db(pg18)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT count(lo_from_bytea(o, 'x')) FROM generate_series(20000, 20099) o")
    copy(src, dst, CopyRequest())
    before, tables = state(dst), _tables(dst)
    assert len(before) == 100
    typo = new_db(pg16)  # another database of the source's server (a typo in -d)
    port = new_db(pg18)  # another server's (the wrong port: here, the target's)
    for other in (typo, port):
        result = run("sync", "-d", f"{other} password=s3cret", "--target-dbname", dst, "--delete")
        assert_one_line_error(result, 2, "--source-changed")
        line = result.stderr.strip()
        assert f"read database {_name(src)} on " in line
        assert f"this is database {_name(other)} on " in line
        assert "s3cret" not in result.output
        assert state(dst) == before and _tables(dst) == tables  # nothing written
        # --dry-run writes nothing: it says so and lists what the sync would do
        result = run("sync", "-d", other, "--target-dbname", dst, "--delete", "--dry-run")
        assert result.exit_code == 0, result.output
        assert "without --dry-run, sync refuses" in result.stderr
        assert state(dst) == before and _tables(dst) == tables
    with pytest.raises(UsageError, match="read another database"):  # a state from before
        with psycopg.connect(dst, autocommit=True) as conn:
            conn.execute(f"UPDATE {SCHEMA}.marks SET source = NULL")
        sync(typo, dst, SyncRequest(delete=True))
    # on purpose: it proceeds, and the new source is the one recorded from then on
    r = sync(typo, dst, SyncRequest(delete=True, source_changed=True))
    assert r.deleted == 100 and state(dst) == {}
    with pytest.raises(UsageError, match=f"read database {_name(typo)} on "):
        sync(src, dst, SyncRequest())
    assert sync(typo, dst, SyncRequest()).plan.counts()["gone"] == 0


def _los(db: str, oids: range, data: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT count(lo_from_bytea(o, convert_to(%s, 'UTF8')))"
            " FROM generate_series(%s::int8, %s::int8) o",
            (data, oids.start, oids.stop - 1),
        )


def _marks(db: str) -> list[tuple[str, Recorded]]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(f"SELECT selection, source FROM {SCHEMA}.marks ORDER BY 1, 2")
        return [(str(k), Recorded.from_json(s)) for k, s in rows.fetchall()]


def test_copy_from_another_source_is_refused_unless_source_changed(
    pg16: EmbeddedCluster, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    a, b, dst = new_db(pg16), new_db(pg16), new_db(pg17)
    _los(a, range(20_000, 20_100), "x")
    _los(b, range(30_000, 30_003), "y")
    _los(b, range(20_000, 20_001), "z")  # an OID a's copy made too, other bytes
    copy(a, dst, CopyRequest())
    before, tables = state(dst), _tables(dst)
    for more in ([], ["--oids", "30000-30002"], ["--part", "1/2"]):
        result = run("copy", "-d", b, "--target-dbname", dst, *more)
        assert_one_line_error(result, 2, "copy --source-changed")
        line = result.stderr.strip()
        assert f"read database {_name(a)} on " in line
        assert f"this is database {_name(b)} on " in line
        assert state(dst) == before and _tables(dst) == tables  # nothing written
    # a state an older version let a copy from each write: neither is picked
    with psycopg.connect(b) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        theirs = (changes.mark(conn).to_json(), Recorded(describe(b), _name(b)).to_json())
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {SCHEMA}.marks VALUES ('all', %s, %s)", theirs)
    for src in (a, b):
        with pytest.raises(UsageError, match="the state holds marks of both"):
            sync(src, dst, SyncRequest(delete=True))
    assert state(dst) == before
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute(f"DELETE FROM {SCHEMA}.marks WHERE mark = %s", (theirs[0],))
    # on purpose: the other source's marks are replaced by this one's, flagged so that
    # the next sync compares digests (20000 was kept as a resumed copy's would be)
    result = run("copy", "-d", b, "--target-dbname", dst, "--source-changed")
    assert result.exit_code == 0, result.output
    assert "resuming: 1 LO an earlier copy made is there already" in result.stderr
    assert _marks(dst) == [("all", Recorded(describe(b), _name(b), replaced=True))]
    with pytest.raises(UsageError, match=f"read database {_name(b)} on "):
        sync(a, dst, SyncRequest(delete=True))
    r = sync(b, dst, SyncRequest(delete=True))
    assert "a copy --source-changed made the last mark" in r.method
    assert r.deleted == 99 and state(dst) == state(b)
    assert _marks(dst) == [("all", Recorded(describe(b), _name(b)))]
    assert sync(b, dst, SyncRequest()).method.startswith("transaction ids since")


def test_copy_in_parts_and_resumed_from_one_source_is_not_refused(
    pg16: EmbeddedCluster, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Parts run from several hosts (another spelling of the source's address: the
    system identifier tells it is the same) and a rerun add marks of one source, which
    combine."""
    a, b, dst = new_db(pg16), new_db(pg16), new_db(pg17)
    _los(a, range(20_000, 20_100), "x")
    _los(b, range(30_000, 30_003), "y")
    tcp = pg16.conninfo(_name(a), tcp=True)
    assert copy(a, dst, CopyRequest(part=(1, 2))).los == 50
    assert copy(tcp, dst, CopyRequest(part=(2, 2))).los == 50
    again = run("copy", "-d", a, "--target-dbname", dst, "--json")
    assert again.exit_code == 0, again.output
    assert "resuming: 100 LOs" in again.stderr
    assert len(_marks(dst)) == 3 and state(dst) == state(a)
    assert_one_line_error(run("copy", "-d", b, "--target-dbname", dst, "--part", "2/2"), 2,
                          "copy --source-changed")  # fmt: skip
    r = sync(a, dst, SyncRequest(delete=True))
    assert r.method.startswith("transaction ids since") and r.deleted == 0


def test_marks_of_more_than_one_cluster_combine_into_none() -> None:
    """Marks of one source read before and after a restart (by start time): no one mark
    is exact, so sync compares digests."""
    one = Mark("started 2001-01-01 00:00:00+00", 16_500, 10, 20, ())
    later = Mark("started 2002-01-01 00:00:00+00", 16_500, 30, 40, ())
    rows = [Marked("all", m, Recorded("database d on h:5432", "d"), (m.to_json(), None))
            for m in (one, later)]  # fmt: skip
    assert state_mod.combine(rows[:1]) == one
    assert state_mod.combine([rows[0], rows[0]]) == one
    assert state_mod.combine(rows) is None
