"""One exit code per condition whatever the command: the CLI as a user meets it, one
``Error:`` line on stderr, no traceback, nothing left behind."""

from __future__ import annotations

import csv
import io
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from pgblobdump.cli import cli
from pgblobdump.pg.names import clip, with_suffix
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb


# -- a missing table or column: 8 (not found) from every command that names one ----------
@pytest.fixture
def lo_db(pg16: EmbeddedCluster, new_db: NewDb) -> str:
    db = new_db(pg16)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, b oid)")
        conn.execute("INSERT INTO t VALUES (1, lo_from_bytea(0, 'x'))")
        conn.execute("CREATE TABLE nokey (b oid)")
    return db


@pytest.mark.parametrize(
    ("ref", "said"),
    [("nosuch.col", "no table nosuch"), ("t.nosuch", "no column t.nosuch"),
     ("public.nosuch.col", "no table public.nosuch")],
)  # fmt: skip
def test_dump_referenced_by_a_missing_table_or_column(
    lo_db: str, tmp_path: Path, ref: str, said: str
) -> None:
    out = tmp_path / "lobs.pbd"
    result = run("dump", "-d", lo_db, "-o", str(out), "--referenced-by", ref)
    assert_one_line_error(result, 8, said)
    assert not out.exists()


def test_dump_stream_referenced_by_a_missing_table(lo_db: str) -> None:
    result = run("dump", "-d", lo_db, "-o", "-", "--referenced-by", "nosuch.col")
    assert_one_line_error(result, 8, "no table nosuch")
    assert result.stdout_bytes == b""  # not a byte of a stream that cannot be whole


@pytest.mark.parametrize(
    ("args", "said"),
    [(["run", "nosuch.col"], "no table nosuch"),
     (["run", "t.nosuch"], "no column public.t.nosuch"),
     (["abort", "nosuch.col"], "no table nosuch"),
     (["abort", "t.nosuch"], "no column public.t.nosuch")],
)  # fmt: skip
def test_migrate_a_missing_table_or_column(lo_db: str, args: list[str], said: str) -> None:
    assert_one_line_error(run("migrate", args[0], "-d", lo_db, *args[1:]), 8, said)


def test_migrate_run_without_a_primary_key_is_refused_by_the_database(lo_db: str) -> None:
    result = run("migrate", "run", "-d", lo_db, "nokey.b")
    assert_one_line_error(result, 4, "has no primary key")


# -- a packed stream where a directory archive is needed: 7, naming the fix --------------
@pytest.fixture
def stream_file(lo_db: str, tmp_path: Path) -> Path:
    dumped = run("dump", "-d", lo_db, "-o", "-")
    assert dumped.exit_code == 0, dumped.stderr
    path = tmp_path / "lobs.stream"
    path.write_bytes(dumped.stdout_bytes)
    return path


@pytest.mark.parametrize(
    "args",
    [["ls", "S"], ["cat", "S", "16384"], ["verify", "S"], ["unpack", "S", "-o", "OUT"],
     ["unpack", "S", "-o", "OUT", "--format", "custom"],
     ["restore", "S", "-d", "DB", "--part", "1/2"], ["restore", "S", "-d", "DB", "--full"],
     ["restore", "S", "-d", "DB", "--skip-damaged"]],
)  # fmt: skip
def test_a_stream_where_a_directory_is_needed(
    stream_file: Path, lo_db: str, tmp_path: Path, args: list[str]
) -> None:
    out = tmp_path / "out"
    given = {"S": str(stream_file), "OUT": str(out), "DB": lo_db}
    result = run(*[given.get(a, a) for a in args])
    assert_one_line_error(result, 7, f"{stream_file} is a packed stream, not a directory archive")
    assert f"pgblobdump restore {stream_file} -d DB" in result.stderr
    assert not out.exists()


# -- an output under a directory that does not exist: 11, nothing created (as pg_dump) ---
@pytest.fixture
def packed_dir(lo_db: str, tmp_path: Path) -> Path:
    path = tmp_path / "lobs.pbd"
    assert run("dump", "-d", lo_db, "-o", str(path)).exit_code == 0
    return path


@pytest.fixture
def pg_dump_file(lo_db: str, tmp_path: Path) -> Path:
    path = tmp_path / "db.dump"
    pg_dump = toolchain.find(16).tool("pg_dump")
    subprocess.run([str(pg_dump), "-Fc", "-f", str(path), "-d", lo_db], check=True)
    return path


