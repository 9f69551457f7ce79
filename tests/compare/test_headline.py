"""The main job's one table: every dump and restore over pg_dump 17 -Fc, the seed's beside."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from pgblobdump.cli import cli, output
from pgblobdump.cli import compare as compare_cli
from pgblobdump.compare import headline, ratios, report, results
from pgblobdump.compare.archive_stats import ArchiveStats
from pgblobdump.compare.matrix import Contender, RestoreMode
from pgblobdump.compare.records import DumpRecord, RestoreRecord
from pgblobdump.compare.results import Results
from pgblobdump.proc import ProcessStats

C16, C17 = Contender("pg_dump", 16, "custom"), Contender("pg_dump", 17, "custom")
D16, D17 = Contender("pg_dump", 16, "directory"), Contender("pg_dump", 17, "directory")
PACKED = Contender("packed", 17, "packed")


def _stats(wall: float, rss: int) -> ProcessStats:
    return ProcessStats(("x",), 0, wall, rss, wall / 2, 0.1, "gnu-time", wall + 0.01)


def _dump(c: Contender, wall: float, rss: int, size: int, files: int, count: int = 1000
          ) -> DumpRecord:  # fmt: skip
    return DumpRecord(count, c, 1, _stats(wall, rss), ArchiveStats(size, size, files, 0, None),
                      {}, "none" if c == PACKED else "native")  # fmt: skip


def _restore(c: Contender, mode: RestoreMode, wall: float, count: int = 1000) -> RestoreRecord:
    return RestoreRecord(count, c, 1, mode, _stats(wall, 8_000), count, count, True)


def _results(dumps: list[DumpRecord], restores: list[RestoreRecord]) -> Results:
    return Results(dumps, restores, [], {"complete": True})


RUN = _results(
    [
        _dump(C16, 3.0, 40_000, 7_000, 1),
        _dump(C17, 2.0, 10_000, 1_000, 1),
        _dump(D16, 9.0, 40_000, 8_000, 1_002),
        _dump(D17, 8.0, 10_000, 2_000, 1_002),
        _dump(PACKED, 0.5, 50_000, 100, 3),
    ],
    [
        _restore(C17, RestoreMode(), 4.0),
        _restore(C17, RestoreMode(2, 1000), 2.0),
        _restore(PACKED, RestoreMode(), 0.25),
    ],
)


def _rows() -> dict[str, headline.HeadlineRow]:
    dumps = ratios.summarize_dumps(RUN.dumps)
    ref, rows = headline.headline_rows(dumps, ratios.summarize_restores(RUN.restores))
    assert ref == C17
    return {r.what: r for r in rows}


def test_every_figure_over_pg_dump_17_custom() -> None:
    rows = _rows()
    assert rows["pg_dump 17 -Fc"].ratios == dict.fromkeys(headline.FIGURES, 1.0)
    assert rows["pg_dump 16 -Fc"].ratios == {
        "wall": 1.5, "peak_rss": 4.0, "archive_bytes": 7.0, "files": 1.0,
    }  # fmt: skip
    assert rows["pgblobdump packed"].ratios == {
        "wall": 0.25, "peak_rss": 5.0, "archive_bytes": 0.1, "files": 3.0,
    }  # fmt: skip
    # Restores over pg_restore 17 of the 17 -Fc archive, one job; no bytes or files.
    assert rows["pg_restore 17 -Fc"].ratios["wall"] == 1.0
    assert rows["pg_restore 17 -Fc -j 2 --transaction-size 1000"].ratios["wall"] == 0.5
    packed = rows["pgblobdump restore"]
    assert packed.step == "restore" and packed.ratios["wall"] == 0.0625
    assert packed.ratios["archive_bytes"] is None and packed.ratios["files"] is None


def test_the_seeds_ratios_beside_ours() -> None:
    """From the seed's published figures (1M LOs): 36.73 s / 34.69 s, 755,692k / 217,776k,
    211M / 29M, and find's 1,000,003 and 1,001,002 lines (the directory itself among them)."""
    rows = _rows()
    seed16 = rows["pg_dump 16 -Fc"].seed
    assert seed16["wall"] == pytest.approx(1.06, abs=0.005)
    assert seed16["peak_rss"] == pytest.approx(ratios.SEED_RATIOS["peak_rss"])
    assert seed16["archive_bytes"] == pytest.approx(ratios.SEED_RATIOS["custom_bytes"])
    assert rows["pg_dump 16 -Fd"].seed["files"] == 1_000_002
    assert rows["pg_dump 17 -Fd"].seed["files"] == 1_001_001
    assert rows["pg_dump 17 -Fd"].seed["wall"] == pytest.approx(471.04 / 34.69)
    # The seed published du, not apparent bytes, for -Fd; and nothing of packed or restores.
    assert rows["pg_dump 17 -Fd"].seed["archive_bytes"] is None
    assert set(rows["pgblobdump packed"].seed.values()) == {None}
    assert set(rows["pg_restore 17 -Fc"].seed.values()) == {None}


