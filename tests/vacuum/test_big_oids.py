"""OIDs of 2^31 and more held in integer columns, on a real server: ``oid::int4`` stores
3000000000 as -1294967296, and every reader of a user-named column takes it for LO
3000000000, never for LO 1294967296 (vacuum --references, inspect --references, dump,
copy and sync --referenced-by)."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import run
from tests.conftest import NewDb
from tests.vacuum.test_safety import los

BIG = 3_000_000_000
"""An OID past int4's range: ``BIG::oid::int4`` is ``BIG - 2^32`` (-1294967296)."""
DIGITS = BIG - (1 << 32)  # -1294967296
ALIAS = -DIGITS
"""LO 1294967296: what reading the digits of -1294967296 without the sign names."""


def _db(new_db: NewDb, cluster: EmbeddedCluster, *stmts: str) -> str:
    db = new_db(cluster)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute(f"SELECT lo_from_bytea({BIG}, 'big'), lo_from_bytea({ALIAS}, 'alias')")
        c.execute("CREATE TABLE t (c int4)")
        c.execute(f"INSERT INTO t VALUES ({BIG}::oid::int4), (NULL)")
        for s in stmts:
            c.execute(s)
    return db


def test_vacuum_references_an_int4_column_keeps_the_lo_it_names(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = _db(new_db, pg17)
    r = run("vacuum", "-d", db, "--references", "t.c", "--min-age", "0", "--json")
    assert r.exit_code == 0, r.output
    assert los(db) == {BIG}  # LO 1294967296 was the orphan
    assert json.loads(r.stdout)["removed"] == 1


def test_every_integer_kind_named_reads_as_oids(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """int2/int4, their domains and arrays: a negative value is the OID + 2^32; int8 (and
    its arrays): the OID it is, a negative one none; text: every integer, and after a
    minus sign what oid::int4 made of one (a superset: the digits alone are kept too)."""
    db = _db(
        new_db, pg17,
        "CREATE DOMAIN d4 AS int4; CREATE DOMAIN d4s AS int4[]",
        "CREATE TABLE k (d d4, a int4[], e d4s, s int2, b int8, ba int8[], x text)",
        "SELECT lo_create(o) FROM unnest('{3000000001, 3000000002, 3000000003, 4294967295,"
        " 3000000004, 3000000005, 3000000006, 1294967290, 5, 4294967291, 6, 4294967290,"
        " 7000}'::int8[]) o",
        # d, a and e name 3000000001..3; s = -1 names 4294967295; b names 3000000004 and
        # -5 none (LOs 5 and 4294967291 go); ba names 3000000005, -6 none; x names
        # 3000000006 as -1294967290 and, read as digits, 1294967290
        "INSERT INTO k VALUES (3000000001::oid::int4, ARRAY[3000000002::oid::int4],"
        " ARRAY[3000000003::oid::int4]::d4s, -1, 3000000004, '{3000000005, -6}',"
        " 'see ' || 3000000006::oid::int4::text),"
        " (NULL, NULL, NULL, NULL, -5, NULL, 'plain 7000')",
    )  # fmt: skip
    named = [a for col in ("t.c", "k.d", "k.a", "k.e", "k.s", "k.b", "k.ba", "k.x")
             for a in ("--references", col)]  # fmt: skip
    r = run("inspect", "-d", db, *named, "--json")
    assert r.exit_code == 0, r.output
    kinds = {c["column"]: c["kind"] for c in json.loads(r.stdout)["columns"]}
    assert kinds == {"public.t.c": "oid", "public.k.d": "oid", "public.k.a": "array",
                     "public.k.e": "array", "public.k.s": "oid", "public.k.b": "int8",
                     "public.k.ba": "int8 array", "public.k.x": "text"}  # fmt: skip
    r = run("vacuum", "-d", db, *named, "--min-age", "0")
    assert r.exit_code == 0, r.output
    assert los(db) == {BIG, 3000000001, 3000000002, 3000000003, 4294967295, 3000000004,
                       3000000005, 3000000006, 1294967290, 7000}  # fmt: skip


def test_inspect_counts_the_reference_and_no_orphan(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = _db(new_db, pg17, f"SELECT lo_unlink({ALIAS})")
    r = run("inspect", "-d", db, "--references", "t.c", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    (col,) = got["columns"]
    assert (col["references"], col["dangling"], got["orphans"]) == (1, 0, 0)


def test_referenced_by_selects_the_lo_in_dump_copy_and_sync(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    db = _db(new_db, pg17)
    out = tmp_path / "a"
    r = run("dump", "-d", db, "-o", str(out), "--referenced-by", "t.c")
    assert r.exit_code == 0, r.output
    listing = run("ls", str(out)).stdout.split()
    assert str(BIG) in listing and str(ALIAS) not in listing
    dst = new_db(pg17)
    r = run("copy", "-d", db, "--target-dbname", dst, "--referenced-by", "t.c")
    assert r.exit_code == 0, r.output
    assert los(dst) == {BIG}
    dst = new_db(pg17)
    r = run("sync", "-d", db, "--target-dbname", dst, "--referenced-by", "t.c")
    assert r.exit_code == 0, r.output
    assert los(dst) == {BIG}
