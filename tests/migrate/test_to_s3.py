"""``migrate run --to s3://`` and back (``--to lo``) on a real PostgreSQL and SeaweedFS:
every row's key names an object holding its LO's bytes (with their sha256 in its
metadata), the way back gives the same bytes, and nothing is overwritten, unlinked or
switched that should not be."""

from __future__ import annotations

import hashlib

import psycopg
import pytest

from pgblobdump.errors import DatabaseError, FileError, ObjectStorageError, UsageError
from pgblobdump.files.objects import Entry, open_place
from pgblobdump.migrate import LockPolicy, RunOptions, abort, run
from pgblobdump.migrate.objects.target import Target
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error
from tests.clirun import run as cli
from tests.conftest import NewDb
from tests.migrate.test_migrate import columns_of, contents, generated, lo_count


def go(db: str, spec: str = "docs.lo", **opts: object) -> object:
    with psycopg.connect(db, autocommit=True) as conn:
        return run(conn, spec, RunOptions(**opts))  # type: ignore[arg-type]


def with_nulls_and_shared(db: str) -> None:
    """Two NULL rows and two rows sharing one LO, besides generate's."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("ALTER TABLE docs ALTER COLUMN lo DROP NOT NULL")
        conn.execute(
            "INSERT INTO docs (id, lo, size, name)"
            " VALUES (10001, NULL, 0, 'a'), (10002, NULL, 0, 'b')"
        )
        conn.execute(
            "INSERT INTO docs (id, lo, size, name) SELECT 10003, lo, size, 'c' FROM docs"
            " WHERE lo IS NOT NULL ORDER BY id LIMIT 1"
        )


def objects(where: str) -> dict[str, tuple[bytes, dict[str, str]]]:
    """Every object under ``where``: its bytes and metadata."""
    out = {}
    with open_place(where) as place:
        for e in place.walk():
            assert isinstance(e, Entry)
            with place.open(e.key) as f:
                out[e.key] = (f.read(), place.metadata(e.key))
    return out


def keys_of(db: str, table: str = "docs", col: str = "lo") -> dict[int, str | None]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(f"SELECT id, {col} FROM {table} ORDER BY id").fetchall()
    return {int(i): v for i, v in rows}


def assert_keys_name_the_bytes(db: str, where: str, before: dict[int, bytes | None],
                               url: bool = False) -> None:  # fmt: skip
    target = Target.parse(where, url)
    stored = objects(where)
    keys = keys_of(db)
    assert keys.keys() == before.keys()
    for i, data in before.items():
        if data is None:
            assert keys[i] is None
            continue
        value = keys[i]
        assert value is not None and value.startswith(target.value_prefix), value
        rel = target.relative(value)
        assert rel is not None and rel in stored, value
        got, meta = stored[rel]
        assert got == data, i
        assert meta["sha256"] == hashlib.sha256(data).hexdigest()


def test_round_trip_to_s3_and_back_keeps_bytes_nulls_and_sharing(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    db = new_db(pg17)
    generated(db, n=60)
    with_nulls_and_shared(db)
    before, los = contents(db), lo_count(db)
    r = go(db, to="s3", store=s3_url)
    assert r.phase == "done"  # type: ignore[attr-defined]
    assert columns_of(db)["lo"][0] == "text"
    assert_keys_name_the_bytes(db, s3_url, before)
    keys = keys_of(db)
    assert keys[10001] is None and keys[10002] is None
    shared = [i for i in keys if i != 10003 and keys[i] == keys[10003]]
    assert len(shared) == 1  # one object for the LO two rows name
    assert lo_count(db) == los  # no --unlink: the LOs stay
    # Back: new LOs of the objects; the bytes, NULLs and the sharing come back.
    r = go(db, to="lo")
    assert r.phase == "done" and r.direction == "s3lo"  # type: ignore[attr-defined]
    assert columns_of(db)["lo"][0] == "oid"
    assert contents(db) == before
    with psycopg.connect(db) as conn:
        a, b = conn.execute("SELECT lo FROM docs WHERE id IN (10003, %s)", (shared[0],)).fetchall()
        assert a == b
        owners = conn.execute(
            "SELECT DISTINCT pg_get_userbyid(lomowner) FROM pg_largeobject_metadata m"
            " JOIN docs d ON d.lo = m.oid"
        ).fetchall()
        owner = conn.execute(
            "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = 'docs'::regclass"
        ).fetchone()
    assert owners == [owner]  # the new LOs are the table owner's, as --to lo makes them
    assert len(objects(s3_url)) == len({k for k in keys.values() if k})  # none removed


def test_unlink_removes_only_the_los_nothing_else_references(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    db = new_db(pg17)
    generated(db, n=40)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE other (id int PRIMARY KEY, ref oid)")
        conn.execute("INSERT INTO other SELECT 1, lo FROM docs WHERE lo IS NOT NULL LIMIT 1")
        kept = conn.execute("SELECT ref FROM other").fetchone()[0]  # type: ignore[index]
        unrelated = conn.execute("SELECT lo_from_bytea(0, 'x')").fetchone()[0]  # type: ignore[index]
    before = contents(db)
    r = go(db, to="s3", store=s3_url, unlink=True)
    assert_keys_name_the_bytes(db, s3_url, before)
    with psycopg.connect(db) as conn:
        left = {int(r[0]) for r in conn.execute("SELECT oid FROM pg_largeobject_metadata")}
    assert left == {kept, unrelated}
    assert r.kept_referenced == 1  # type: ignore[attr-defined]


def test_an_object_with_other_content_is_refused_and_one_with_the_same_reused(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    db = new_db(pg17)
    generated(db, n=20)
    before = contents(db)
    first = min(o for o in _oids(db))
    with open_place(s3_url, create=True) as place, place.putter() as put:
        put.put(str(first), [(0, b"not the LO")], 10, {"sha256": "0" * 64})
    result = cli("migrate", "run", "-d", db, "docs.lo", "--to", s3_url)
    assert_one_line_error(result, FileError.exit_code, f"{first} exists with other content")
    assert columns_of(db)["lo"][0] == "oid" and contents(db) == before  # nothing switched
    with open_place(s3_url) as place:
        with place.open(str(first)) as f:
            assert f.read() == b"not the LO"  # not overwritten
        place.remove(str(first))  # the user clears the way
        with place.putter() as put:  # the right bytes, as a killed run would have left them
            data = before[_row_of(db, first)]
            assert data is not None
            put.put(str(first), [(0, data)], len(data),
                    {"sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    result = cli("migrate", "run", "-d", db, "docs.lo", "--to", s3_url)
    assert result.exit_code == 0, result.stderr
    assert "resuming run" in result.stderr
    assert_keys_name_the_bytes(db, s3_url, before)


def test_the_report_says_who_could_read_the_los_and_that_the_bucket_is_yours(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    db = new_db(pg17)
    generated(db, n=30)  # two owners, some LOs granted
    with psycopg.connect(db, autocommit=True) as conn:
        lo = conn.execute("SELECT lo FROM docs WHERE lo IS NOT NULL LIMIT 1").fetchone()[0]  # type: ignore[index]
        conn.execute(f"GRANT SELECT ON LARGE OBJECT {lo} TO PUBLIC")
        owners = {r[0] for r in conn.execute(
            "SELECT DISTINCT pg_get_userbyid(lomowner) FROM pg_largeobject_metadata")}  # fmt: skip
    result = cli("migrate", "run", "-d", db, "docs.lo", "--to", s3_url, "--json")
    assert result.exit_code == 0, result.stderr
    import json

    notes = " ".join(json.loads(result.stdout)["notes"])
    for o in owners:
        assert o in notes
    assert "PUBLIC (1 LOs)" in notes
    assert "lo_compat_privileges is off" in notes
    assert "no ACL or public setting was put on any object" in notes


def test_url_values_and_back(pg17: EmbeddedCluster, new_db: NewDb, s3_url: str) -> None:
    db = new_db(pg17)
    generated(db, n=20)
    before = contents(db)
    go(db, to="s3", store=s3_url, url=True)
    assert_keys_name_the_bytes(db, s3_url, before, url=True)
    assert all(v is None or v.startswith(s3_url + "/") for v in keys_of(db).values())
    go(db, to="lo")
    assert contents(db) == before


def test_to_lo_of_keys_no_run_made_needs_from(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    db = new_db(pg17)
    generated(db, n=10)
    before = contents(db)
    go(db, to="s3", store=s3_url)
    with psycopg.connect(db, autocommit=True) as conn:  # the keys, in a table of their own
        conn.execute("CREATE TABLE copies AS SELECT id, lo AS k FROM docs")
        conn.execute("ALTER TABLE copies ADD PRIMARY KEY (id)")
    with pytest.raises(UsageError, match="--from s3://bucket/prefix"):
        go(db, "copies.k", to="lo")
    go(db, "copies.k", to="lo", store=s3_url)
    assert contents(db, "copies", "k") == before


def _oids(db: str) -> list[int]:
    with psycopg.connect(db) as conn:
        return [int(r[0]) for r in conn.execute("SELECT lo FROM docs WHERE lo IS NOT NULL")]


def _row_of(db: str, oid: int) -> int:
    with psycopg.connect(db) as conn:
        return int(conn.execute("SELECT min(id) FROM docs WHERE lo = %s", (oid,)).fetchone()[0])  # type: ignore[index]


def test_back_refuses_a_missing_object_and_abort_unlinks_the_los_it_made(
    pg17: EmbeddedCluster, new_db: NewDb, s3_url: str
) -> None:
    db = new_db(pg17)
    generated(db, n=80)
    go(db, to="s3", store=s3_url, unlink=True)
    keys = keys_of(db)
    los = lo_count(db)
    with psycopg.connect(db, autocommit=True) as conn:  # a key under the prefix, no object
        conn.execute("UPDATE docs SET lo = %s WHERE id = (SELECT max(id) FROM docs)",
                     (Target.parse(s3_url).value(999999),))  # fmt: skip
    with pytest.raises(ObjectStorageError, match=r"999999.*does not exist"):
        go(db, to="lo")
    assert columns_of(db)["lo"][0] == "text"  # nothing switched
    assert lo_count(db) > los  # the chunks before the missing object were made
    with psycopg.connect(db, autocommit=True) as conn:
        mig = abort(conn, "docs.lo", "pgblobdump", LockPolicy())
    assert mig.phase == "aborted" and lo_count(db) == los  # exactly those unlinked
    assert columns_of(db)["lo"][0] == "text" and len(keys_of(db)) == len(keys)
    with psycopg.connect(db, autocommit=True) as conn:  # a value naming nothing there
        conn.execute("UPDATE docs SET lo = 'elsewhere/1' WHERE id = (SELECT min(id) FROM docs)")
    with pytest.raises(DatabaseError, match="name no object under"):
        go(db, to="lo")
