"""Medians over repeats, min-max spreads, ratios between majors, and the seed's figures.

The seed (credativ, "Improvements to Large Object Dumping in Postgres 17", 1M empty LOs):
pg_dump 16 vs 17 peak RSS 755,692k / 217,776k; -Fc archive 211M / 29M; toc.dat of -Fd
185M / 6.9M. Absolute times differ between machines by far more than 20%, so only ratios
between majors measured in the same run are compared with it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pgblobdump.compare.matrix import PACKED, Contender
from pgblobdump.compare.records import DumpRecord, RestoreRecord
from pgblobdump.harness.stats import Spread
from pgblobdump.proc import ProcessStats

SEED_RATIOS = {
    "peak_rss": 755_692 / 217_776,
    "custom_bytes": 211 / 29,
    "toc_bytes": 185 / 6.9,
}
"""16/17 ratios at 1M LOs as the seed published them (3.47x, 7.28x, 26.8x)."""
SEED_COUNT = 1_000_000
SEED_POINTS: dict[int, dict[str, float]] = {
    50_000: {"peak_rss": 2.0, "toc_bytes": 30.0},
    SEED_COUNT: SEED_RATIOS,
    1_500_000: {"peak_rss": 4.0, "toc_bytes": 25.0},
}
"""The seed's 16/17 ratios by LO count: exact at 1M, "around" at 50k and 1.5M (its sweep)."""
SEED_TOLERANCE = 0.20
"""How far a reproduced ratio may stray from the seed's (the issue's "about 20%")."""


@dataclass(frozen=True)
class DumpSummary:
    """All repeats of one contender at one count, figure by figure."""

    count: int
    contender: Contender
    wall_s: Spread
    max_rss_kb: Spread
    user_s: Spread
    sys_s: Spread
    apparent_bytes: Spread
    allocated_bytes: Spread
    toc_bytes: Spread | None
    files: int
    entries: dict[str, int]
    entries_via: str


def _spread(records: Sequence[DumpRecord], get: Callable[[DumpRecord], float]) -> Spread:
    return Spread.of([get(r) for r in records])


def summarize_dumps(dumps: Iterable[DumpRecord]) -> list[DumpSummary]:
    """One summary per (count, contender), in count then contender order of appearance."""
    groups: dict[tuple[int, Contender], list[DumpRecord]] = defaultdict(list)
    for d in dumps:
        groups[(d.count, d.contender)].append(d)
    out = []
    for (count, contender), rs in sorted(groups.items(), key=lambda kv: kv[0][0]):
        tocs = [r.archive.toc_bytes for r in rs if r.archive.toc_bytes is not None]
        out.append(
            DumpSummary(
                count, contender,
                _spread(rs, lambda r: r.stats.wall_s),
                _spread(rs, lambda r: r.stats.max_rss_kb),
                _spread(rs, lambda r: r.stats.user_s),
                _spread(rs, lambda r: r.stats.sys_s),
                _spread(rs, lambda r: r.archive.apparent_bytes),
                _spread(rs, lambda r: r.archive.allocated_bytes),
                Spread.of([float(t) for t in tocs]) if tocs else None,
                rs[0].archive.files,
                dict(rs[0].entries),
                rs[0].entries_via,
            )
        )  # fmt: skip
    return out


@dataclass(frozen=True)
class RestoreSummary:
    count: int
    contender: Contender
    mode_label: str
    wall_s: Spread
    max_rss_kb: Spread
    restored_los: int
    checked_los: int
    all_ok: bool


def summarize_restores(restores: Iterable[RestoreRecord]) -> list[RestoreSummary]:
    groups: dict[tuple[int, Contender, str], list[RestoreRecord]] = defaultdict(list)
    for r in restores:
        groups[(r.count, r.contender, r.mode.label)].append(r)
    return [
        RestoreSummary(
            count, contender, mode,
            Spread.of([r.stats.wall_s for r in rs]),
            Spread.of([r.stats.max_rss_kb for r in rs]),
            min(r.restored_los for r in rs),
            min(r.checked_los for r in rs),
            all(r.ok for r in rs),
        )
        for (count, contender, mode), rs in sorted(groups.items(), key=lambda kv: kv[0][0])
    ]  # fmt: skip


@dataclass(frozen=True)
class Ratio:
    """``base`` over ``other`` for one figure at one count and format (medians).

    ``seed`` is the published ratio for this figure when the comparison is the seed's
    (16 over 17), else None; ``off`` is the relative deviation from it.
    """

    count: int
    format: str
    base: int
    other: int
    figure: str
    value: float
    seed: float | None

    @property
    def off(self) -> float | None:
        return None if self.seed is None else self.value / self.seed - 1.0

    @property
    def within_tolerance(self) -> bool | None:
        return None if self.off is None else abs(self.off) <= SEED_TOLERANCE


