"""Medians, spreads, ratios between majors, the seed's figures, and the plan's rules."""

from __future__ import annotations

import pytest

from pgblobdump.compare import ratios
from pgblobdump.compare.archive_stats import ArchiveStats
from pgblobdump.compare.entries import parse_listing_types
from pgblobdump.compare.matrix import (
    Contender,
    Plan,
    RestoreMode,
    pg_dump_contenders,
    restore_modes,
)
from pgblobdump.compare.records import DumpRecord
from pgblobdump.errors import UsageError
from pgblobdump.harness.stats import Spread
from pgblobdump.proc import ProcessStats


def _dump(
    major: int, fmt: str, rss: int, size: int, toc: int | None, wall: float,
    count: int = 1_000_000, rep: int = 1, check_rss: int | None = None,
) -> DumpRecord:  # fmt: skip
    stats = ProcessStats(("pg_dump",), 0, wall, rss, wall / 2, 1.0, "gnu-time", wall + 0.01,
                         check_max_rss_kb=check_rss or rss, check_user_s=wall / 2,
                         check_sys_s=1.0, rss_floor_kb=40_000)  # fmt: skip
    archive = ArchiveStats(size, size, 1 if toc is None else count + 2, 0, toc)
    return DumpRecord(count, Contender("pg_dump", major, fmt), rep, stats, archive, {}, "native")


def test_spread() -> None:
    s = Spread.of([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.low, s.high, s.n) == (2.5, 1.0, 10.0, 4)


def test_seed_ratios_are_the_published_ones() -> None:
    assert ratios.SEED_RATIOS["peak_rss"] == pytest.approx(3.47, abs=0.01)
    assert ratios.SEED_RATIOS["custom_bytes"] == pytest.approx(7.28, abs=0.01)
    assert ratios.SEED_RATIOS["toc_bytes"] == pytest.approx(26.8, abs=0.1)


def test_major_ratios_medians_and_seed_offsets() -> None:
    dumps = [
        # three repeats of 16 -Fc: the median (746 MB) counts, not the outlier
        _dump(16, "custom", 746_000, 222_600_000, None, 104, rep=1),
        _dump(16, "custom", 740_000, 222_600_000, None, 110, rep=2),
        _dump(16, "custom", 900_000, 222_600_000, None, 100, rep=3),
        _dump(17, "custom", 221_000, 30_200_000, None, 106),
        _dump(16, "directory", 746_000, 230_000_000, 185_000_000, 200),
        _dump(17, "directory", 221_000, 90_000_000, 7_200_000, 201),
    ]
    summaries = ratios.summarize_dumps(dumps)
    assert [s.wall_s.n for s in summaries] == [3, 1, 1, 1]
    assert summaries[0].max_rss_kb.median == 746_000
    got = {(r.format, r.figure): r for r in ratios.major_ratios(summaries)}
    rss = got[("custom", "peak_rss")]
    assert (rss.base, rss.other) == (16, 17)
    assert rss.value == pytest.approx(746 / 221)
    assert rss.off == pytest.approx((746 / 221) / (755_692 / 217_776) - 1)
    assert rss.within_tolerance
    assert got[("custom", "archive_bytes")].value == pytest.approx(222.6 / 30.2)
    assert got[("custom", "archive_bytes")].within_tolerance
    assert got[("directory", "toc_bytes")].value == pytest.approx(185 / 7.2)
    # No seed figure for wall time or a directory's apparent bytes.
    assert got[("custom", "wall")].seed is None
    assert got[("directory", "archive_bytes")].seed is None


def test_ratio_far_from_seed_is_flagged() -> None:
    dumps = [_dump(16, "custom", 300_000, 100, None, 1), _dump(17, "custom", 200_000, 100, None, 1)]
    rss = next(
        r for r in ratios.major_ratios(ratios.summarize_dumps(dumps)) if r.figure == "peak_rss"
    )
    assert rss.within_tolerance is False


def test_no_seed_figure_at_other_counts() -> None:
    dumps = [
        _dump(16, "custom", 2, 2, None, 1, count=10),
        _dump(17, "custom", 1, 1, None, 1, count=10),
    ]
    assert all(r.seed is None for r in ratios.major_ratios(ratios.summarize_dumps(dumps)))


def test_agreement_and_overhead() -> None:
    dumps = [
        _dump(16, "custom", 746_000, 1, None, 100, check_rss=750_000),
        _dump(17, "custom", 30_000, 1, None, 100, check_rss=45_000),  # below the floor
    ]
    a = ratios.agreement(dumps, [])
    assert (a.runs, a.rss_runs) == (2, 1)
    assert a.rss_max_diff == pytest.approx(4_000 / 746_000)
    assert a.cpu_max_diff_s == pytest.approx(0.0)
    assert ratios.harness_overhead(dumps) == pytest.approx(0.0001)


def test_listing_types() -> None:
    listing = """;
; Archive created at 2024-12-11 09:05:46 CET
;
215; 1259 33277 TABLE public test postgres
3348; 2613 33280 BLOB METADATA - 33280..33281 postgres
3347; 0 33277 TABLE DATA public test postgres
3349; 0 0 BLOBS - 33280..33281 postgres
3350; 2613 33282 BLOB - 33282 postgres
3351; 0 0 COMMENT - LARGE OBJECT 33282 postgres
"""
    assert parse_listing_types(listing.splitlines()) == {
        "TABLE": 1, "BLOB METADATA": 1, "TABLE DATA": 1, "BLOBS": 1, "BLOB": 1, "COMMENT": 1,
    }  # fmt: skip


def test_plan_rules() -> None:
    contenders = pg_dump_contenders((16, 17), ("custom", "directory"))
    assert [c.label for c in contenders] == [
        "pg_dump 16 -Fc", "pg_dump 17 -Fc", "pg_dump 16 -Fd", "pg_dump 17 -Fd",
    ]  # fmt: skip
    plan = Plan(contenders, (10, 100), repeat=2, restore_modes=restore_modes(2, 1000))
    assert plan.dump_runs == 16  # 2 counts x 2 repeats x 4 contenders
    assert len(list(plan.cells(10))) == 8
    assert [m.label for m in plan.modes_for(contenders[0])] == ["1 job", "-j 2"]
    assert plan.modes_for(contenders[1])[-1] == RestoreMode(2, 1000)
    with pytest.raises(UsageError, match="ascending"):
        Plan(contenders, (100, 10))
    with pytest.raises(UsageError, match="repeat"):
        Plan(contenders, (10,), repeat=0)
    with pytest.raises(UsageError, match="unknown format"):
        Contender("pg_dump", 17, "tar")
    with pytest.raises(UsageError, match="jobs"):
        restore_modes(0, None)
    assert restore_modes(1, None) == (RestoreMode(),)