def test_the_table_as_people_read_it() -> None:
    table = report.tables(RUN)[0]
    assert len(report.tables(RUN)) == 1  # the main job prints one table
    assert table.title.startswith("1,000 LOs: each dump and restore over pg_dump 17 -Fc")
    assert table.columns[0].key == "what"  # one count: no LOs column
    cells = {row[0]: row for row in table.cells()}
    assert cells["pg_dump 16 -Fc"][5:] == ["1.50x (1.06x)", "4.00x (3.47x)", "7.00x (7.28x)",
                                           "1.00x (1.00x)"]  # fmt: skip
    assert cells["pgblobdump packed"][5:] == ["0.25x", "5.00x", "0.10x", "3.00x"]
    assert cells["pgblobdump restore"][3:] == ["-", "-", "0.062x", "1.00x", "-", "-"]
    assert "figures from GNU time" in " ".join(table.notes)
    # Packed's 5x RSS with its reason; no jargon (how TOC entries were counted, the wait4
    # cross-check) under the main table: those explain the detail tables, in words.
    assert any(n.startswith("pgblobdump's peak RSS (5.00x and 1.00x here) is the Python"
                            " interpreter's floor") for n in table.notes), table.notes  # fmt: skip
    # in MiB as every size here (it said "52 MB measured" beside "~215 MiB", both MiB)
    assert any("(52 MiB measured, where pg_dump 17 peaks at ~215 MiB)" in n
               for n in table.notes), table.notes  # fmt: skip
    assert not any("TOC entries" in n or "wait4" in n for n in table.notes), table.notes
    # --details: the per-part tables follow.
    titles = [t.title for t in report.tables(RUN, details=True)]
    assert titles[1:] == [
        "pg_dump: median (min-max) over runs",
        "restores into a fresh database, then checked",
        "ratios between majors (medians; higher = older is worse)",
        "pg_dump and pg_restore over packed: how many times packed's figure each is"
        " (medians; higher = packed is better)",
    ]
    doc = report.json_document(RUN)
    assert doc["headline"]["reference"] == "pg_dump-17-custom"
    assert len(doc["headline"]["rows"]) == 5 + 3


def test_without_pg_dump_17_custom_the_first_stock_dump_is_the_reference() -> None:
    run = _results([_dump(PACKED, 0.5, 50_000, 100, 3), _dump(D17, 8.0, 10_000, 2_000, 1_002),
                    _dump(D17, 80.0, 10_000, 2_000, 10_002, count=10_000)], [])  # fmt: skip
    ref, rows = headline.headline_rows(ratios.summarize_dumps(run.dumps), [])
    assert ref == D17
    assert [(r.count, r.what, r.ratios["wall"]) for r in rows] == [
        (1000, "pgblobdump packed", 0.0625), (1000, "pg_dump 17 -Fd", 1.0),
        (10_000, "pg_dump 17 -Fd", 1.0),
    ]  # fmt: skip
    table = report.tables(run)[0]
    assert table.columns[0].key == "los"  # several counts: a column says which
    assert "each dump over pg_dump 17 -Fd;" in table.title


def _main_job(count: int) -> Results:
    """What the main job measures: 16 and 17 in both formats and packed, each restored in
    every mode (11 restores), at ``count`` LOs, with figures of the sizes it finds."""
    dumps = [
        _dump(C16, 0.4, 6_000, 428_000, 1, count), _dump(C17, 0.2, 9_000, 58_000, 1, count),
        _dump(D16, 3.5, 6_000, 456_000, count + 2, count),
        _dump(D17, 3.2, 9_000, 93_000, count + 3, count),
        _dump(PACKED, 1.0, 45_000, 5_500, 3, count),
    ]  # fmt: skip
    modes = [RestoreMode(), RestoreMode(2, None), RestoreMode(2, 1000)]
    restores = [_restore(c, m, 0.5, count) for c in (C16, C17, D16, D17) for m in modes
                if m.transaction_size is None or c.major >= 17]  # fmt: skip
    restores.append(_restore(PACKED, RestoreMode(), 0.7, count))
    meta = {"format_version": results.FORMAT_VERSION, "complete": True,
            "source": {"description": "test", "server_version": "16.14"}}  # fmt: skip
    return Results(dumps, restores, [], meta)


def _rendered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int, count: int) -> str:
    """``compare --render`` of a saved main job on a terminal ``width`` columns wide."""
    results.save(_main_job(count), tmp_path / "saved")
    buf = io.StringIO()

    def terminal() -> Console:
        return Console(file=buf, width=width, color_system=None)

    monkeypatch.setattr(output, "stdout_console", terminal)
    monkeypatch.setattr(compare_cli, "stdout_console", terminal, raising=False)
    result = CliRunner().invoke(cli, ["compare", "--render", str(tmp_path / "saved")])
    assert result.exit_code == 0, result.output
    return buf.getvalue()


