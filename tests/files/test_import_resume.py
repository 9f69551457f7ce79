"""``import`` cut short, for real: kill -9 then ``--resume`` (never a file twice), SIGINT
(what the run made removed, rows put back), the checksum check on a real server, and an
LO over 1 GiB."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import psycopg
import pytest

from pgblobdump.errors import DatabaseError
from pgblobdump.files.importing import hooks as importhooks
from pgblobdump.files.importing import state as importstate
from pgblobdump.files.importing.hooks import ChecksumMismatch, verify
from pgblobdump.files.importing.ingest import FileRec
from pgblobdump.files.importing.run import ImportRequest, run_import
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import started, wait_for
from tests.conftest import NewDb

FILES = 30_000


def _scalar(db: str, query: str) -> int:
    with psycopg.connect(db) as conn:
        try:
            row = conn.execute(query).fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
    return int(row[0]) if row else 0


def _journaled(db: str) -> int:
    return _scalar(db, "SELECT count(*) FROM pgblobdump_import.files")


def _many(root: Path) -> None:
    for d in range(30):
        (root / f"d{d:02}").mkdir()
        for i in range(FILES // 30):
            (root / f"d{d:02}" / f"{i:04}").write_bytes(b"%d/%d " % (d, i) * 200)


@pytest.fixture
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("many")
    _many(root)
    return root


def test_kill_9_then_resume_imports_each_file_once(
    many: Path, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (path text PRIMARY KEY, blob oid)")
    table = ["--table", "docs", "--path-column", "path", "--lo-column", "blob"]
    args = ["import", str(many), "-d", db, "--jobs", "2", *table]
    with started(*args) as proc:
        wait_for(proc, lambda: _journaled(db) > 3000, "the import")
        proc.kill()
        proc.communicate()
    done = _journaled(db)
    assert 3000 <= done < FILES
    # every committed LO is journaled, and has its row: batches commit whole
    assert _scalar(db, "SELECT count(*) FROM pg_largeobject_metadata") == done
    assert _scalar(db, "SELECT count(*) FROM docs") == done
    with started(*args) as proc:  # not without --resume
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 4 and "add --resume" in err, err
    with started(*args, "--resume", "--json") as proc:
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "resuming run" in err
    assert f'"kept": {done}' in out and f'"files": {FILES - done}' in out, out
    with psycopg.connect(db) as conn:
        twice = conn.execute(
            "SELECT count(*) FROM (SELECT path FROM pgblobdump_import.files GROUP BY path"
            " HAVING count(*) > 1) t"
        ).fetchone()
        assert twice == (0,)
        rows = conn.execute(
            "SELECT count(*), count(DISTINCT path) FROM docs d JOIN pg_largeobject_metadata m"
            " ON m.oid = d.blob"
        ).fetchone()
        assert rows == (FILES, FILES)
        bad = conn.execute(
            "SELECT count(*) FROM pgblobdump_import.files f WHERE sha256(lo_get(f.oid)) <> f.sha256"
        ).fetchone()
        assert bad == (0,)
    assert _scalar(db, "SELECT count(*) FROM pg_largeobject_metadata") == FILES


def test_sigint_removes_what_the_run_made_and_puts_rows_back(
    many: Path, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (path text PRIMARY KEY, blob oid)")
        conn.execute("SELECT lo_from_bytea(77, 'old')")
        # the first files' rows exist: the run updates them, then must give them back
        conn.execute(
            "INSERT INTO docs SELECT 'd00/' || to_char(g, 'FM0000'), 77"
            " FROM generate_series(0, 99) g"
        )
    before = _scalar(db, "SELECT count(*) FROM docs")
    args = ["import", str(many), "-d", db, "--table", "docs", "--path-column", "path",
            "--lo-column", "blob"]  # fmt: skip
    with started(*args) as proc:
        wait_for(proc, lambda: _journaled(db) > 3000, "the import")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = err.strip().splitlines()
    assert (
        lines[-1].startswith("Error: import interrupted by SIGINT") and "removed the" in lines[-1]
    )
    assert _scalar(db, "SELECT count(*) FROM pg_largeobject_metadata") == 1
    assert _scalar(db, "SELECT count(*) FROM docs") == before
    assert _scalar(db, "SELECT count(*) FROM docs WHERE blob = 77") == before
    assert _journaled(db) == 0
    assert _scalar(db, "SELECT count(*) FROM pgblobdump_import.runs") == 0
    # nothing left to resume: a new run goes ahead
    r = run_import(db, ImportRequest(str(many), jobs=2))
    assert r.files == FILES


def test_a_checksum_mismatch_is_detected_on_the_server(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It cannot be provoked through import without a fault in the server or the
    network (the bytes sent are the bytes hashed, and no other session sees an LO before
    its batch commits): the check itself is run against real LOs with a wrong digest,
    both ways (hashed on the server; read back in ranges)."""
    db = new_db(pg17)
    data = os.urandom(100_000)
    right = FileRec("f", len(data), 0, None, hashlib.sha256(data).digest())
    wrong = FileRec("f", len(data), 0, None, hashlib.sha256(data + b"!").digest())
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(5000, %s)", (data,))
        verify(conn, [5000], [right])
        with pytest.raises(ChecksumMismatch, match="does not hold what f held"):
            verify(conn, [5000], [wrong])
        # the journal's statement, which checks each batch's LOs as it enters them
        importstate.ensure(conn)
        importstate.new_run(conn, "somewhere", "")
        row = (5000, "f", len(data), 1, None, wrong.sha256, "-", None)
        with conn.transaction(force_rollback=True):
            assert importstate.record(conn, "r", [row], 1 << 20) == [5000]
        with conn.transaction():
            assert importstate.record(conn, "r", [(*row[:5], right.sha256, "-", None)],
                                      1 << 20) == []  # fmt: skip
        monkeypatch.setattr(importhooks, "VERIFY_ON_SERVER_MAX", 1000)
        monkeypatch.setattr(importhooks, "VERIFY_RANGE", 4096)
        verify(conn, [5000], [right])
        with pytest.raises(DatabaseError, match="sha256"):
            verify(conn, [5000], [wrong])


