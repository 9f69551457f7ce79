"""The main job's one table: every dump and restore over pg_dump 17 -Fc, the seed's beside."""

from __future__ import annotations

import pytest

from pgblobdump.compare import headline, ratios, report
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
                      {}, "native")  # fmt: skip


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
    # --details: the per-part tables follow.
    titles = [t.title for t in report.tables(RUN, details=True)]
    assert titles[1:] == [
        "pg_dump: median (min-max) over runs",
        "restores into a fresh database, then checked",
        "ratios between majors (medians; higher = older is worse)",
        "pg_dump / pg_restore over packed (medians; higher = packed is better)",
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
