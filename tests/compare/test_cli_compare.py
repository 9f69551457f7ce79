"""``pgblobdump compare`` end to end: a small matrix against real pg_dump and pg_restore."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from pgblobdump.cli import cli
from pgblobdump.compare import commands, entries, results
from pgblobdump.compare.matrix import Contender
from pgblobdump.servers.cluster import EmbeddedCluster

LOS = 200


def _run(*args: str) -> Result:
    # A wide terminal, so rich does not wrap "pg_dump 17 -Fc" over two lines.
    runner = CliRunner(env={"COLUMNS": "250"})
    return runner.invoke(cli, ["compare", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, Path, Path]:
    """One run shared by the tests below: 16 and 17, both formats, and the packed archive,
    with restores."""
    base = tmp_path_factory.mktemp("compare")
    folder, work = base / "results", base / "work"
    result = _run(
        "--los", str(LOS), "--majors", "16,17", "--formats", "custom,directory",
        "--contenders", "pg_dump,packed", "--restore", "--keep", "--workdir", str(work),
        "--results", str(folder), "--json",
    )  # fmt: skip
    return result, folder, work


def _doc(small_run: tuple[Result, Path, Path]) -> dict[str, Any]:
    result = small_run[0]
    assert result.exit_code == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@pytest.mark.pg  # small_run starts its own source cluster
def test_dumps(small_run: tuple[Result, Path, Path]) -> None:
    doc = _doc(small_run)
    summary = {(s["contender"]["major"], s["contender"]["format"]): s for s in doc["summary"]
               if s["contender"]["tool"] == "pg_dump"}  # fmt: skip
    assert set(summary) == {(16, "custom"), (17, "custom"), (16, "directory"), (17, "directory")}
    for (major, fmt), s in summary.items():
        assert s["count"] == LOS
        assert s["wall_s"]["median"] > 0
        assert s["max_rss_kb"]["median"] > 1000
        assert s["apparent_bytes"]["median"] > 0
        assert s["allocated_bytes"]["median"] > 0
        # 16 writes an entry per LO; 17 groups metadata (one BLOB METADATA per 1000 LOs).
        if major == 16:
            assert s["entries"]["BLOB"] == LOS
            assert "BLOB METADATA" not in s["entries"]
        else:
            assert s["entries"]["BLOB METADATA"] == 1
            assert "BLOB" not in s["entries"]
        assert s["entries"]["BLOBS"] == 1
        if fmt == "directory":
            # a file per LO, toc.dat, and blobs.toc (16) or blobs_1.toc (17)
            assert s["files"] == LOS + 2
            assert s["toc_bytes"]["median"] > 0
        else:
            assert s["files"] == 1
            assert s["toc_bytes"] is None
    # The seed's effect, visible even at 200 LOs: the 16 TOC is far larger.
    r = {(x["format"], x["figure"]): x["value"] for x in doc["ratios"]}
    assert r[("custom", "archive_bytes")] > 4
    assert r[("directory", "toc_bytes")] > 10
    assert doc["via"] in ("gnu-time", "wait4")


@pytest.mark.pg  # small_run starts its own source cluster
def test_packed_contender(small_run: tuple[Result, Path, Path]) -> None:
    """The packed archive measured like pg_dump, paired with the newest major, one
    restore mode (its batches are sized from the lock table), and ratios against it."""
    doc = _doc(small_run)
    packed = [s for s in doc["summary"] if s["contender"]["tool"] == "packed"]
    assert [s["contender"] for s in packed] == [{"tool": "packed", "major": 17, "format": "packed"}]
    assert packed[0]["files"] == 3 and packed[0]["entries_via"] == "none"
    restores = [r for r in doc["restores"] if r["contender"]["tool"] == "packed"]
    assert [r["mode_label"] for r in restores] == ["1 job"] and restores[0]["all_ok"] is True
    ratios = {(r["against"], r["figure"]): r["value"] for r in doc["packed_ratios"]}
    assert ratios[("pg_dump 17 -Fd", "files")] == (LOS + 2) / 3
    assert ("pg_restore 16 1 job of pg_dump 16 -Fc", "restore wall") in ratios
    assert "pgblobdump packed" in _run("--render", str(small_run[1])).stdout


@pytest.mark.pg  # small_run starts its own source cluster
def test_restores_bring_every_lo_back(small_run: tuple[Result, Path, Path]) -> None:
    doc = _doc(small_run)
    modes = {(r["contender"]["major"], r["contender"]["format"], r["mode_label"])
             for r in doc["restores"]}  # fmt: skip
    # --transaction-size only where pg_restore has it (17+).
    assert (17, "custom", "-j 2 --transaction-size 1000") in modes
    assert (16, "custom", "-j 2 --transaction-size 1000") not in modes
    assert len(modes) == 2 * 2 + 2 * 3 + 1
    for r in doc["restores"]:
        assert r["restored_los"] == LOS
        assert r["checked_los"] == LOS
        assert r["all_ok"] is True
        assert r["wall_s"]["median"] > 0


@pytest.mark.pg  # small_run starts its own source cluster
def test_results_folder_round_trips(small_run: tuple[Result, Path, Path]) -> None:
    _doc(small_run)
    folder = small_run[1]
    loaded = results.load(folder)
    assert len(loaded.dumps) == 5 and len(loaded.restores) == 11
    assert loaded.meta["complete"] is True
    assert loaded.meta["source"]["server_version"].startswith("16.")
    assert set(loaded.meta["toolchains"]) == {"16", "17"}
    assert len(loaded.commands) == 16
    assert all(
        any(w in c for w in ("pg_dump", "pg_restore", "pgblobdump")) for c in loaded.commands
    )
    png = (folder / "plots" / "compare.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    svg = (folder / "plots" / "compare.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
    # Render again, as CSV and Markdown, without measuring anything.
    csv = _run("--render", str(folder), "--csv")
    assert csv.exit_code == 0, csv.stderr
    lines = csv.stdout.splitlines()
    assert lines[0].startswith("phase,los,contender")
    assert len(lines) == 1 + 5 + 11
    same = _run("--render", str(folder), "--against", str(folder), "--csv")
    assert same.exit_code == 0, same.stderr
    rows = same.stdout.splitlines()[1:]
    assert len(rows) == 5 and all(",1.00x,1.00x,1.00x," in r for r in rows)
    md = _run("--render", str(folder), "--markdown")
    assert "| pg_dump 17 -Fd |" in md.stdout and "all back" not in md.stdout
    md = _run("--render", str(folder), "--markdown", "--details")
    assert "| pg_dump 17 -Fd |" in md.stdout and "all back" in md.stdout


@pytest.mark.pg  # small_run starts its own source cluster
def test_kept_archives_entries_agree_with_pg_restore(small_run: tuple[Result, Path, Path]) -> None:
    _doc(small_run)
    work = small_run[2]
    tcs = commands.find_toolchains((16, 17))
    for major in (16, 17):
        for fmt in ("custom", "directory"):
            c = Contender("pg_dump", major, fmt)
            path = work / commands.archive_name(c, LOS, 1)
            assert path.exists()
            listing = commands.list_argv(c, tcs[major], path)
            native, via = entries.entries_by_type(path, listing)
            listed, via2 = entries.entries_by_type(path, listing, prefer_native=False)
            assert (via, via2) == (entries.NATIVE, entries.PG_RESTORE_L)
            # pg_restore -l hides the four setting entries; everything else matches.
            assert {k: v for k, v in native.items() if k not in entries.NOT_LISTED} == listed
            assert set(native) - set(listed) == entries.NOT_LISTED


@pytest.mark.pg  # starts its own source and restore clusters
def test_the_main_job(tmp_path: Path) -> None:
    """No options but a tiny count: pg_dump 16 and 17 in both formats and the packed
    archive, each dumped and restored, in one table over pg_dump 17 -Fc with the seed's
    ratios beside; the results folder gets both plots and report.html."""
    folder = tmp_path / "results"
    result = _run("--los", "30", "--results", str(folder), "--progress")
    assert result.exit_code == 0, result.stderr
    # Progress counts every run towards a total known up front (5 dumps, 11 restores),
    # and the packed archive's restore is not called pg_restore.
    assert "compare: 16/16 runs (100%)" in result.stderr, result.stderr
    assert "pgblobdump packed of 30 LOs: restore 1 job\n" in result.stderr, result.stderr
    assert "pgblobdump packed of 30 LOs: pg_restore" not in result.stderr
    assert "results saved in" not in result.stderr  # the last line says it, once
    out = result.stdout
    assert out.startswith("30 LOs: each dump and restore over pg_dump 17 -Fc")
    for what in ("pg_dump 16 -Fc", "pg_dump 16 -Fd", "pg_dump 17 -Fd", "pgblobdump packed",
                 "pg_restore 16 -Fd -j 2", "pg_restore 17 -Fc -j 2 --transaction-size 1000",
                 "pgblobdump restore"):  # fmt: skip
        assert f" {what} " in out, what
    assert "(3.47x)" in out and "(7.28x)" in out  # the seed's, beside ours
    assert "BLOB METADATA" not in out and "median (min-max)" not in out  # one table
    saved = results.load(folder)
    assert {d.contender.key for d in saved.dumps} == {
        "pg_dump-16-custom", "pg_dump-17-custom", "pg_dump-16-directory",
        "pg_dump-17-directory", "packed-17-packed",
    }  # fmt: skip
    assert len(saved.restores) == 2 + 3 + 2 + 3 + 1 and all(r.ok for r in saved.restores)
    assert saved.meta["source"]["settings"]["fsync"] == "off"
    assert saved.meta["restore_server"]["settings"]["server_version"].startswith("17.")
    assert sorted(p.name for p in (folder / "plots").iterdir()) == [
        "compare-restore.png", "compare-restore.svg", "compare.png", "compare.svg",
    ]  # fmt: skip
    page = (folder / "report.html").read_text()
    assert page.count("<svg") == 2 and "pgblobdump restore" in page
    assert "restore server settings" in page
    # The run ends with where its results went.
    assert result.stderr.rstrip().splitlines()[-1] == (
        f"results in {folder}/: results.json, commands.txt, plots/ and {folder / 'report.html'}"
    )


def test_table_output_by_default(pg16: EmbeddedCluster, new_db: Any) -> None:
    conninfo = new_db(pg16)
    result = _run("-d", conninfo, "--generate", "--los", "50", "--majors", "17",
                  "--formats", "custom", "--details")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "pg_dump 17 -Fc" in result.stdout and "pgblobdump packed" in result.stdout
    assert "pg_restore 17" not in result.stdout  # with -d, no restores unless --restore
    assert "BLOB METADATA 1" in result.stdout
    assert "GNU time" in result.stdout or "wait4" in result.stdout
    # Nothing was kept, and the run's last line says so and names the option that keeps it.
    last = result.stderr.rstrip().splitlines()[-1]
    assert last.startswith("results not kept: add --results DIR to keep results.json,"), last
    assert len(last) <= 100  # a terminal of 100 columns does not break it mid-option
    # What is there and what will be added, then the count once it is there.
    adding = result.stderr.index("source: 0 LOs in ")
    assert "; adding 50 to reach 50" in result.stderr
    assert adding < result.stderr.index("source: 50 LOs in ")
    # Dumped as it is, without --generate: the 50 LOs already there.
    again = _run("-d", conninfo, "--majors", "17", "--formats", "custom", "--csv")
    assert again.exit_code == 0, again.stderr
    assert again.stdout.splitlines()[1].startswith("dump,50,pg_dump-17-custom")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--formats", "tar"], "--formats 'tar': choose from custom, directory"),
        (["--majors", "sixteen"], "give major versions like 16,17,18"),
        (["--majors", "99"], "unknown PostgreSQL major version 99"),
        (["--los", "many"], "--los 'many' is not a whole number"),
        (["-d", "postgres", "--los", "10"], "--los with -d needs --generate"),
        (["--generate"], "--generate applies to a database given with -d"),
        (["--render", "."], ". is not a pgblobdump results folder (no results.json)"),
        (["--plots"], "--plots needs --results DIR"),
        (["--repeat", "0"], "--repeat must be at least 1 (got 0)"),
        (["--repeat", "-2"], "--repeat must be at least 1 (got -2)"),
        (["--verify-sample", "-1"], "--verify-sample must be 0"),
        (["--results", "/proc/x"], "--results /proc/x: cannot create or write there"),
        (["--workdir", "/proc/x/work"], "--workdir /proc/x/work: cannot create or write"),
        (["--embedded", "99"], "unknown PostgreSQL major version 99"),
        (["--los", "5G"], "--los 5,000,000,000 is more LOs than a database can hold"),
        (["--majors", "15"], "pg_dump 15 cannot dump a PostgreSQL 16 server (--embedded"),
        (["--majors", "16,17", "--embedded", "17"], "pg_dump 16 cannot dump a PostgreSQL"),
    ],
)
def test_usage_errors(args: list[str], message: str) -> None:
    # A small plan, so that a check made too late fails fast, not after a 10k-LO run.
    result = _run("--los", "5", "--majors", "17", "--formats", "custom", *args)
    expected = 11 if "cannot create or write" in message else (8 if "--render" in args else 2)
    assert result.exit_code == expected, result.output
    assert result.stderr.startswith("Error: ")
    assert message in result.stderr
    # Refused before anything started: no cluster, no dump.
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_render_what_is_not_results(tmp_path: Path) -> None:
    binary = tmp_path / "some.dump"
    binary.write_bytes(b"PGDMP\x01\x10\x00\xf8\xff")
    result = _run("--render", str(binary))
    assert result.exit_code == 8
    assert (
        result.stderr == f"Error: {binary} is not a pgblobdump results folder (no results.json)\n"
    )
    folder = tmp_path / "res"
    folder.mkdir()
    (folder / "results.json").write_bytes(b'{"format_version": 1, \xf8')
    result = _run("--render", str(folder))
    assert result.exit_code == 7
    assert result.stderr == (
        f"Error: {folder / 'results.json'}: results.json is not valid:"
        " not UTF-8 text (byte 0xf8 at offset 22)\n"
    )
    (folder / "results.json").write_text('{"format_version": 1, "dumps": [{}], "restores": []}')
    result = _run("--render", str(folder), "--against", str(binary))
    assert result.exit_code == 7
    assert result.stderr == f"Error: {folder / 'results.json'}: field dumps[0].count is missing\n"
    (folder / "results.json").write_text("[1, 2")
    result = _run("--render", str(folder))
    assert result.exit_code == 7
    assert "results.json is not valid: not JSON (" in result.stderr


def test_help_ends_with_an_example() -> None:
    result = CliRunner().invoke(cli, ["compare", "--help"])
    assert result.exit_code == 0
    last = result.output.rstrip().split("\n\n")[-1].strip()
    assert last.startswith("Example"), last
    assert "pgblobdump compare --los 1M" in " ".join(last.split())