@pytest.mark.parametrize(
    "args",
    [["dump", "-d", "DB", "-o", "OUT"], ["pack", "PGDUMP", "-o", "OUT"],
     ["unpack", "PACKED", "-o", "OUT"], ["unpack", "PACKED", "-o", "OUT", "--format", "custom"],
     ["cat", "PACKED", "OID", "-o", "OUT"], ["toc", "extract", "PGDUMP", "OID", "-o", "OUT"]],
)  # fmt: skip
def test_no_parents_are_made_for_an_output(
    lo_db: str, packed_dir: Path, pg_dump_file: Path, tmp_path: Path, args: list[str]
) -> None:
    with psycopg.connect(lo_db) as conn:
        oid = conn.execute("SELECT b FROM t").fetchone()[0]  # type: ignore[index]
    out = tmp_path / "a" / "b" / "c"
    given = {"DB": lo_db, "OUT": str(out), "PACKED": str(packed_dir),
             "PGDUMP": str(pg_dump_file), "OID": str(oid)}  # fmt: skip
    result = run(*[given.get(a, a) for a in args])
    assert_one_line_error(result, 11, str(out))
    assert not (tmp_path / "a").exists()


# -- names the migration derives are cut by bytes, as the server cuts them ---------------
def test_clip_cuts_bytes_not_characters() -> None:
    assert clip("é" * 40) == "é" * 31  # 62 bytes: a 32nd 'é' would split at byte 63
    assert clip("a" * 70) == "a" * 63 and clip("short") == "short"
    assert with_suffix("é" * 40, "_lo") == "é" * 30 + "_lo"  # 63 bytes


# 28 'é': the column fits (56 bytes), but "<column>_pgbd_new" cut by characters was 65 bytes,
# so the state named a column the server had cut; 40 (80 bytes, the server cuts the column
# itself): "<column>_pgbd_new" and "<column>_lo" cut by characters became one name.
@pytest.mark.parametrize("length", [28, 40])
def test_migrate_a_long_non_ascii_column(lo_db: str, length: int) -> None:
    given = "é" * length
    stored = "é" * min(length, 31)  # the server's NAMEDATALEN - 1 = 63 bytes, whole characters
    with psycopg.connect(lo_db, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE TABLE u (id int PRIMARY KEY, {} oid)").format(sql.Identifier(given))
        )
        conn.execute("INSERT INTO u SELECT g, lo_from_bytea(0, 'v') FROM generate_series(1, 3) g")
    result = run("migrate", "run", "-d", lo_db, f'u."{stored}"', "--keep-old", "--json")
    assert result.exit_code == 0, result.stderr
    with psycopg.connect(lo_db) as conn:
        cols = dict(conn.execute(
            "SELECT attname, format_type(atttypid, NULL) FROM pg_attribute"
            " WHERE attrelid = 'u'::regclass AND attnum > 0 AND NOT attisdropped"
        ).fetchall())  # fmt: skip
        recorded = conn.execute(
            "SELECT new_column, old_column FROM pgblobdump.migrations"
        ).fetchone()
    assert recorded is not None
    old = recorded[1]  # the state names the column the server has, not a longer name
    assert cols == {"id": "integer", stored: "bytea", old: "oid"}
    assert old.endswith("_lo") and old.startswith("é" * 27)
    assert all(len(n.encode()) <= 63 for n in recorded)


# -- bench --csv carries raw numbers, as --json does; people's formats are for tables ----
def test_bench_csv_holds_raw_numbers(lo_db: str) -> None:
    result = run("bench", "read", "-d", lo_db, "--sizes", "2MB", "--chunk", "1MiB",
                 "--repeat", "1", "--csv")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows and {r["size"] for r in rows} == {"2000000"}  # not "2 MB"
    for r in rows:
        for key in ("median_ms", "min_ms", "max_ms", "mb_per_s", "vs_file"):
            float(r[key])  # not "1,234.5"
        assert float(r["min_ms"]) <= float(r["median_ms"]) <= float(r["max_ms"])
    result = run("bench", "toast", "-d", lo_db, "--lengths", "3000", "--rows", "10", "--csv")
    assert result.exit_code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows and {r["length"] for r in rows} == {"3000"}  # not "3,000"
    for r in rows:
        assert 0 <= float(r["compressed_share"]) <= 1  # not "40%"
        assert int(r["buffers_per_access"]) >= 0
        for key in ("bytes_per_row", "insert_mb_per_s", "substring_rows_per_s"):
            float(r[key])
    shown = run("bench", "toast", "-d", lo_db, "--lengths", "3000", "--rows", "10", "--markdown")
    assert "| 3,000 |" in shown.stdout  # people still get thousands separators


