"""``verify ARCHIVE -d DB --map``: a restore --remap checked through its mapping, on a
real server: a clean one passes (where verify -d, by OID, fails), each change at a new
OID is named with its old and new OID (bytes, size, owner, ACL, comment, a missing LO, a
missing map row, a map row of no archive LO), the refusals, and an incremental chain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import Result

from pgblobdump.packed import DumpRequest
from pgblobdump.packed.dump.run import dump
from pgblobdump.remap import verify as remap_verify
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import fill, roles

SMALL = range(50_000, 50_060)
"""The source's small LOs; the target holds LOs at the first half of these OIDs."""
BIG_OID = 50_100
"""A 2.5 MiB LO (read in pieces, never whole)."""
EMPTY_OID = 50_101
TAKEN = range(50_000, 50_030)


def _fill_source(db: str) -> None:
    fill(db, {oid: (oid % 1500, oid % 3, oid % 3, oid % 4 == 0) for oid in SMALL})
    fill(db, {BIG_OID: (5 << 19, 1, 1, True), EMPTY_OID: (0, 2, 0, False)})


@pytest.fixture(scope="module")
def archive(pg17: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    roles(pg17)
    name = "verify_map_src"
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    db = pg17.conninfo(name)
    _fill_source(db)
    path = tmp_path_factory.mktemp("verify_map") / "a"
    dump(db, DumpRequest(), storage=LocalDirectory(path, create=True))
    yield path
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _sql(db: str, *statements: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def _target(pg17: EmbeddedCluster, new_db: NewDb) -> str:
    """A database whose LOs hold the first half of the archive's small OIDs."""
    db = new_db(pg17)
    _sql(db, *(f"SELECT lo_from_bytea({oid}, 'not the archive''s')" for oid in TAKEN))
    return db


def _remapped(db: str, path: Path, mode: str = "taken") -> dict[int, int]:
    """restore --remap of ``path`` into ``db``: its mapping, old -> new."""
    result = run("restore", str(path), "-d", db, "--remap", mode, "--json")
    assert result.exit_code == 0, result.output
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT old::int8, new::int8 FROM pgblobdump_remap.map").fetchall()
    return {int(o): int(n) for o, n in rows}


def _verify(path: Path, db: str, *more: str) -> Result:
    return run("verify", str(path), "-d", db, *more)


def _differences(result: Result) -> dict[int, tuple[int | None, str, str]]:
    doc = json.loads(result.stdout)
    return {r["oid"]: (r["new_oid"], r["what"], r["detail"]) for r in doc["differences"]}


@pytest.mark.parametrize("mode", ["taken", "all"])
def test_a_clean_remapped_restore_verifies(
    archive: Path, pg17: EmbeddedCluster, new_db: NewDb, mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    db = _target(pg17, new_db)
    pairs = _remapped(db, archive, mode)
    moved = {o for o, n in pairs.items() if o != n}
    assert moved == (set(TAKEN) if mode == "taken" else set(pairs))
    # by OID, the restore differs: the taken OIDs hold the target's own LOs
    assert _verify(archive, db).exit_code == 1
    monkeypatch.setattr(remap_verify, "BATCH", 7)  # many batches, one across the big LO
    result = _verify(archive, db, "--map", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["differences"], doc["missing"], doc["extra"], doc["differs"]) == ([], 0, 0, 0)
    assert doc["los"] == len(SMALL) + 2 and doc["map_run"]
    table = _verify(archive, db, "--map")
    assert table.exit_code == 0, table.output
    assert f"the database equals it (through remap run {doc['map_run']})" in table.stdout
    assert f"the archive's {len(SMALL) + 2} LOs, equal (through remap run" in table.stderr
    assert _verify(archive, db, "--map", "--csv").stdout == "oid,new_oid,what,detail\n"


def test_each_change_is_named_by_old_and_new_oid(
    archive: Path, pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _target(pg17, new_db)
    pairs = _remapped(db, archive, "all")
    n = {old: pairs[old] for old in pairs}
    _sql(
        db,
        f"SELECT lo_put({n[50_001]}, 0, 'x')",  # same size, other bytes
        f"SELECT lo_put({n[BIG_OID]}, {5 << 19}, 'more')",  # the big one grows
        f"SELECT lo_unlink({n[50_002]})",
        f"ALTER LARGE OBJECT {n[50_003]} OWNER TO pgbd_t_owner",  # was pgbd_t_granter's
        f"GRANT SELECT ON LARGE OBJECT {n[50_005]} TO pgbd_t_owner",
        f"COMMENT ON LARGE OBJECT {n[50_006]} IS 'changed'",
        f"DELETE FROM pgblobdump_remap.map WHERE old = {50_007}",  # restored, not mapped
        # a map row of an OID the archive does not hold (another archive's)
        "INSERT INTO pgblobdump_remap.map SELECT run, 49999, 49999 FROM pgblobdump_remap.runs",
    )
    monkeypatch.setattr(remap_verify, "BATCH", 5)
    result = _verify(archive, db, "--map", "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert (doc["missing"], doc["extra"], doc["differs"]) == (2, 1, 5)
    got = _differences(result)
    assert list(got) == sorted(got)  # in the archive's OID order
    run_id = doc["map_run"]
    owner = got.pop(50_003)  # ALTER ... OWNER rewrites the ACL's grantor too
    assert owner[:2] == (n[50_003], "differs") and owner[2].startswith(
        "owner pgbd_t_owner vs pgbd_t_granter"
    )
    acl = got.pop(50_005)
    assert acl[:2] == (n[50_005], "differs") and acl[2].startswith("ACL "), acl
    assert got == {
        50_001: (n[50_001], "differs", "same size, other bytes"),
        BIG_OID: (n[BIG_OID], "differs", f"{(5 << 19) + 4:,} bytes vs {5 << 19:,} in the archive"),
        50_002: (n[50_002], "missing", f"restored at {n[50_002]}, which holds no LO"),
        50_006: (n[50_006], "differs", "comment"),
        50_007: (None, "missing", f"no map row in run {run_id}: not restored"),
        49_999: (49_999, "extra", f"a map row of run {run_id}; the archive holds no LO 49999"),
    }
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: the database differs from the archive (through remap run {run_id}):"
        " 8 differences (listed on stdout)"
    )
    # the table and CSV name both OIDs too
    csv_out = _verify(archive, db, "--map", "--csv")
    assert csv_out.exit_code == 1
    assert f'50001,{n[50_001]},differs,"same size, other bytes"' in csv_out.stdout
    assert "50007,,missing," in csv_out.stdout


def test_refusals(archive: Path, pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    db = _target(pg17, new_db)
    assert_one_line_error(run("verify", str(archive), "--map"), 2, "--map checks a restore"
                          " --remap in a database: give it with -d DB")  # fmt: skip
    assert_one_line_error(_verify(archive, db, "--map-run", "x"), 2, "--map-run goes with --map")
    # no remap run here at all (no schema)
    assert_one_line_error(_verify(archive, db, "--map"), 8,
                          f"no restore --remap of {archive} in this database: restore it with"
                          " --remap first")  # fmt: skip
    # a remap run of another archive only
    other_src = new_db(pg17)
    _sql(other_src, "SELECT lo_from_bytea(50000, 'other')")
    other = tmp_path / "other"
    dump(other_src, DumpRequest(), storage=LocalDirectory(other, create=True))
    other_pairs = _remapped(db, other)
    assert other_pairs == {50_000: min(other_pairs.values())} and other_pairs[50_000] != 50_000
    assert_one_line_error(_verify(archive, db, "--map"), 8, "no restore --remap of")
    assert_one_line_error(_verify(archive, db, "--map", "--map-run", "nonesuch"), 8,
                          "no restore --remap run nonesuch in this database")  # fmt: skip
    # --map-run of the other archive's run: checked, and every row says so
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT run FROM pgblobdump_remap.runs").fetchone()
    assert row is not None
    other_run = str(row[0])
    result = _verify(archive, db, "--map", "--map-run", other_run, "--json")
    assert result.exit_code == 1, result.output
    assert f"run {other_run} restored {other}, not this archive" in result.stderr
    doc = json.loads(result.stdout)
    assert (doc["missing"], doc["extra"], doc["differs"]) == (len(SMALL) + 1, 0, 1)
    # this archive's run, unfinished: refused, naming --resume
    _remapped(db, archive)
    _sql(db, "UPDATE pgblobdump_remap.runs SET finished = NULL, phase = 'rewrite'"
             f" WHERE run <> '{other_run}'")  # fmt: skip
    assert_one_line_error(_verify(archive, db, "--map"), 4,
                          "did not finish: restore --remap --resume finishes it")  # fmt: skip
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT run FROM pgblobdump_remap.runs WHERE run <> %s", (other_run,)
        ).fetchone()
    assert row is not None
    assert_one_line_error(_verify(archive, db, "--map", "--map-run", str(row[0])), 4,
                          f"restore --remap run {row[0]} ({archive}) did not finish:"
                          " restore --remap --resume finishes it")  # fmt: skip
    _sql(db, "UPDATE pgblobdump_remap.runs SET finished = now(), phase = 'done'")
    assert _verify(archive, db, "--map").exit_code == 0


def test_an_incremental_chain_restored_remapped_verifies(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    roles(pg17)
    src = new_db(pg17)
    _fill_source(src)
    full, inc = tmp_path / "full", tmp_path / "inc"
    assert run("dump", "-d", src, "-o", str(full), "-q").exit_code == 0
    _sql(
        src,
        "SELECT lo_put(50010, 0, 'changed')",
        "SELECT lo_unlink(50011)",
        "SELECT lo_from_bytea(50200, 'a new one')",
        "ALTER LARGE OBJECT 50012 OWNER TO pgbd_t_owner",  # was pgbd_t_granter's
        "COMMENT ON LARGE OBJECT 50013 IS 'now commented'",
    )
    got = run("dump", "-d", src, "-o", str(inc), "--since", str(full), "-q")
    assert got.exit_code == 0, got.output
    db = _target(pg17, new_db)
    pairs = _remapped(db, inc)
    assert sorted(pairs) == sorted([*SMALL[:11], *SMALL[12:], BIG_OID, EMPTY_OID, 50_200])
    result = _verify(inc, db, "--map", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["los"] == len(pairs)
    # the restore is the incremental's snapshot, not the full's: the full one differs
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT run FROM pgblobdump_remap.runs").fetchone()
    assert row is not None
    stale = _verify(full, db, "--map", "--map-run", str(row[0]), "--json")
    assert stale.exit_code == 1, stale.output
    got_rows = _differences(stale)
    assert got_rows[50_011][1:] == ("missing", f"no map row in run {row[0]}: not restored")
    assert got_rows[50_200][1] == "extra"
    assert {o for o, (_n, what, _d) in got_rows.items() if what == "differs"} == {
        50_010,
        50_012,
        50_013,
    }
