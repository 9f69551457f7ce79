"""`pgblobdump verify`: a sound archive passes; damage is named; against a database,
LOs missing, extra and differing (bytes, owner, comment) are listed by OID, exit 1."""

from __future__ import annotations

import csv as csv_module
import io
import json
import shutil
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

from pgblobdump.cli import cli
from pgblobdump.packed import DumpRequest
from pgblobdump.packed.dump.run import dump
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from tests.conftest import NewDb
from tests.losets import fill, roles


def _verify(*args: str) -> Result:
    return CliRunner().invoke(cli, ["verify", *args])


@pytest.fixture
def dumped(pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> tuple[str, Path]:
    roles(pg16)
    db = new_db(pg16)
    # small LOs in runs, an empty one, a 2.5 MiB one (three pieces), owners, ACLs, comments
    fill(db, {oid: (oid % 3000, oid % 3, oid % 3, oid % 5 == 0) for oid in range(70_000, 70_400)})
    fill(db, {80_000: (0, 0, 0, False), 80_001: (5 << 19, 1, 2, True)})
    path = tmp_path / "a"
    dump(db, DumpRequest(), storage=LocalDirectory(path, create=True))
    return db, path


def test_a_sound_archive_and_an_equal_database(dumped: tuple[str, Path]) -> None:
    db, path = dumped
    alone = _verify(str(path), "--json")
    assert alone.exit_code == 0, alone.output
    assert json.loads(alone.stdout)["los"] == 402
    against = _verify(str(path), "-d", db)
    assert against.exit_code == 0, against.output
    assert "the database holds the archive's 402 LOs, equal" in against.stderr
    # the archive's counts and the verdict on stdout, not only on stderr
    assert "archive is sound; the database equals it" in against.stdout
    assert "LOs missing from the database" in against.stdout


def test_an_equal_database_in_every_format(dumped: tuple[str, Path]) -> None:
    # Before: --json and --csv printed nothing on stdout when the database was equal.
    db, path = dumped
    doc = json.loads(_verify(str(path), "-d", db, "--json").stdout)
    assert doc["los"] == 402 and doc["files"] >= 3 and doc["bytes"] > 0
    assert (doc["differences"], doc["missing"], doc["extra"], doc["differs"]) == ([], 0, 0, 0)
    assert _verify(str(path), "-d", db, "--csv").stdout == "oid,what,detail\n"
    assert _verify(str(path), "-d", db, "--markdown").stdout.startswith("| oid | what | detail |")


def test_differences_by_oid(dumped: tuple[str, Path]) -> None:
    db, path = dumped
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT lo_unlink(70001)")
        conn.execute("SELECT lo_put(70002, 0, 'x')")  # same size, other bytes
        conn.execute("SELECT lo_put(80001, 5 << 19, 'more')")  # the large one grows
        conn.execute("ALTER LARGE OBJECT 70003 OWNER TO pgbd_t_owner")
        conn.execute("COMMENT ON LARGE OBJECT 70004 IS 'changed'")
        conn.execute("SELECT lo_create(90000)")
    result = _verify(str(path), "-d", db, "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert (doc["los"], doc["missing"], doc["extra"], doc["differs"]) == (402, 1, 1, 4)
    rows = {r["oid"]: (r["what"], r["detail"]) for r in doc["differences"]}
    owner = rows.pop(70003)  # ALTER ... OWNER rewrites the owner's ACL entry too
    assert owner[0] == "differs" and owner[1].startswith("owner pgbd_t_owner vs pgbd_t_reader, ACL")
    assert rows == {
        70001: ("missing", "in the archive, not in the database"),
        70002: ("differs", "same size, other bytes"),
        70004: ("differs", "comment"),
        80001: ("differs", f"{(5 << 19) + 4:,} bytes vs {5 << 19:,} in the archive"),
        90000: ("extra", "in the database, not in the archive"),
    }
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: the database differs from the archive: 6 differences (listed on stdout)"
    )


def test_one_difference_is_one(dumped: tuple[str, Path]) -> None:
    db, path = dumped
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT lo_unlink(70001)")
    result = _verify(str(path), "-d", db)
    assert result.exit_code == 1, result.output
    assert ": 1 difference (listed on stdout)" in result.stderr, result.stderr


@pytest.mark.parametrize("damage", ["flip", "truncate", "no manifest", "no index"])
def test_damage_is_named(dumped: tuple[str, Path], tmp_path: Path, damage: str) -> None:
    _db, src = dumped
    path = tmp_path / "copy"
    shutil.copytree(src, path)
    volume = next(path.glob("data-*.pbd"))
    if damage == "flip":
        raw = bytearray(volume.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        volume.write_bytes(bytes(raw))
        want = f"{volume.name}: damaged"
    elif damage == "truncate":
        with volume.open("r+b") as f:
            f.truncate(volume.stat().st_size - 100)
        want = volume.name
    elif damage == "no manifest":
        (path / "manifest.json").unlink()
        want = "no manifest.json: an interrupted dump"
    else:
        (path / "index.pbi").unlink()
        want = "index.pbi"
    result = _verify(str(path))
    assert result.exit_code == 7, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert want in lines[0]
    # Before: "(and 1 more)", saying neither what the other was nor what reads past it.
    assert "more)" not in lines[0]
    hint = "; restore --skip-damaged restores the LOs the damage spares"
    assert lines[0].endswith(hint) == (damage in ("flip", "truncate")), lines[0]
    if damage == "flip":  # the file's checksum, then the frame that reading met
        assert lines[0].count(f"{volume.name}: ") == 2 and "frame at byte" in lines[0]


def test_damage_is_reported_in_json_and_csv(dumped: tuple[str, Path], tmp_path: Path) -> None:
    # Before: --json and --csv printed nothing on stdout for a damaged archive, only the
    # error line on stderr.
    _db, src = dumped
    path = tmp_path / "copy"
    shutil.copytree(src, path)
    volume = next(path.glob("data-*.pbd"))
    raw = bytearray(volume.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    volume.write_bytes(bytes(raw))
    result = _verify(str(path), "--json")
    assert result.exit_code == 7, result.output
    doc = json.loads(result.stdout)
    assert doc["sound"] is False and doc["los"] == 402 and doc["bytes"] > 0
    assert doc["damaged_files"] == [volume.name]
    assert len(doc["damaged"]) == 1 and f"{volume.name} at byte " in doc["damaged"][0]["where"]
    assert "frame at byte" in doc["damaged"][0]["reason"]
    lost = doc["damaged"][0]["oids"]
    assert doc["damaged_los"] == len(lost) > 0 and all(isinstance(o, int) for o in lost)
    assert set(lost) <= set(range(70_000, 70_400)) | {80_000, 80_001}
    assert any("frame at byte" in p for p in doc["problems"])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "frame at byte" in lines[0]
    csv = _verify(str(path), "--csv")
    assert csv.exit_code == 7, csv.output
    (row,) = csv_module.DictReader(io.StringIO(csv.stdout))
    assert (row["los"], row["damaged_los"]) == ("402", str(len(lost)))  # raw, as JSON's
    assert row["damaged_files"] == volume.name
    assert row["damaged_oids"].startswith(f"{min(lost)}..")
    assert csv.stderr.startswith("Error: ")


def test_damaged_index_in_json(dumped: tuple[str, Path], tmp_path: Path) -> None:
    # which LOs are lost is unknown when the index is what is damaged: null, not 0
    _db, src = dumped
    path = tmp_path / "copy"
    shutil.copytree(src, path)
    (path / "index.pbi").unlink()
    result = _verify(str(path), "--json")
    assert result.exit_code == 7, result.output
    doc = json.loads(result.stdout)
    assert doc["damaged_los"] is None and doc["damaged"] == []
    assert doc["damaged_files"] == ["index.pbi"]