@pytest.mark.scale
def test_a_file_over_1_gib(tmp_path: Path, pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    size = (1 << 30) + (5 << 20) + 7
    marks = {0: os.urandom(1 << 20), 1 << 30: os.urandom(1 << 20), size - 7: b"the end"}
    with open(tmp_path / "huge", "wb") as f:  # sparse: its holes stay holes
        for at, data in marks.items():
            f.seek(at)
            f.write(data)
    r = run_import(db, ImportRequest(str(tmp_path)))
    assert r.files == 1 and r.bytes == size and r.oids is not None
    oid = r.oids[0]
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT lo_get(%s, %s, 8)", (oid, size - 8)).fetchone() == (
            b"\0the end",
        )
        for at, data in marks.items():
            got = conn.execute("SELECT lo_get(%s, %s, %s)", (oid, at, len(data))).fetchone()
            assert got is not None and bytes(got[0]) == data
        pages = conn.execute("SELECT count(*) FROM pg_largeobject WHERE loid = %s", (oid,))
        row = pages.fetchone()
        assert row is not None and row[0] < 2000  # 1 GiB of pages would be 524,288


def test_int8_arrays_at_c_speed_round_trip(pg17: EmbeddedCluster) -> None:
    values = [0, 1, -1, 2**63 - 1, -(2**63), 4_294_967_295, 10**18 + 7]
    with psycopg.connect(pg17.conninfo()) as conn:
        got = conn.execute("SELECT %s::int8[]", (importstate.int8_array(values),)).fetchone()
        assert got == (values,)
        assert conn.execute("SELECT %s::int8[]", (importstate.int8_array([]),)).fetchone() == ([],)
