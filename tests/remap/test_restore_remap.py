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
from tests.clirun import run
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
    out = tmp_path / "map.csv"
    result = run("restore", str(b.archive), "-d", target, "--remap", "--referenced-by",
                 "b_docs.lo", "--referenced-by", "b_docs.name", "--referenced-by", "b_docs.ref",
                 "--map-out", str(out), "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["remapped"] == COUNT and record["mode"] == "taken"
    assert [w["rows"] for w in record["rewrites"]] == [COUNT, COUNT, COUNT]
    with out.open() as f:
        pairs = {int(r["old_oid"]): int(r["new_oid"]) for r in csv.DictReader(f)}
    assert sorted(pairs) == sorted(b.los)
    assert min(pairs.values()) > max(a.los)
    assert _reads(target, "a_docs") == before_a
    b_bytes = {i: b.los[lo][0] for i, lo, _n, _r in b.rows}
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
