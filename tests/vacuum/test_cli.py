"""inspect and vacuum as a user meets them: outputs, refusals (one line, exit code), and
--archive-to's archive that restore brings back."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.vacuum import archive as varchive
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.vacuum.test_safety import los, setup


def test_inspect_reports_counts_columns_orphans_and_predictions(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    setup(db, "CREATE TABLE t (x oid)", "INSERT INTO t VALUES (1), (2), (99)",
          "SELECT lo_put(3, 1048576, 'x')", "COMMENT ON LARGE OBJECT 3 IS 'c'", n=4)  # fmt: skip
    r = run("inspect", "-d", db, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["los"], doc["orphans"], doc["dangling"], doc["with_comment"]) == (4, 2, 1, 1)
    assert doc["sparse"] == 1 and doc["sparse_sample"] == [3]
    assert doc["size_bytes"] == 1048577
    assert [b["los"] for b in doc["histogram"]][:5] == [3, 0, 0, 0, 1]
    assert doc["columns"] == [{"column": "public.t.x", "type": "oid", "kind": "oid",
                               "references": 3, "dangling": 1, "hidden": "",
                               "populated": True}]  # fmt: skip
    tools = {p["tool"] for p in doc["predictions"]}
    assert {"pg_dump 16 -Fc", "pg_dump 17 -Fd", "pg_restore 18 -Fc, one job"} <= tools
    md = run("inspect", "-d", db, "--markdown")
    assert md.exit_code == 0 and "| orphans | 2 |" in md.stdout
    # each line once, its OIDs named, no Python list
    assert md.stdout.count("over 1 GiB") == 1 and "[" not in md.stdout, md.stdout
    assert "| sparse (holes never written) | 1 (OID 3) |" in md.stdout, md.stdout
    assert " peak, 1 file, " in md.stdout and "1 files" not in md.stdout
    # Before: "|   up to 4 KiB |", whose indent Markdown drops; and "0 s" for a prediction
    # under half a second.
    assert "| LOs empty | 3 (" in md.stdout and "| LOs of 1-16 MiB | 1 (" in md.stdout
    assert "|  " not in md.stdout, md.stdout
    assert "| predicted pg_dump 17 -Fc | <1 s, " in md.stdout, md.stdout
    assert " 0 s," not in md.stdout, md.stdout


def test_whole_seconds() -> None:
    from pgblobdump.cli.vacuum import whole_seconds

    assert [whole_seconds(s) for s in (0.0, 0.4, 0.5, 0.51, 12.4, 1234.0)] == [
        "<1 s", "<1 s", "<1 s", "1 s", "12 s", "1,234 s"
    ]  # fmt: skip


def test_vacuum_refusal_is_one_line_exit_13(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """Another live session's temporary table with an oid column: its rows are in that
    backend's memory alone. vacuum used to remove every LO only such a table named."""
    db = new_db(pg17)
    setup(db, n=3)
    with psycopg.connect(db, autocommit=True) as other:
        other.execute("CREATE TEMP TABLE mine (o oid)")
        other.execute("INSERT INTO mine VALUES (1), (2), (3)")
        temp = other.execute("SELECT pg_my_temp_schema()::regnamespace::text").fetchone()
        assert temp is not None
        r = run("vacuum", "-d", db, "--min-age", "0")
        assert_one_line_error(r, 13, f"{temp[0]}.mine.o (another session's temporary table")
        assert los(db) == {1, 2, 3}
        r = run("inspect", "-d", db, "--json")
        assert "1 column not seen whole" in " ".join(json.loads(r.stdout)["notes"])
    assert run("vacuum", "-d", db, "--min-age", "0").exit_code == 0  # it has ended
    assert los(db) == set()
    assert_one_line_error(run("vacuum", "-d", db, "--min-age", "soon"), 2, "not a duration")


