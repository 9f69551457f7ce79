"""``sync`` pointed at another source than the last copy or sync read (a typo in -d, the
wrong port: at cut-over, with --delete) is refused before anything is written, unless
--source-changed says it is on purpose."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.errors import UsageError
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.run import SyncRequest, sync
from pgblobdump.sync.state import SCHEMA
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
