"""``export`` on a real server: every byte and its sha256, owners, ACLs and comments in
the manifest, names from rows (``/``, ``..``, unicode, duplicates) made safe and
reported with nothing written outside the target, --oids, --part, --jobs 2, sparse
LOs as sparse files, refusals before any LO is read."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import stat
from pathlib import Path

import psycopg

from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import fill, roles, state

DECORATED = {
    oid: (oid % 3000 if oid % 4 else 0, oid % 3, oid % 3, oid % 2 == 0)
    for oid in [*range(20_000, 20_040), 2**31 + 7, 2**32 - 2]
}
"""Empty and small LOs with every kind of owner, ACL and comment, OIDs past 2^31 too."""


def _manifest(out: Path, name: str = "manifest.csv") -> dict[int, dict[str, str]]:
    with open(out / name, newline="") as f:
        return {int(r["oid"]): r for r in csv.DictReader(f)}


def _files(out: Path) -> list[str]:
    found = (str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    return sorted(p for p in found if not p.startswith(".pgblobdump"))


def _sql(db: str, *statements: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def test_every_byte_owner_acl_comment_and_sha256_over_two_jobs(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    roles(pg17)
    db = new_db(pg17)
    fill(db, DECORATED)
    los = state(db)
    out = tmp_path / "out"
    result = run("export", "-d", db, "-o", str(out), "--jobs", "2", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["written"] == record["los"] == len(los)
    assert record["renamed"] == [] and "0600" in record["access"]
    rows = _manifest(out)
    assert sorted(rows) == sorted(los)
    for oid, (data, owner, acl, comment) in los.items():
        path = out / str(oid)
        assert path.read_bytes() == data
        r = rows[oid]
        assert r["path"] == str(oid) and int(r["size"]) == len(data)
        assert r["sha256"] == hashlib.sha256(data).hexdigest()
        assert r["owner"] == owner and r["comment"] == (comment or "")
        assert r["acl"] == ("{" + ",".join(acl) + "}" if acl else "")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    doc = json.loads((out / "manifest.json").read_text())
    assert doc["los"] == len(los) and len(doc["objects"]) == len(los)
    # run again: complete already, nothing written, nothing changed
    again = run("export", "-d", db, "-o", str(out), "--json")
    assert again.exit_code == 0 and "complete already" in again.stderr
    assert json.loads(again.stdout)["written"] == 0


def test_names_from_rows_made_safe_reported_and_kept_inside(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    db = new_db(pg17)
    _sql(
        db,
        "SELECT lo_from_bytea(o, convert_to(o::text, 'UTF8')) FROM generate_series(30001, 30012) o",
        "CREATE TABLE docs (id int, tenant text, filename text, body oid)",
        "CREATE TABLE thumbs (t text)",
        """INSERT INTO docs VALUES
           (1, 'acme', 'a/b.pdf', 30001),
           (2, '..', '../../escaped', 30002),
           (3, 'Ünïcødé', '文件.txt', 30003),
           (4, 'acme', 'dup.pdf', 30004),
           (5, 'acme', 'dup.pdf', 30005),
           (6, '/abs', 'x', 30006),
           (7, 'acme', 'a', 30007),
           (8, 'z', 'first', 30008), (9, 'a', 'second', 30008),
           (10, 'acme', 'manifest.csv', 30009), (11, NULL, 'manifest.csv', 30010),
           (12, 'c', E'tab\\there', 30011)""",
        "INSERT INTO thumbs VALUES ('30012.png')",
    )
    out = tmp_path / "target" / "out"
    result = run("export", "-d", db, "-o", str(out), "--referenced-by", "docs.body",
                 "--referenced-by", "thumbs.t", "--name", "{docs.tenant}/{docs.filename}",
                 "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = _manifest(out)
    paths = {o: r["path"] for o, r in rows.items()}
    assert paths == {
        30001: "acme/a/b.pdf",
        30002: "_../_../_../escaped",
        30003: "Ünïcødé/文件.txt",
        30004: "acme/dup.pdf",
        30005: "acme/dup~30005.pdf",
        30006: "abs/x",
        30007: "acme/a~30007",  # a file where acme/a/b.pdf needs a directory
        30008: "a/second",  # two rows: the name that sorts first
        30009: "acme/manifest.csv",
        30010: "_manifest.csv",
        30011: "c/tab_here",
        30012: "30012",  # no row of docs: by its OID
    }
    for oid, path in paths.items():
        assert (out / path).read_bytes() == str(oid).encode()
    assert _files(out) == sorted([*paths.values(), "manifest.csv", "manifest.json"])
    assert sorted(p.name for p in (tmp_path / "target").iterdir()) == ["out"]  # nothing outside
    assert json.loads(rows[30008]["row"]) == {"docs.tenant": "a", "docs.filename": "second"}
    assert rows[30008]["rows"] == "2" and rows[30012]["row"] == ""
    renamed = {r["oid"]: r["why"] for r in json.loads(result.stdout)["renamed"]}
    assert set(renamed) == {30002, 30005, 30006, 30007, 30010, 30011, 30012}
    assert renamed[30005] == "same name as another LO" and rows[30005]["renamed"] == renamed[30005]
    assert "no row of docs references it" in renamed[30012]
    assert "LO 30002 written as _../_../_../escaped (..)" in result.stderr


def test_oids_part_and_jobs(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    db = new_db(pg17)
    _sql(db, "SELECT lo_from_bytea(o, convert_to(repeat(o::text, 100), 'UTF8'))"
             " FROM generate_series(40000, 40999) o")  # fmt: skip
    some = tmp_path / "some"
    result = run("export", "-d", db, "-o", str(some), "--oids", "40100-40199", "--name",
                 "lo-{oid}.bin")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert _files(some) == sorted([*(f"lo-{o}.bin" for o in range(40100, 40200)),
                                   "manifest.csv", "manifest.json"])  # fmt: skip
    both = tmp_path / "both"
    for k in (1, 2):
        r = run("export", "-d", db, "-o", str(both), "--part", f"{k}/2", "--jobs", "2")
        assert r.exit_code == 0, r.stderr
    one, two = _manifest(both, "manifest-1-of-2.csv"), _manifest(both, "manifest-2-of-2.csv")
    assert not set(one) & set(two) and sorted({*one, *two}) == list(range(40000, 41000))
    assert 400 < len(one) < 600
    assert (both / "40500").read_bytes() == b"40500" * 100


def test_a_sparse_lo_is_a_sparse_file(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    db = new_db(pg17)
    _sql(
        db,
        "SELECT lo_create(50001), lo_put(50001, 0, 'head'), lo_put(50001, 900000, 'tail')",
        "SELECT lo_create(50002), lo_put(50002, 8000000, 'far')",  # over 1 MiB: ranges
    )
    out = tmp_path / "out"
    result = run("export", "-d", db, "-o", str(out))
    assert result.exit_code == 0, result.stderr
    small, big = out / "50001", out / "50002"
    assert small.read_bytes() == b"head" + bytes(900000 - 4) + b"tail"
    assert big.read_bytes() == bytes(8000000) + b"far"
    assert small.stat().st_blocks * 512 < 100_000
    assert big.stat().st_blocks * 512 < 100_000
    rows = _manifest(out)
    assert rows[50002]["sha256"] == hashlib.sha256(bytes(8000000) + b"far").hexdigest()


def test_refused_before_any_lo_is_read(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    db = new_db(pg17)
    _sql(db, "SELECT lo_from_bytea(60001, 'x')")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    assert_one_line_error(run("export", "-d", db, "-o", str(theirs)), 2,
                          "holds files this export did not write")  # fmt: skip
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"]
    out = tmp_path / "out"
    assert run("export", "-d", db, "-o", str(out), "--oids", "1-100").exit_code == 0
    assert_one_line_error(run("export", "-d", db, "-o", str(out), "--oids", "1-100", "--name",
                              "x{oid}"), 2,
                          "holds another export (its template")  # fmt: skip
    assert_one_line_error(run("export", "-d", db, "-o", str(tmp_path / "o2"), "--name", "{a.b}"),
                          2, "no --referenced-by")  # fmt: skip
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert_one_line_error(run("export", "-d", db, "-o", str(a_file)), 11, str(a_file))
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o500)
    if os.geteuid() != 0:
        assert_one_line_error(run("export", "-d", db, "-o", str(ro)), 11, str(ro))


def test_a_refused_export_leaves_no_directory_it_made(tmp_path: Path) -> None:
    out = tmp_path / "new"
    dead = "host=/nonexistent-socket-dir port=1 dbname=x"
    assert_one_line_error(run("export", "-d", dead, "-o", str(out)), 3, "cannot connect")
    assert not out.exists()  # made for the run, left empty: removed
    out.mkdir()
    (out / "keep").write_bytes(b"mine")
    assert_one_line_error(run("export", "-d", dead, "-o", str(out)), 3, "cannot connect")
    assert (out / "keep").read_bytes() == b"mine"  # one that was there: as it was