def test_composite_columns_are_read_through_their_attributes(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A composite, a domain over it, an array of it, a range over oid: typed references
    read exactly, no longer refused until named."""
    db = new_db(pg17)
    setup(db, "CREATE TYPE pair AS (a int, o oid)", "CREATE DOMAIN pairs AS pair[]",
          "CREATE TYPE oidspan AS RANGE (subtype = oid)",
          "CREATE TABLE c (v pair, w pairs, s oidspan)",
          "INSERT INTO c VALUES ((0, 1), ARRAY[(0, 2)::pair, NULL], oidspan(3, 4, '[]'))",
          n=6)  # fmt: skip
    r = run("inspect", "-d", db, "--json")
    cols = {c["column"]: c["references"] for c in json.loads(r.stdout)["columns"]}
    assert cols == {"public.c.v": 1, "public.c.w": 1, "public.c.s": 2}
    assert run("vacuum", "-d", db, "--min-age", "0").exit_code == 0
    assert los(db) == {1, 2, 3, 4}


def test_dry_run_lists_and_changes_nothing(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    setup(db, "CREATE TABLE t (x oid)", "INSERT INTO t VALUES (2)", n=3)
    r = run("vacuum", "-d", db, "--min-age", "0", "--dry-run")
    assert r.exit_code == 0 and r.stdout.split() == ["oid", "1", "3"], r.output
    doc = json.loads(run("vacuum", "-d", db, "--min-age", "0", "--dry-run", "--json").stdout)
    assert doc["oids"] == [1, 3] and doc["removed"] == 0
    # its progress says what it does: it finds them ("removing orphans" before)
    shown = run("--progress", "vacuum", "-d", db, "--min-age", "0", "--dry-run").stderr
    assert "finding orphans: " in shown and "removing" not in shown, shown
    assert los(db) == {1, 2, 3}
    with psycopg.connect(db, autocommit=True) as c:  # a dry run records no horizon
        assert c.execute("SELECT to_regclass('pgblobdump.vacuum_horizons')").fetchone() == (None,)


def test_archive_to_then_restore_brings_them_back(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    db = new_db(pg17)
    setup(db, "CREATE TABLE t (x oid)", "INSERT INTO t VALUES (2)",
          "SELECT lo_put(1, 0, 'one'), lo_put(3, 0, 'three')", n=3)  # fmt: skip
    out = tmp_path / "orphans.pbd"
    r = run("vacuum", "-d", db, "--min-age", "0", "--archive-to", str(out), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["archived"] == 2 and los(db) == {2}
    assert run("restore", str(out), "-d", db).exit_code == 0
    with psycopg.connect(db, autocommit=True) as c:
        assert c.execute("SELECT lo_get(3)").fetchone() == (b"three",)
    with psycopg.connect(db, autocommit=True) as c:  # the selection table is gone again
        assert c.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'pgblobdump'"
                         " AND tablename LIKE 'vacuum_archive%'").fetchone() == (0,)  # fmt: skip


def test_archive_to_a_taken_place_or_a_bad_archive_removes_nothing(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg17)
    setup(db, n=2)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    assert_one_line_error(
        run("vacuum", "-d", db, "--min-age", "0", "--archive-to", str(taken)), 11, "not an empty"
    )
    assert los(db) == {1, 2}

    real = varchive.check_archive

    def damaged(a: object) -> object:
        check = real(a)  # type: ignore[arg-type]
        check.problems.append("lo-000001.pbv: damaged")
        return check

    monkeypatch.setattr(varchive, "check_archive", damaged)
    r = run("vacuum", "-d", db, "--min-age", "0", "--archive-to", str(tmp_path / "new"))
    last = r.stderr.strip().splitlines()[-1]  # after the run's progress notes
    assert r.exit_code == 7 and last.startswith("Error: ") and "nothing removed" in last
    assert los(db) == {1, 2}


def test_archive_to_a_full_disk_removes_nothing(
    pg17: EmbeddedCluster, new_db: NewDb, small_disk: Path
) -> None:
    """--archive-to onto a real full disk (a 2 MiB tmpfs; the orphans hold 3.2 MB of
    bytes zstd cannot shrink): one line, exit 10, every orphan still there, no archive left."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute(
            "SELECT lo_from_bytea(o, (SELECT decode(string_agg(md5(o || ':' || i), ''),"
            " 'hex') FROM generate_series(1, 2000) i)) FROM generate_series(1, 100) o"
        )
    r = run("vacuum", "-d", db, "--min-age", "0", "--archive-to", str(small_disk / "orphans"))
    last = r.stderr.strip().splitlines()[-1]
    assert r.exit_code == 10 and last.startswith("Error: ") and "full" in last, r.stderr
    assert los(db) == set(range(1, 101))
    assert list(small_disk.iterdir()) == []