# -- the TOC reader: a file the OS will not read is 11; only its content makes 7 ---------
@pytest.fixture
def fd_archive(lo_db: str) -> Iterator[tuple[Path, int]]:
    """A pg_dump -Fd archive (uncompressed: blob_<oid>.dat) and one of its OIDs, in a
    folder every user may enter (pytest's own are root's alone), so that a test can read
    it as an unprivileged user."""
    with psycopg.connect(lo_db) as conn:
        oid = int(conn.execute("SELECT b FROM t").fetchone()[0])  # type: ignore[index]
    top = Path(tempfile.mkdtemp(prefix="pgbd-errors-"))
    try:
        top.chmod(0o777)
        path = top / "fd"
        pg_dump = toolchain.find(16).tool("pg_dump")
        subprocess.run([str(pg_dump), "-Fd", "-Z0", "-f", str(path), "-d", lo_db], check=True)
        path.chmod(0o755)
        assert (path / f"blob_{oid}.dat").is_file()
        yield path, oid
    finally:
        shutil.rmtree(top)


def _as_nobody(args: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of the CLI run in a forked child that has become ``nobody``:
    root reads any file whatever its mode, so EACCES needs another user. The command is
    run as root first by the caller, so every module it imports is loaded already (the
    interpreter's own files are under /root, which nobody may not read)."""
    nobody = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(nobody.pw_gid, nobody.pw_gid, nobody.pw_gid)
            os.setresuid(nobody.pw_uid, nobody.pw_uid, nobody.pw_uid)
            result = CliRunner().invoke(cli, args)
            os.write(w, json.dumps([result.exit_code, result.stderr]).encode())
        except BaseException:
            code = 99
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and out, "the child failed"
    code, stderr = json.loads(out)
    return int(code), str(stderr)


def _one_error(code: int, stderr: str, want: int, fragment: str) -> None:
    lines = stderr.strip().splitlines()
    assert code == want and len(lines) == 1, (code, stderr)
    assert lines[0].startswith("Error: ") and fragment in lines[0], lines[0]


@pytest.mark.skipif(os.geteuid() != 0, reason="becomes nobody, which needs root")
def test_permission_denied_is_11_not_a_damaged_archive(fd_archive: tuple[Path, int]) -> None:
    path, oid = fd_archive
    out = path.parent / "out"
    blob = path / f"blob_{oid}.dat"
    toc = path / "toc.dat"
    for args in (["toc", "summary", str(path)], ["pack", str(path), "-o", str(out)],
                 ["toc", "extract", str(path), str(oid)]):  # fmt: skip
        warm = CliRunner().invoke(cli, args)  # as root: the archive is sound, imports load
        assert warm.exit_code == 0, warm.output
        shutil.rmtree(out, ignore_errors=True)
    blob.chmod(0)
    code, err = _as_nobody(["pack", str(path), "-o", str(out)])
    _one_error(code, err, 11, f"cannot read {blob}: Permission denied")  # not "missing" (7)
    assert not out.exists()
    code, err = _as_nobody(["toc", "extract", str(path), str(oid)])
    _one_error(code, err, 11, f"cannot read {blob}: Permission denied")
    toc.chmod(0)
    code, err = _as_nobody(["toc", "summary", str(path)])
    _one_error(code, err, 11, f"cannot read {toc}: Permission denied")  # not "not an archive"


def test_an_lo_file_that_is_a_directory_is_11(fd_archive: tuple[Path, int]) -> None:
    """EISDIR, which root meets too: the file is there but cannot be read."""
    path, oid = fd_archive
    blob = path / f"blob_{oid}.dat"
    blob.unlink()
    out = path.parent / "out"
    gone = run("pack", str(path), "-o", str(out))  # missing: the archive is damaged
    assert_one_line_error(gone, 7, f"large object {oid} has no data file")
    blob.mkdir()
    assert_one_line_error(run("pack", str(path), "-o", str(out)), 11, f"cannot read {blob}")
    assert not out.exists()
    result = run("toc", "extract", str(path), str(oid), "-o", str(path.parent / "lo.bin"))
    assert_one_line_error(result, 11, f"cannot read {blob}: Is a directory")


def test_an_lo_file_that_cannot_be_stat_ed_is_11_not_missing(
    fd_archive: tuple[Path, int],
) -> None:
    """A symbolic link to itself (ELOOP): there, but unreadable; it used to count as
    missing, so the archive was called damaged."""
    path, oid = fd_archive
    blob = path / f"blob_{oid}.dat"
    blob.unlink()
    blob.symlink_to(blob.name)
    for args in (["toc", "los", str(path)], ["toc", "summary", str(path)],
                 ["pack", str(path), "-o", str(path.parent / "out")]):  # fmt: skip
        assert_one_line_error(run(*args), 11, f"{blob}: Too many levels of symbolic links")
    blob.unlink()
    (lists,) = path.glob("blobs*.toc")  # the list of LO files, found by its size (a stat)
    lists.unlink()
    lists.symlink_to(lists.name)
    assert_one_line_error(run("toc", "los", str(path)), 11, f"{lists}: Too many levels")


@pytest.mark.parametrize("args", [["ls", "-"], ["verify", "-"], ["cat", "-", "1"]])
def test_standard_input_where_a_directory_is_needed(args: list[str]) -> None:
    result = run(*args)
    assert_one_line_error(result, 2, "- (standard input) is read as a stream")


def test_migrate_and_toc_summary_csv_hold_raw_numbers(lo_db: str) -> None:
    with psycopg.connect(lo_db, autocommit=True) as conn:
        conn.execute("CREATE TABLE many (id int PRIMARY KEY, b oid)")
        conn.execute(
            "INSERT INTO many SELECT g, lo_from_bytea(0, convert_to(repeat('x', 1000), 'UTF8'))"
            " FROM generate_series(1, 1500) g"
        )
    result = run("migrate", "plan", "-d", lo_db, "--csv")
    assert result.exit_code == 0, result.stderr
    (row,) = [
        r for r in csv.DictReader(io.StringIO(result.stdout)) if r["column"] == "public.many.b"
    ]
    assert (row["rows"], row["LOs"], row["bytes"]) == ("1500", "1500", "1500000")  # not "1.4 MiB"
    shown = run("migrate", "plan", "-d", lo_db)
    assert "1,500" in shown.stdout and "1.4 MiB" in shown.stdout  # people get them formatted
    result = run("migrate", "run", "-d", lo_db, "many.b", "--csv")
    assert result.exit_code == 0, result.stderr
    (row,) = csv.DictReader(io.StringIO(result.stdout))
    assert row["rows"] == "1500" and row["column"] == "public.many.b"
    path = Path(tempfile.mkdtemp(prefix="pgbd-errors-")) / "fd"
    try:
        pg_dump = toolchain.find(16).tool("pg_dump")
        subprocess.run([str(pg_dump), "-Fd", "-f", str(path), "-d", lo_db], check=True)
        result = run("toc", "summary", str(path), "--csv")
        assert result.exit_code == 0, result.stderr
        (row,) = csv.DictReader(io.StringIO(result.stdout))
        assert row["lo_count"] == "1501" and int(row["archive_bytes"]) > 0  # not "1,501"
        shown = run("toc", "summary", str(path)).stdout  # people get sizes in MiB, not bytes
        assert re.search(r"LO data stored +│ [\d.]+ KiB for 1,501 LOs ", shown), shown
        assert re.search(r"archive size +│ [\d.]+ [KM]iB ", shown), shown
    finally:
        shutil.rmtree(path.parent)


def test_a_missing_results_folder_is_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nosuch"  # 8 as any missing path, not click's "does not exist" (2)
    result = run("compare", "--render", str(missing))
    assert_one_line_error(result, 8, f"{missing}: no such results folder")


def test_a_packed_archive_given_to_pack_or_toc_says_what_it_is(
    stream_file: Path, packed_dir: Path
) -> None:
    for args in (["pack", str(stream_file), "-o", str(stream_file.parent / "out")],
                 ["toc", "summary", str(stream_file)]):  # fmt: skip
        assert_one_line_error(run(*args), 7, "it looks like a pgblobdump packed stream")
    for args in (["pack", str(packed_dir), "-o", str(packed_dir.parent / "out")],
                 ["toc", "los", str(packed_dir)]):  # fmt: skip
        assert_one_line_error(run(*args), 7, "it is a pgblobdump packed archive (ls, cat,")


def test_an_io_error_reading_the_archive_is_11() -> None:
    """/proc/self/mem: a regular file that reports no size, whose first read fails (EIO)."""
    if not Path("/proc/self/mem").exists():
        pytest.skip("no /proc")
    result = run("toc", "summary", "/proc/self/mem")
    assert_one_line_error(result, 11, "/proc/self/mem: cannot be read as a file: Input/output")


@pytest.mark.skipif(os.geteuid() != 0, reason="becomes nobody, which needs root")
def test_an_unreadable_results_file_is_11_not_7() -> None:
    top = Path(tempfile.mkdtemp(prefix="pgbd-errors-"))
    try:
        top.chmod(0o755)
        results = top / "results.json"
        results.write_text("{}")
        args = ["compare", "--render", str(top)]
        warm = CliRunner().invoke(cli, args)  # as root: read, and found not to be ours (7)
        assert warm.exit_code == 7 and "no format_version" in warm.stderr, warm.stderr
        results.chmod(0)
        code, err = _as_nobody(args)
        _one_error(code, err, 11, f"cannot read {results}: Permission denied")
    finally:
        shutil.rmtree(top)
