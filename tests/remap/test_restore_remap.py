"""``restore --remap``: an archive's LOs into a database whose OIDs are taken, on a real
server: new OIDs from a reserved block or --oid-range, owners, ACLs, comments and bytes
kept, the mapping in the target and in --map-out, the rows of --referenced-by columns
rewritten (and only those naming a remapped OID), refusals before anything is written,
and a killed run resumed."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pgblobdump.packed import DumpRequest
from pgblobdump.packed.dump.run import dump
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import State, state
from tests.losets import roles as _roles

FIRST = 100_000
COUNT = 300


@dataclass(frozen=True)
class Tenant:
    db: str
    archive: Path
    los: State
    rows: list[tuple[int, int, str, str]]  # id, lo, name (<oid>.pdf), ref (digits)


def _tenant(cluster: EmbeddedCluster, new_db: NewDb, root: Path, name: str, salt: str) -> Tenant:
    db = new_db(cluster)
    code = run("generate", "-d", db, "-n", str(COUNT), "--size", "1KiB-4KiB", "--owners", "2",
               "--grants", "0.3", "--comments", "0.2", "--start-oid", str(FIRST),
               "--seed", salt).exit_code  # fmt: skip
    assert code == 0
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE docs (id int PRIMARY KEY, lo oid, name text, ref text);"
            " INSERT INTO docs SELECT g, oid, oid::text || '.pdf', oid::text"
            " FROM (SELECT oid, row_number() OVER (ORDER BY oid) g"
            "       FROM pg_largeobject_metadata) s"
        )
        rows = conn.execute("SELECT id, lo::int8, name, ref FROM docs ORDER BY id").fetchall()
    path = root / name
    dump(db, DumpRequest(), storage=LocalDirectory(path, create=True))
    return Tenant(db, path, state(db), [(int(a), int(b), c, d) for a, b, c, d in rows])


@pytest.fixture(scope="module")
def tenants(
    pg17: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Tenant, Tenant]]:
    _roles(pg17)
    made: list[str] = []

    def new(cluster: EmbeddedCluster) -> str:
        name = f"remap_src_{len(made)}"
        with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return cluster.conninfo(name)

    root = tmp_path_factory.mktemp("remap")
    yield _tenant(pg17, new, root, "a", "1"), _tenant(pg17, new, root, "b", "2")  # type: ignore[arg-type]


def _load(db: str, table: str, rows: list[tuple[int, int, str, str]]) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, lo oid, name text, ref text)")
        with conn.cursor().copy(f"COPY {table} FROM STDIN") as cp:
            for r in rows:
                cp.write_row(r)


def _reads(db: str, table: str) -> dict[int, tuple[bytes, bytes, bytes]]:
    """id -> the bytes its lo, name and ref columns name."""
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            f"SELECT id, lo_get(lo), lo_get(split_part(name, '.', 1)::int8::oid),"
            f" lo_get(ref::int8::oid) FROM {table} ORDER BY id"
        ).fetchall()
    return {int(i): (bytes(a), bytes(b), bytes(c)) for i, a, b, c in rows}


def test_two_tenants_into_one_database(tenants: tuple[Tenant, Tenant], pg17: EmbeddedCluster,
                                       new_db: NewDb, tmp_path: Path) -> None:  # fmt: skip
    """Tenant A restored as it is; tenant B's archive, whose OIDs are A's, restored with
    --remap taken beside it: B's rows, loaded first, then read B's bytes, A's rows A's."""
    a, b = tenants
    target = new_db(pg17)
    assert run("restore", str(a.archive), "-d", target).exit_code == 0
    _load(target, "a_docs", a.rows)
    _load(target, "b_docs", b.rows)
    before_a = _reads(target, "a_docs")
    with psycopg.connect(target, autocommit=True) as conn:
        # B's source had a dangling reference whose OID names another's LO here
        conn.execute("SELECT lo_from_bytea(900000, 'someone else')")
        conn.execute("INSERT INTO b_docs VALUES (9999, 900000, '900000.pdf', '900000')")
    out = tmp_path / "map.csv"
    result = run("restore", str(b.archive), "-d", target, "--remap", "--referenced-by",
                 "b_docs.lo", "--referenced-by", "b_docs.name", "--referenced-by", "b_docs.ref",
                 "--map-out", str(out), "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["remapped"] == COUNT and record["mode"] == "taken"
    assert [w["rows"] for w in record["rewrites"]] == [COUNT, COUNT, COUNT]
    assert [(w["others"], w["others_examples"]) for w in record["rewrites"]] == [(1, [900000])] * 3
    assert "b_docs.lo: 1 value name LOs this run did not write (e.g. 900000)" in result.stderr
    with out.open() as f:
        pairs = {int(r["old_oid"]): int(r["new_oid"]) for r in csv.DictReader(f)}
    assert sorted(pairs) == sorted(b.los)
    assert min(pairs.values()) > max(a.los)
    assert _reads(target, "a_docs") == before_a
    b_bytes = {i: b.los[lo][0] for i, lo, _n, _r in b.rows}
    b_bytes[9999] = b"someone else"  # reported, left as it was
    assert _reads(target, "b_docs") == {i: (d, d, d) for i, d in b_bytes.items()}
    # owners, ACLs and comments kept, at the new OIDs (an ACL's grantor is the owner)
    now = state(target)
    for old, new in pairs.items():
        assert now[new] == b.los[old]
    # the forms kept: digits stay digits, <oid>.pdf stays <new>.pdf
    with psycopg.connect(target) as conn:
        row = conn.execute("SELECT lo::int8, name, ref FROM b_docs WHERE id = 1").fetchone()
    assert row is not None
    assert row[1] == f"{row[0]}.pdf" and row[2] == str(row[0])


def test_all_from_an_oid_range_with_two_jobs(tenants: tuple[Tenant, Tenant], pg17: EmbeddedCluster,
                                             new_db: NewDb) -> None:  # fmt: skip
    """--remap all --oid-range --jobs 2 into an empty database: every LO at range's
    OIDs in archive order, its bytes and metadata kept; a second run of the same archive
    makes a second copy at the next free OIDs (a run is not a restore's identity)."""
    a, _b = tenants
    target = new_db(pg17)
    _load(target, "docs", a.rows)
    result = run("restore", str(a.archive), "-d", target, "--remap", "all", "--oid-range",
                 "500000-600000", "--jobs", "2", "--referenced-by", "docs.lo",
                 "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["block"] == [500_000, 500_000 + COUNT - 1]
    assert record["map"] == [[FIRST, FIRST + COUNT - 1, 500_000]]
    now = state(target)
    assert now == {500_000 + i: a.los[old] for i, old in enumerate(sorted(a.los))}
    with psycopg.connect(target) as conn:
        got = conn.execute("SELECT min(lo)::int8, max(lo)::int8 FROM docs").fetchone()
    assert got == (500_000, 500_000 + COUNT - 1)
    again = run("restore", str(a.archive), "-d", target, "--remap", "all", "--json")
    assert again.exit_code == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["block"][0] > 500_000 + COUNT - 1 and second["run"] != record["run"]


def test_refused_before_anything_is_written(tenants: tuple[Tenant, Tenant], pg17: EmbeddedCluster,
                                            new_db: NewDb) -> None:  # fmt: skip
    a, _b = tenants
    target = new_db(pg17)
    assert run("restore", str(a.archive), "-d", target).exit_code == 0
    _load(target, "docs", a.rows)
    arch = str(a.archive)
    cases = [
        (["--remap", "all", "--oid-range", "500000-500009"], 2, "holds 10 OIDs"),
        (["--remap", "all", "--oid-range", f"{FIRST + 10}-{FIRST + 10000}"], 4,
         "holds 290 LOs of the target"),
        (["--remap", "--on-conflict", "skip"], 2, "--on-conflict skip"),
        (["--remap", "--part", "1/2"], 2, "--part"),
        (["--oid-range", "500000-600000"], 2, "--oid-range goes with --remap"),
        (["--remap", "--referenced-by", "nosuch.lo"], 8, "no table nosuch"),
        (["--remap", "--referenced-by", "docs.nosuch"], 8, "no column"),
        (["--remap", "--resume"], 2, "nothing to resume"),
    ]  # fmt: skip
    for args, code, fragment in cases:
        assert_one_line_error(run("restore", arch, "-d", target, *args), code, fragment)
    # a column the role may not update
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS remap_limited; CREATE ROLE remap_limited LOGIN")
        conn.execute("GRANT CREATE ON DATABASE " + conn.info.dbname + " TO remap_limited")
        conn.execute("GRANT SELECT ON docs TO remap_limited")
        conn.execute("GRANT pgbd_t_owner, pgbd_t_reader, pgbd_t_granter TO remap_limited")
    limited = psycopg.conninfo.make_conninfo(target, user="remap_limited")
    assert_one_line_error(
        run("restore", arch, "-d", limited, "--remap", "--referenced-by", "docs.lo"), 4, "docs.lo"
    )
    # nothing was written: the target holds tenant A's LOs only, no run, the rows as loaded
    assert state(target) == a.los
    with psycopg.connect(target) as conn:
        n = conn.execute("SELECT to_regnamespace('pgblobdump_remap') IS NOT NULL").fetchone()
        rows = conn.execute("SELECT id, lo::int8, name, ref FROM docs ORDER BY id").fetchall()
    assert n == (False,)  # not even the state's schema
    assert [tuple(r) for r in rows] == a.rows


def test_a_stream_is_refused(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """A stream has no index to choose every new OID from before anything is written."""
    target = new_db(pg17)
    assert_one_line_error(run("restore", "-", "-d", target, "--remap"), 2, "stream")


def test_an_incremental_chain_and_a_sparse_lo(pg17: EmbeddedCluster, new_db: NewDb,
                                              tmp_path: Path) -> None:  # fmt: skip
    """--remap of a chain (dump --since) is a standalone archive's: every LO of the chain
    at a new OID, its bytes, from the base or the top; a sparse LO keeps its holes."""
    src = new_db(pg17)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(700000 + g, convert_to('v1-' || g, 'UTF8'))"
                     " FROM generate_series(0, 99) g")  # fmt: skip
        conn.execute("SELECT lo_create(700500); SELECT lo_put(700500, 10 * 2048, 'tail')")
    assert run("dump", "-d", src, "-o", str(tmp_path / "base")).exit_code == 0
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_put(700000 + g, 0, 'v2') FROM generate_series(0, 9) g")
        conn.execute("SELECT lo_unlink(700099); SELECT lo_from_bytea(700200, 'new')")
    top = tmp_path / "top"
    assert run("dump", "-d", src, "-o", str(top), "--since", str(tmp_path / "base")).exit_code == 0
    target = new_db(pg17)
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(700000 + g, 'theirs') FROM generate_series(0, 99) g")
    result = run("restore", str(top), "-d", target, "--remap", "all", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    want = state(src)
    assert record["remapped"] == len(want) == 101
    now = state(target)
    pairs = {int(o): int(n) for o, n in _pairs(target, record["run"])}
    assert {old: now[new] for old, new in pairs.items()} == want
    assert all(now[o][0] == b"theirs" for o in range(700_000, 700_100))
    with psycopg.connect(target) as conn:
        pages = conn.execute(
            "SELECT count(*) FROM pg_largeobject WHERE loid = %s", (pairs[700_500],)
        ).fetchone()
    assert pages == (1,)  # the hole stays a hole: one page, the tail's


def _pairs(db: str, run_id: str) -> list[tuple[int, int]]:
    with psycopg.connect(db) as conn:
        return conn.execute(
            "SELECT old::int8, new::int8 FROM pgblobdump_remap.map WHERE run = %s", (run_id,)
        ).fetchall()


def test_the_json_map_is_every_pair(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    """--json's ``map`` runs, expanded, are exactly the map table's pairs, also when the
    taken OIDs and the kept ones interleave (800001, 800003-800004 taken of 800000-800009)."""
    src, target = new_db(pg17), new_db(pg17)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(800000 + g, 'x') FROM generate_series(0, 9) g")
    assert run("dump", "-d", src, "-o", str(tmp_path / "a")).exit_code == 0
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(
            "SELECT lo_from_bytea(o, 'theirs') FROM unnest('{800001,800003,800004}'::oid[]) o"
        )
    result = run("restore", str(tmp_path / "a"), "-d", target, "--remap", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    expanded = [(o, n + (o - a)) for a, b, n in record["map"] for o in range(a, b + 1)]
    assert sorted(expanded) == sorted(_pairs(target, record["run"]))  # each pair once
    assert (record["mapped"], record["remapped"], record["kept_oid"]) == (10, 3, 7)
