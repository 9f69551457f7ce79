"""``copy --remap``: a source database's LOs into a target whose OIDs are taken, on a real
server: two tenants with overlapping OIDs copied into one target (the second at new
OIDs, its rows loaded before rewritten by --rewrite), --remap all from --oid-range over
two jobs, the refusals before anything is written, nothing entered in sync's state,
and a killed copy finished by --resume (refused when the source's selection changed)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import psycopg

from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import State, state
from tests.losets import roles as _roles
from tests.remap.test_remap_resume import WAITING, _hold, _kill, _wait_for
from tests.remap.test_restore_remap import _load, _reads

FIRST = 100_000
COUNT = 300

Rows = list[tuple[int, int, str, str]]  # id, lo, name (<oid>.pdf), ref (digits)


def _tenant(cluster: EmbeddedCluster, new_db: NewDb, salt: str, count: int = COUNT,
            size: str = "1KiB-4KiB") -> tuple[str, State, Rows]:  # fmt: skip
    """A source database: ``count`` LOs from FIRST (owners, grants, comments) and the
    rows naming them, three ways."""
    db = new_db(cluster)
    code = run("generate", "-d", db, "-n", str(count), "--size", size, "--owners", "2",
               "--grants", "0.3", "--comments", "0.2", "--start-oid", str(FIRST),
               "--seed", salt).exit_code  # fmt: skip
    assert code == 0
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT row_number() OVER (ORDER BY m.oid)::int, m.oid::int8, m.oid::text || '.pdf',"
            " m.oid::text FROM pg_largeobject_metadata m ORDER BY m.oid"
        ).fetchall()
    return db, state(db), [(int(a), int(b), c, d) for a, b, c, d in rows]


def _sync_state(db: str) -> tuple[int, int] | None:
    """(rows of pgblobdump_sync.made, of .marks), None without the schema."""
    with psycopg.connect(db) as conn:
        if conn.execute("SELECT to_regclass('pgblobdump_sync.made')").fetchone() == (None,):
            return None
        row = conn.execute(
            "SELECT (SELECT count(*) FROM pgblobdump_sync.made),"
            " (SELECT count(*) FROM pgblobdump_sync.marks)"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_two_tenants_into_one_database(pg17: EmbeddedCluster, new_db: NewDb,
                                       tmp_path: Path) -> None:  # fmt: skip
    """Tenant A copied as it is; tenant B, whose OIDs are A's, copied with --remap taken
    beside it: B's rows, loaded first, then read B's bytes, A's rows A's; B's copy left
    sync's state as A's copy made it."""
    _roles(pg17)
    a_db, a_los, a_rows = _tenant(pg17, new_db, "1")
    b_db, b_los, b_rows = _tenant(pg17, new_db, "2")
    assert set(a_los) == set(b_los) and a_los != b_los
    target = new_db(pg17)
    assert run("copy", "-d", a_db, "--target-dbname", target).exit_code == 0
    _load(target, "a_docs", a_rows)
    _load(target, "b_docs", b_rows)
    before_a = _reads(target, "a_docs")
    synced = _sync_state(target)
    out = tmp_path / "map.csv"
    result = run("copy", "-d", b_db, "--target-dbname", target, "--remap", "taken",
                 "--rewrite", "b_docs.lo", "--rewrite", "b_docs.name", "--rewrite",
                 "b_docs.ref", "--map-out", str(out), "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["los"] == COUNT and record["remapped"] == COUNT and record["mode"] == "taken"
    assert record["kept_oid"] == 0 and record["map_table"] == "pgblobdump_remap.map"
    assert [w["rows"] for w in record["rewrites"]] == [COUNT, COUNT, COUNT]
    with out.open() as f:
        pairs = {int(r["old_oid"]): int(r["new_oid"]) for r in csv.DictReader(f)}
    assert sorted(pairs) == sorted(b_los)
    assert min(pairs.values()) > max(a_los)
    assert record["map"] == [[FIRST, FIRST + COUNT - 1, pairs[FIRST]]]
    assert _reads(target, "a_docs") == before_a
    b_bytes = {i: b_los[lo][0] for i, lo, _n, _r in b_rows}
    assert _reads(target, "b_docs") == {i: (d, d, d) for i, d in b_bytes.items()}
    now = state(target)
    assert all(now[new] == b_los[old] for old, new in pairs.items())  # owner, ACL, comment
    assert all(now[oid] == a_los[oid] for oid in a_los)
    assert _sync_state(target) == synced  # nothing of B's entered sync's state
    # a plain copy of B is still refused: its OIDs are A's
    assert_one_line_error(run("copy", "-d", b_db, "--target-dbname", target), 2,
                          "another source")  # fmt: skip


def test_all_from_an_oid_range_with_two_jobs(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """--remap all --oid-range --jobs 2 of a selection (--oids) into a database holding
    none of its OIDs: every selected LO at the range's OIDs in OID order, its bytes and
    metadata kept, the rows rewritten; no sync state made; a second run makes a second
    copy at the next free OIDs."""
    _roles(pg17)
    src, los, rows = _tenant(pg17, new_db, "3")
    target = new_db(pg17)
    _load(target, "docs", rows)
    last = FIRST + 199
    result = run("copy", "-d", src, "--target-dbname", target, "--oids", f"{FIRST}-{last}",
                 "--remap", "all", "--oid-range", "500000-600000", "--jobs", "2",
                 "--rewrite", "docs.lo", "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["block"] == [500_000, 500_199] and record["remapped"] == 200
    assert record["map"] == [[FIRST, last, 500_000]]
    assert state(target) == {500_000 + i: los[old] for i, old in enumerate(sorted(los)[:200])}
    with psycopg.connect(target) as conn:
        got = conn.execute(
            "SELECT count(*) FILTER (WHERE lo >= 500000), count(*) FILTER (WHERE lo <= %s),"
            " min(lo)::int8, max(lo)::int8 FROM docs",
            (last,),
        ).fetchone()
    # the rows naming a copied LO name its new OID; the others are as they were
    assert got == (200, 0, last + 1, 500_199)
    assert _sync_state(target) is None
    again = run("copy", "-d", src, "--target-dbname", target, "--oids", f"{FIRST}-{last}",
                "--remap", "all", "--json")  # fmt: skip
    assert again.exit_code == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["block"][0] > 500_199 and second["run"] != record["run"]
    assert second["rewrites"] == []


def test_refused_before_anything_is_written(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    _roles(pg17)
    src, los, rows = _tenant(pg17, new_db, "4")
    target = new_db(pg17)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(f"SELECT lo_from_bytea({FIRST} + g, 'theirs') FROM generate_series(0, 9) g")
    theirs = state(target)
    _load(target, "docs", rows)
    cases = [
        (["--remap", "all", "--oid-range", "500000-500009"], 2, "holds 10 OIDs"),
        (["--remap", "all", "--oid-range", f"{FIRST}-{FIRST + 10000}"], 4,
         "holds 10 LOs of the target"),
        (["--remap", "--oid-range", f"{FIRST + 100}-{FIRST + 10000}"], 2, "keep"),
        (["--remap", "--on-conflict", "skip"], 2, "--on-conflict skip"),
        (["--remap", "--part", "1/2"], 2, "--part"),
        (["--remap", "--source-changed"], 2, "--source-changed"),
        (["--oid-range", "500000-600000"], 2, "--oid-range goes with --remap"),
        (["--rewrite", "docs.lo"], 2, "--rewrite goes with --remap"),
        (["--remap", "--rewrite", "nosuch.lo"], 8, "no table nosuch"),
        (["--remap", "--rewrite", "docs.nosuch"], 8, "no column"),
        (["--remap", "--resume"], 2, "nothing to resume"),
    ]  # fmt: skip
    for args, code, fragment in cases:
        assert_one_line_error(run("copy", "-d", src, "--target-dbname", target, *args), code,
                              fragment)  # fmt: skip
    # nothing was written: the target holds its own LOs only, no state, the rows as loaded
    assert state(target) == theirs
    with psycopg.connect(target) as conn:
        n = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname IN"
            " ('pgblobdump_remap', 'pgblobdump_sync')"
        ).fetchone()
        got = conn.execute("SELECT id, lo::int8, name, ref FROM docs ORDER BY id").fetchall()
    assert n == (0,)
    assert [tuple(r) for r in got] == rows
    assert los  # the source was not touched either
    assert state(src) == los


def test_killed_copy_resumed(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """A copy --remap all killed with one batch committed: run again, it is refused (add
    --resume); resumed after the source's selection changed, refused; resumed as it was,
    it copies the rest, each LO once, and rewrites the column."""
    count = 3_000  # 8 KiB each: three batches of 8 MiB
    src = new_db(pg17)
    assert run("generate", "-d", src, "-n", str(count), "--size", "8KiB", "--start-oid",
               str(FIRST)).exit_code == 0  # fmt: skip
    los = state(src)
    target = new_db(pg17)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(f"SELECT lo_from_bytea({FIRST} + g, 'theirs') FROM generate_series(0, 99) g")
        conn.execute("CREATE TABLE docs (lo oid)")
        conn.execute(f"INSERT INTO docs SELECT g FROM generate_series({FIRST}, {FIRST + 9}) g")
    # the second batch waits (its new OIDs start at FIRST + count, --remap all): the run is
    # killed with one batch committed
    held = _hold(target, FIRST + count + 1500)
    args = ["copy", "-d", src, "--target-dbname", target, "--remap", "all", "--rewrite",
            "docs.lo"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "pgblobdump", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for(target, WAITING)
    _kill(proc, target)
    held.close()
    with psycopg.connect(target, autocommit=True) as conn:
        made = conn.execute("SELECT count(*) FROM pgblobdump_remap.map").fetchone()
    assert made is not None and 0 < made[0] < count
    assert_one_line_error(run(*args), 4, "add --resume")
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute(f"SELECT lo_from_bytea({FIRST + count}, 'new')")
    assert_one_line_error(run(*args, "--resume"), 4, "changed since the interrupted run")
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute(f"SELECT lo_unlink({FIRST + count})")
    result = run(*args, "--resume", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["los"] == count - made[0] and record["mapped"] == count
    assert record["rewrites"] == [
        {
            "column": "public.docs.lo",
            "rows": 10,
            "dangling": 0,
            "examples": [],
            "late": 0,
            "late_examples": [],
            "others": 0,
            "others_examples": [],
        }
    ]
    with psycopg.connect(target) as conn:
        pairs = dict(
            conn.execute("SELECT old::int8, new::int8 FROM pgblobdump_remap.map").fetchall()
        )
        docs = conn.execute("SELECT lo::int8, lo_get(lo) FROM docs ORDER BY lo").fetchall()
    assert sorted(pairs) == sorted(los)  # each LO once
    now = state(target)
    assert all(now[new] == los[old] for old, new in pairs.items())
    assert [bytes(d) for _o, d in docs] == [los[FIRST + i][0] for i in range(10)]
    assert sum(1 for o in range(FIRST, FIRST + 100) if now[o][0] == b"theirs") == 100