NAMES = ["pg_dump 16 -Fc", "pg_dump 17 -Fc", "pg_dump 16 -Fd", "pg_dump 17 -Fd",
         "pgblobdump packed", "pg_restore 16 -Fc", "pg_restore 17 -Fd",
         "pgblobdump restore"]  # fmt: skip


@pytest.mark.parametrize("count", [10_000, 1_000_000])
def test_the_main_table_fits_200_columns_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    text = _rendered(tmp_path, monkeypatch, 200, count)
    table = [line for line in text.splitlines() if line.startswith(("┃", "│", "┏", "└"))]
    assert table and max(len(line) for line in table) <= 200
    assert "…" not in text
    whole = ["pg_restore 17 -Fd -j 2 --transaction-size 1000", "pg_restore 16 -Fc -j 2"]
    for name in [*NAMES, *whole]:
        assert f"│ {name} " in text, name
    assert "(1,000,002x)" in text  # the seed's ratios beside ours, on the same line


@pytest.mark.parametrize("count", [10_000, 1_000_000])
def test_the_main_table_fits_100_columns_and_keeps_every_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    """At 100 columns rich cut the names to ``pg_resto…`` until the restores could not be
    told apart: now the seed's ratios go under ours and a restore's mode under its name,
    abbreviated as the legend says."""
    text = _rendered(tmp_path, monkeypatch, 100, count)
    lines = text.splitlines()
    notes_at = next(i for i, line in enumerate(lines) if line.startswith("figures from"))
    assert max(len(line.rstrip()) for line in lines[1:notes_at]) <= 100  # the title is soft
    assert "…" not in text
    header = next(line for line in lines if line.strip().startswith("dump / restore"))
    names = [line[: header.index("wall s")].strip() for line in lines[3:notes_at]]
    names = [name for name in names if name]
    for name in NAMES:
        assert name in names, (name, names)
    restores = [(a, b) for a, b in zip(names, [*names[1:], ""], strict=True)
                if a.startswith("pg_restore")]  # fmt: skip
    # Each restore row is its name, then its mode on the next line when it has one.
    assert ("pg_restore 17 -Fd", "-j 2 T=1000") in restores
    assert ("pg_restore 16 -Fc", "-j 2") in restores
    assert "T=N: pg_restore's --transaction-size N" in text
    assert "(1,000,002x)" in text or "(1,001,001x)" in text  # whole, on a line of its own


def test_the_detail_tables_in_words() -> None:
    """Human names for the figures, ratios of two or three figures (``668x``, not
    ``667.67x``), no empty seed columns, a row per contender against packed, and notes that
    say what 'checksummed' and the cross-check are."""
    run = _main_job(2_000)
    run.dumps[0] = DumpRecord(2_000, C16, 1, ProcessStats(
        ("x",), 0, 0.4, 6_000, 0.2, 0.1, "gnu-time", 0.41, check_max_rss_kb=6_000,
        check_user_s=0.2, check_sys_s=0.1, rss_floor_kb=40_000), ArchiveStats(
        428_000, 432_000, 1, 0, None), {"BLOB": 2_000}, "native")  # fmt: skip
    run.restores[0] = RestoreRecord(2_000, C16, 1, RestoreMode(), _stats(0.5, 8_000), 2_000,
                                    1_000, True)  # fmt: skip
    tables = {t.title.split(":")[0].split(" (")[0]: t for t in report.tables(run, details=True)}
    majors = tables["ratios between majors"]
    assert [c.heading for c in majors.columns] == ["LOs", "format", "versions", "figure", "ratio"]
    assert {r[3] for r in majors.cells()} == {
        "wall time", "peak RSS", "archive size", "allocated on disk"}  # fmt: skip
    assert majors.cells()[0][2] == "16 over 17"
    against = tables["pg_dump and pg_restore over packed"]
    assert [c.heading for c in against.columns] == [
        "LOs", "over packed's", "wall time", "peak RSS", "archive size", "allocated on disk",
        "files"]  # fmt: skip
    rows = {r[1]: r for r in against.cells()}
    assert rows["pg_dump 17 -Fd"][6] == "668x"  # 2,003 files over 3
    assert rows["pg_restore 17 -j 2 of pg_dump 17 -Fc"][2:] == ["0.71x", "-", "-", "-", "-"]
    dumps = tables["pg_dump"]
    assert any(n.startswith("the kernel's own count (wait4 of the /usr/bin/time process)"
                            " agrees with GNU time's on 1 run: CPU within 0.00 s; peak RSS"
                            " not compared") for n in dumps.notes), dumps.notes  # fmt: skip
    assert any("TOC entries: read from each archive by pgblobdump's own TOC reader (a packed"
               " archive has no TOC" in n for n in dumps.notes), dumps.notes  # fmt: skip
    checked = tables["restores into a fresh database, then checked"].notes
    assert any("1,000 of 2,000 is a sample: every n-th OID, about --verify-sample LOs" in n
               for n in checked), checked  # fmt: skip
