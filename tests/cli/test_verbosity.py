"""What long commands say on stderr: progress with its total (``--progress`` off a
terminal), ``-v`` like pg_dump -v, ``-q`` nothing but errors; and summaries whose figures
are true (``files`` counts every file of the archive)."""

from __future__ import annotations

import json
from pathlib import Path

from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb

N = 20_000


def _source(pg17: EmbeddedCluster, new_db: NewDb) -> str:
    db = new_db(pg17)
    r = run("generate", "-d", db, "-n", str(N), "--size", "64", "--json", "-q")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""  # -q: no progress, no notes
    return db


def test_restore_progress_knows_its_total(pg17: EmbeddedCluster, new_db: NewDb,
                                          tmp_path: Path) -> None:  # fmt: skip
    """The issue's case: a restore of 20,000 LOs drew ``20000/0``; the total comes from
    the manifest before the first LO, with rate and ETA."""
    src = _source(pg17, new_db)
    archive = tmp_path / "a.pbd"
    dumped = run("dump", "-d", src, "-o", str(archive), "--json", "--progress")
    assert dumped.exit_code == 0, dumped.stderr
    assert f"dumping LOs: {N:,}/{N:,} LOs (100%)" in dumped.stderr, dumped.stderr  # a count
    r = run("restore", str(archive), "-d", new_db(pg17), "--json", "--progress")
    assert r.exit_code == 0, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"restoring LOs: {N:,}/{N:,} LOs (100%), 1.2 MiB/1.2 MiB, "), last
    assert "LOs/s" in last and "ETA 0:00:00" in last, last
    # Without --progress and off a terminal: not a line.
    quiet = run("restore", str(archive), "-d", new_db(pg17), "--json")
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr


def test_summaries_count_every_file(pg17: EmbeddedCluster, new_db: NewDb,
                                    tmp_path: Path) -> None:  # fmt: skip
    """dump said ``files 2`` for an archive of 3 (the manifest was left out); pack and
    verify too."""
    src = new_db(pg17)
    assert run("generate", "-d", src, "-n", "200", "--size", "100", "-q").exit_code == 0
    archive = tmp_path / "a.pbd"
    dumped = json.loads(run("dump", "-d", src, "-o", str(archive), "--json").stdout)
    on_disk = sorted(archive.iterdir())
    assert dumped["files"] == len(on_disk) == 3, on_disk
    assert dumped["archive_bytes"] == sum(p.stat().st_size for p in on_disk)
    checked = json.loads(run("verify", str(archive), "--json").stdout)
    assert checked["files"] == len(on_disk)

    assert run("unpack", str(archive), "-o", str(tmp_path / "d"), "-q").exit_code == 0
    packed = json.loads(
        run("pack", str(tmp_path / "d"), "-o", str(tmp_path / "p"), "--json").stdout
    )
    on_disk = sorted((tmp_path / "p").iterdir())
    assert packed["files"] == len(on_disk) == 4, on_disk  # volume, kept files, index, manifest
    assert packed["archive_bytes"] == sum(p.stat().st_size for p in on_disk)


def test_verbose_dump_and_restore_say_what_runs(pg17: EmbeddedCluster, new_db: NewDb,
                                                tmp_path: Path) -> None:  # fmt: skip
    src = _source(pg17, new_db)
    archive = tmp_path / "a.pbd"
    r = run("dump", "-v", "-d", src, "-o", str(archive), "--json")
    assert r.exit_code == 0, r.stderr
    err = r.stderr
    assert "pgblobdump: server: PostgreSQL 17." in err, err
    assert "application_name 'pgblobdump dump'" in err, err
    assert "max_locks_per_transaction 64" in err, err
    snapshot = json.loads(r.stdout)["snapshot"]
    assert f"pgblobdump: snapshot {snapshot}" in err, err
    assert "pgblobdump: SQL: SELECT pg_catalog.pg_export_snapshot()" in err, err
    assert "pgblobdump: SQL: COPY (" in err, err
    assert "pgblobdump: reading and packing the LOs: done in " in err, err
    assert "pgblobdump: 1 worker: all OIDs\n" in err, err  # not "1 worker(s): OIDs 0..4294967295"
    assert "pgblobdump: writing the index and the manifest: done in " in err, err
    assert all(line.startswith("pgblobdump: ") for line in err.splitlines()), err

    r = run("restore", "-v", str(archive), "-d", new_db(pg17), "--json")
    assert r.exit_code == 0, r.stderr
    assert "pgblobdump: lock budget: 64 x (" in r.stderr, r.stderr  # what batches are cut from
    assert "our transactions take at most 800 at once" in r.stderr, r.stderr  # 64 x 50 / 4
    assert "application_name 'pgblobdump restore'" in r.stderr, r.stderr
    assert "pgblobdump: restoring " in r.stderr and ": done in " in r.stderr, r.stderr
    assert f"pgblobdump: restored {N} LOs" in r.stderr, r.stderr

    # -v before the command works too; -vv logs every statement, repeats included.
    vv = run("-vv", "verify", str(archive), "-d", src, "--json")
    assert vv.exit_code == 0, vv.stderr
    assert "application_name 'pgblobdump verify'" in vv.stderr, vv.stderr
    # and without -v: the same run says only its result
    plain = run("verify", str(archive), "-d", src, "--json")
    assert plain.stderr == f"the database holds the archive's {N:,} LOs, equal\n", plain.stderr


def test_quiet_leaves_only_errors(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    src = _source(pg17, new_db)
    loud = run("dump", "-d", src, "-o", "-", "--progress")
    assert f"dumped {N:,} LOs" in loud.stderr, loud.stderr
    r = run("dump", "-q", "-d", src, "-o", "-", "--progress")
    assert r.exit_code == 0 and r.stderr == "", r.stderr
    # an error is still said, on one line
    missing = run("restore", "-q", str(tmp_path / "none"), "-d", src)
    assert_one_line_error(missing, 8, "no such archive")
