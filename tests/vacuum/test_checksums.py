"""inspect --checksums: one digest of every LO's bytes, computed on the server, equal on
two databases holding the same bytes under the same OIDs and different otherwise."""

from __future__ import annotations

import hashlib
import json

import psycopg

from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.vacuum import checksums as ck
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.vacuum.test_safety import as_role

BIG_AT = 1_100_000_000  # one byte past 1 GB: lo_get refuses it, read range by range


def _expected(db: str) -> tuple[int, str]:
    """The digest as docs/vacuum.md defines it, from the bytes read here."""
    h = hashlib.sha256()
    with psycopg.connect(db) as c:
        oids = [int(r[0]) for r in c.execute(
            "SELECT oid::int8 FROM pg_largeobject_metadata ORDER BY oid")]  # fmt: skip
        for oid in oids:
            size = int(c.execute(
                "SELECT lo_lseek64(lo_open(%s::int8::oid, 262144), 0, 2)", (oid,)
            ).fetchone()[0])  # type: ignore[index]  # fmt: skip
            if size <= 1 << 30:
                row = c.execute("SELECT lo_get(%s::int8::oid)", (oid,)).fetchone()
                md5 = hashlib.md5(bytes(row[0])).hexdigest()  # type: ignore[index]
            else:
                parts = []
                for at in range(0, size, ck.RANGE):
                    data = c.execute("SELECT lo_get(%s::int8::oid, %s, %s)",
                                     (oid, at, ck.RANGE)).fetchone()[0]  # type: ignore[index]  # fmt: skip
                    parts.append(hashlib.md5(bytes(data)).hexdigest())
                md5 = hashlib.md5("".join(parts).encode()).hexdigest()
            h.update(f"{oid} {md5}\n".encode())
    return len(oids), h.hexdigest()


def _fill(db: str, owner_stmt: str = "") -> None:
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("SELECT lo_from_bytea(i, convert_to(repeat(i::text, i * 100), 'UTF8'))"
                  " FROM generate_series(1, 30) i")  # fmt: skip
        c.execute("SELECT lo_create(40)")  # empty
        c.execute("SELECT lo_create(41)")
        c.execute(f"SELECT lo_put(41, {BIG_AT}, 'end')")
        if owner_stmt:
            c.execute(owner_stmt)


def test_equal_bytes_equal_digest_and_one_byte_changes_it(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    a, b = new_db(pg17), new_db(pg17)
    _fill(a)
    _fill(b, "CREATE ROLE ck_other; ALTER LARGE OBJECT 5 OWNER TO ck_other;"
             " COMMENT ON LARGE OBJECT 6 IS 'only here'")  # fmt: skip
    ra, rb = (run("inspect", "-d", db, "--checksums", "--json") for db in (a, b))
    assert ra.exit_code == 0 and rb.exit_code == 0, (ra.output, rb.output)
    da, db_ = json.loads(ra.stdout)["checksums"], json.loads(rb.stdout)["checksums"]
    assert (da["los"], da["digest"]) == _expected(a)
    assert da == db_ and da["over_1gb"] == 1  # owners and comments are not bytes
    with psycopg.connect(b, autocommit=True) as c:
        c.execute("SELECT lo_put(7, 3, 'X')")
    changed = json.loads(run("inspect", "-d", b, "--checksums", "--json").stdout)["checksums"]
    assert changed["digest"] != da["digest"] and (changed["los"], changed["digest"]) == _expected(b)
    plain = json.loads(run("inspect", "-d", a, "--json").stdout)
    assert plain["checksums"] is None  # no bytes read without the flag
    table = run("inspect", "-d", a, "--checksums")
    assert da["digest"] in table.stdout


def test_a_role_that_may_not_read_an_lo_is_told_in_one_line(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("DROP ROLE IF EXISTS ck_reader")
        c.execute("CREATE ROLE ck_reader LOGIN")
        c.execute("SELECT lo_from_bytea(1, 'secret')")
    r = run("inspect", "-d", as_role(db, "ck_reader"), "--checksums")
    assert_one_line_error(r, 4, "permission denied for large object 1")


def test_the_last_oid_ends_the_walk(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """An LO at OID 4294967295 (the largest): the walk stops there instead of asking for
    OIDs from 2^32 on ("OID out of range")."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("SELECT lo_from_bytea(7, 'seven')")
        c.execute("SELECT lo_from_bytea(4294967295, 'the last')")
    r = run("inspect", "-d", db, "--checksums", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["checksums"]
    assert (got["los"], got["digest"]) == _expected(db) and got["los"] == 2