def test_archive_to_keeps_an_orphan_written_to_after_it_was_archived(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An orphan someone writes to between its archiving and its removal holds bytes the
    archive has not: it is kept; the others go, and restore brings them back."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("SELECT lo_from_bytea(o, 'old') FROM generate_series(1, 3) o")
    real = varchive.archive_candidates

    def then_write(*args: object, **kwargs: object) -> object:
        got = real(*args, **kwargs)  # type: ignore[arg-type]
        with psycopg.connect(db, autocommit=True) as c:
            c.execute("SELECT lo_put(2, 0, 'new')")
        return got

    monkeypatch.setattr(varchive, "archive_candidates", then_write)
    r = run("vacuum", "-d", db, "--min-age", "0", "--archive-to", str(tmp_path / "a"), "--json")
    assert r.exit_code == 0, r.output
    assert los(db) == {2}
    with psycopg.connect(db) as c:
        assert c.execute("SELECT lo_get(2)").fetchone() == (b"new",)


def test_too_young_orphans_are_told_when_they_will_be_old_enough(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """No commit timestamps: the first dry run cannot tell any orphan's age. It says what
    to run and from when, instead of a note about horizon samples; after a run that
    records, a dry run says from when the orphans made before it go."""
    db = new_db(pg17)
    setup(db, n=5)
    first = run("vacuum", "-d", db, "--dry-run")
    line = first.stderr.strip().splitlines()[-1]
    assert line.startswith("would remove 0 of 5 orphans; kept 5 as younger than --min-age 1 h"
                           " (no earlier run recorded"), line  # fmt: skip
    assert "run vacuum without --dry-run now" in line and "(1 h later)" in line, line
    assert "horizon" not in line and "frozen" not in line, line
    real = run("vacuum", "-d", db, "--json")
    assert real.exit_code == 0 and los(db) == {1, 2, 3, 4, 5}, real.output
    assert json.loads(real.stdout)["old_enough"].endswith(
        "(1 h from now) removes the orphans made before now"), real.stdout  # fmt: skip
    again = run("vacuum", "-d", db, "--dry-run", "--json")
    doc = json.loads(again.stdout)
    with psycopg.connect(db, autocommit=True) as c:
        row = c.execute("SELECT to_char(taken_at, 'YYYY-MM-DD HH24:MI TZ'), to_char(taken_at"
                        " + interval '1 hour', 'YYYY-MM-DD HH24:MI TZ')"
                        " FROM pgblobdump.vacuum_horizons").fetchone()  # fmt: skip
    assert row is not None
    assert doc["young"] == 5 and doc["old_enough"] == (
        f"those made before {row[0]} are old enough from {row[1]}"
    )


def test_its_own_horizon_table_is_no_reference(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """vacuum's state table keeps the database's OID with each horizon sample; an orphan
    whose OID equals it was kept by that row as if an application named it."""
    import time

    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute(
            "SELECT lo_create(oid) FROM pg_database WHERE datname = current_database()"
        ).fetchone()
        assert row is not None
        dboid = int(row[0])
    first = run("vacuum", "-d", db, "--min-age", "1s", "--json")  # records a sample
    assert first.exit_code == 0 and json.loads(first.stdout)["removed"] == 0, first.output
    time.sleep(1.5)
    again = run("vacuum", "-d", db, "--min-age", "1s", "--json")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert doc["removed"] == 1 and los(db) == set(), doc
    assert doc["columns"] == 0, dboid  # no reference column at all
    inspected = json.loads(run("inspect", "-d", db, "--json").stdout)
    assert not [c for c in inspected["columns"] if "vacuum_horizons" in c["column"]]