FIGURES: dict[str, Callable[[DumpSummary], float | None]] = {
    "wall": lambda s: s.wall_s.median,
    "peak_rss": lambda s: s.max_rss_kb.median,
    "archive_bytes": lambda s: s.apparent_bytes.median,
    "allocated_bytes": lambda s: s.allocated_bytes.median,
    "toc_bytes": lambda s: s.toc_bytes.median if s.toc_bytes else None,
}
"""Figures compared between majors; higher means worse for all of them."""


def _seed_for(count: int, figure: str, fmt: str, base: int, other: int) -> float | None:
    """The seed's ratio for this figure at exactly this count (it published three counts)."""
    point = SEED_POINTS.get(count)
    if (base, other) != (16, 17) or point is None:
        return None
    if figure == "peak_rss":
        return point.get("peak_rss")
    if figure == "archive_bytes" and fmt == "custom":
        return point.get("custom_bytes")
    if figure == "toc_bytes" and fmt == "directory":
        return point.get("toc_bytes")
    return None


def major_ratios(summaries: Iterable[DumpSummary]) -> list[Ratio]:
    """For each count and format (same tool): the oldest major over each newer one."""
    by_cell: dict[tuple[int, str, str], dict[int, DumpSummary]] = defaultdict(dict)
    for s in summaries:
        by_cell[(s.count, s.contender.tool, s.contender.format)][s.contender.major] = s
    out = []
    for (count, _tool, fmt), majors in by_cell.items():
        base = min(majors)
        for other in sorted(m for m in majors if m != base):
            for figure, get in FIGURES.items():
                a, b = get(majors[base]), get(majors[other])
                if a is None or b is None or b == 0:
                    continue
                out.append(Ratio(count, fmt, base, other, figure, a / b,
                                 _seed_for(count, figure, fmt, base, other)))  # fmt: skip
    return out


@dataclass(frozen=True)
class PackedRatio:
    """pg_dump's (or pg_restore's) figure over the packed archive's at one count: how
    many times better packed is (higher is better for packed). ``against`` names the
    pg_dump contender, with the restore mode for restores."""

    count: int
    against: str
    figure: str
    value: float


PACKED_FIGURES: dict[str, Callable[[DumpSummary], float | None]] = {
    "wall": lambda s: s.wall_s.median,
    "peak_rss": lambda s: s.max_rss_kb.median,
    "archive_bytes": lambda s: s.apparent_bytes.median,
    "allocated_bytes": lambda s: s.allocated_bytes.median,
    "files": lambda s: float(s.files),
}


def packed_ratios(
    dumps: Iterable[DumpSummary], restores: Iterable[RestoreSummary] = ()
) -> list[PackedRatio]:
    """Every pg_dump contender against the packed one at the same count, figure by
    figure; and every pg_restore mode against the packed restore."""
    dumps, restores = list(dumps), list(restores)
    out: list[PackedRatio] = []
    packed = {s.count: s for s in dumps if s.contender.tool == PACKED}
    for s in dumps:
        p = packed.get(s.count)
        if p is None or s.contender.tool == PACKED:
            continue
        for figure, get in PACKED_FIGURES.items():
            a, b = get(s), get(p)
            if a is not None and b:
                out.append(PackedRatio(s.count, s.contender.label, figure, a / b))
    packed_r = {r.count: r for r in restores if r.contender.tool == PACKED}
    for r in restores:
        p2 = packed_r.get(r.count)
        if p2 is None or r.contender.tool == PACKED or not p2.wall_s.median:
            continue
        label = f"pg_restore {r.contender.major} {r.mode_label} of {r.contender.label}"
        out.append(PackedRatio(r.count, label, "restore wall", r.wall_s.median / p2.wall_s.median))
    return out


@dataclass(frozen=True)
class Agreement:
    """How closely GNU time and wait4 agree over runs measured both ways.

    ``rss_runs`` counts runs whose GNU time peak was above the wait4 floor (only those can
    be compared on RSS); ``*_max_diff`` are the largest relative differences found.
    """

    runs: int
    rss_runs: int
    rss_max_diff: float | None
    cpu_max_diff_s: float | None


def agreement(dumps: Sequence[DumpRecord], restores: Sequence[RestoreRecord]) -> Agreement:
    every: list[ProcessStats] = [d.stats for d in dumps] + [r.stats for r in restores]
    stats = [s for s in every if s.check_max_rss_kb is not None]
    rss = [
        abs(s.check_max_rss_kb - s.max_rss_kb) / s.max_rss_kb
        for s in stats
        if s.check_max_rss_kb is not None and s.max_rss_kb > s.rss_floor_kb * 1.1
    ]
    cpu = [
        abs((s.check_user_s or 0) + (s.check_sys_s or 0) - s.cpu_s)
        for s in stats
        if s.check_user_s is not None
    ]
    return Agreement(len(stats), len(rss), max(rss) if rss else None, max(cpu) if cpu else None)


def harness_overhead(dumps: Sequence[DumpRecord]) -> float | None:
    """The largest share our launching and reaping added to a dump of 10 s or more."""
    long = [d.stats for d in dumps if d.stats.wall_s >= 10 and d.stats.via == "gnu-time"]
    if not long:
        return None
    return max(s.harness_wall_s / s.wall_s - 1.0 for s in long)
