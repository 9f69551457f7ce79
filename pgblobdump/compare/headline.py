"""The main job's one table: every dump and restore beside pg_dump 17 -Fc, with the seed's
ratios beside ours.

The seed (credativ, 1,000,000 empty LOs, PostgreSQL 16 server) published absolute figures
for pg_dump 16 and 17 in custom and directory format; its ratios to pg_dump 17 -Fc are
computed from them here, so the table can show what it found beside what this run found.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pgblobdump.compare.matrix import FORMATS, PACKED, PG_DUMP, Contender, RestoreMode
from pgblobdump.compare.ratios import SEED_COUNT, DumpSummary, RestoreSummary
from pgblobdump.report.table import Column, Table
from pgblobdump.units import format_bytes

REFERENCE = Contender(PG_DUMP, 17, "custom")
"""What every row is measured against: the newest stock dump the seed measured."""
ONE_JOB = RestoreMode().label
"""Restores are measured against the reference archive's plain pg_restore."""
PACKED_LABEL = Contender(PACKED, 17, PACKED).label
"""``pgblobdump packed``: the packed dump's row (whatever major it is paired with)."""
PACKED_RESTORE_LABEL = "pgblobdump restore"


@dataclass(frozen=True)
class SeedDump:
    """One dump as the seed published it (1M empty LOs). ``archive_bytes`` is None where
    it published no comparable size (for -Fd only ``du``, allocated, not apparent)."""

    wall_s: float
    max_rss_kb: int
    archive_bytes: float | None
    files: int


SEED_DUMPS: dict[Contender, SeedDump] = {
    # /usr/bin/time -f '%E %Mk mem'; ls -lh (M = MiB); find DIR | wc -l counts DIR itself.
    Contender(PG_DUMP, 16, "custom"): SeedDump(36.73, 755_692, 211 * 2**20, 1),
    Contender(PG_DUMP, 17, "custom"): SeedDump(34.69, 217_776, 29 * 2**20, 1),
    Contender(PG_DUMP, 16, "directory"): SeedDump(503.48, 755_624, None, 1_000_003 - 1),
    Contender(PG_DUMP, 17, "directory"): SeedDump(471.04, 217_980, None, 1_001_002 - 1),
}
"""The seed's figures at 1M LOs (8:23.48 is 503.48 s)."""

FIGURES = ("wall", "peak_rss", "archive_bytes", "files")
"""The four figures of the table, each with a ratio to the reference row."""


@dataclass(frozen=True)
class Figures:
    """One row's four figures (medians); archive and files are None for a restore."""

    wall_s: float
    max_rss_kb: float
    archive_bytes: float | None = None
    files: float | None = None

    def get(self, figure: str) -> float | None:
        return {
            "wall": self.wall_s,
            "peak_rss": self.max_rss_kb,
            "archive_bytes": self.archive_bytes,
            "files": self.files,
        }[figure]


@dataclass(frozen=True)
class HeadlineRow:
    """One dump or restore at ``count`` LOs: its figures, each over the reference row's
    (``ratios``, None where either is missing or zero), and the seed's ratio where the
    seed measured the same thing (``seed``)."""

    count: int
    step: str
    what: str
    figures: Figures
    ratios: dict[str, float | None]
    seed: dict[str, float | None]


def _over(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _ratios(f: Figures, base: Figures | None) -> dict[str, float | None]:
    """Each of ``f``'s figures over ``base``'s (None without a base or a figure)."""
    return {k: _over(f.get(k), None if base is None else base.get(k)) for k in FIGURES}


def _seed_ratios(contender: Contender) -> dict[str, float | None]:
    mine, ref = SEED_DUMPS.get(contender), SEED_DUMPS[REFERENCE]
    if mine is None:
        return dict.fromkeys(FIGURES)
    return {
        "wall": mine.wall_s / ref.wall_s,
        "peak_rss": mine.max_rss_kb / ref.max_rss_kb,
        "archive_bytes": _over(mine.archive_bytes, ref.archive_bytes),
        "files": mine.files / ref.files,
    }


def _dump_figures(s: DumpSummary) -> Figures:
    return Figures(s.wall_s.median, s.max_rss_kb.median, s.apparent_bytes.median, float(s.files))


def _restore_what(r: RestoreSummary) -> str:
    """``pg_restore 17 -Fc -j 2``: the archive's format is pg_restore's own -F option."""
    if r.contender.tool == PACKED:
        return PACKED_RESTORE_LABEL
    c = r.contender
    mode = "" if r.mode_label == ONE_JOB else f" {r.mode_label}"
    return f"pg_restore {c.major} -F{FORMATS[c.format]}{mode}"


def _reference(dumps: Sequence[DumpSummary]) -> Contender:
    """pg_dump 17 -Fc when measured; else the first pg_dump contender, else the first."""
    have = [s.contender for s in dumps]
    if REFERENCE in have:
        return REFERENCE
    stock = [c for c in have if c.tool == PG_DUMP]
    return (stock or have)[0]


def headline_rows(
    dumps: Sequence[DumpSummary], restores: Sequence[RestoreSummary]
) -> tuple[Contender | None, list[HeadlineRow]]:
    """The reference contender and the rows: per count, its dumps then its restores
    (restores over the reference archive's one-job restore)."""
    if not dumps:
        return None, []
    ref = _reference(dumps)
    rows: list[HeadlineRow] = []
    for count in sorted({s.count for s in dumps}):
        here = [s for s in dumps if s.count == count]
        base = next((_dump_figures(s) for s in here if s.contender == ref), None)
        for s in here:
            f = _dump_figures(s)
            rows.append(HeadlineRow(count, "dump", s.contender.label, f, _ratios(f, base),
                                    _seed_ratios(s.contender)))  # fmt: skip
        back = [r for r in restores if r.count == count]
        ref_restore = next(
            (r for r in back if r.contender == ref and r.mode_label == ONE_JOB), None
        )
        rbase = None
        if ref_restore is not None:
            rbase = Figures(ref_restore.wall_s.median, ref_restore.max_rss_kb.median)
        for r in back:
            f = Figures(r.wall_s.median, r.max_rss_kb.median)
            rows.append(HeadlineRow(count, "restore", _restore_what(r), f, _ratios(f, rbase),
                                    dict.fromkeys(FIGURES)))  # fmt: skip
    return ref, rows


def ratio_text(v: float) -> str:
    """``0.082x``, ``1.00x``, ``10.6x``, ``10,002x``: two or three figures that count."""
    if v < 0.1:
        return f"{v:.2g}x"
    if v < 10:
        return f"{v:.2f}x"
    return f"{v:.1f}x" if v < 100 else f"{v:,.0f}x"


def _times(value: float | None, seed: float | None, sep: str = " ") -> str:
    if value is None:
        return "-"
    return ratio_text(value) if seed is None else f"{ratio_text(value)}{sep}({ratio_text(seed)})"


def _secs(v: float) -> str:
    return f"{v:,.2f}" if v < 10 else f"{v:,.1f}"


PACKED_RSS_NOTE = (
    "pgblobdump's peak RSS ({ratio} here) is the Python interpreter's floor: about 40 MiB"
    " of interpreter and libraries before the first LO, and about the same at 1,000,000 LOs"
    " (52 MiB measured, where pg_dump 17 peaks at ~215 MiB)"
)
"""Why packed's RSS ratio is high at small counts (benchmarks/RESULTS.md has the 1M runs:
its "peak RSS MB" column is ru_maxrss KiB / 1024, so MiB, as both figures here)."""
TRANSACTION_SIZE = "--transaction-size "
SHORT_TRANSACTION_SIZE = "T="
"""The compact table's spelling of ``--transaction-size N`` (as the restore plot's labels)."""


def _what(r: HeadlineRow, compact: bool) -> str:
    """The row's name; compact: a restore's mode on a line of its own (``pg_restore 17
    -Fd`` over ``  -j 2 T=1000``), so a narrow name column breaks it there and nowhere else."""
    if not compact:
        return r.what
    words = r.what.replace(TRANSACTION_SIZE, SHORT_TRANSACTION_SIZE).split(" ", 3)
    if r.step == "restore" and len(words) == 4:
        return " ".join(words[:3]) + "\n  " + words[3]
    return " ".join(words)


def _own_notes(rows: Sequence[HeadlineRow], compact: bool) -> list[str]:
    out = []
    packed = [r for r in rows if r.what in (PACKED_LABEL, PACKED_RESTORE_LABEL)
              and r.ratios["peak_rss"] is not None]  # fmt: skip
    if packed:
        ratio = " and ".join(dict.fromkeys(ratio_text(r.ratios["peak_rss"] or 0) for r in packed))
        out.append(PACKED_RSS_NOTE.format(ratio=ratio))
    if compact and any(TRANSACTION_SIZE in r.what for r in rows):
        out.append(f"{SHORT_TRANSACTION_SIZE}N: pg_restore's {TRANSACTION_SIZE}N")
    return out


def headline_table(
    dumps: Sequence[DumpSummary],
    restores: Sequence[RestoreSummary],
    notes: Sequence[str] = (),
    compact: bool = False,
) -> Table:
    """The main job's table: time, peak RSS, archive bytes and files of every dump and
    restore, each over the reference's, with the seed's ratio in parentheses.

    ``compact``, for a narrow terminal: the seed's ratio on a line of its own under ours,
    and ``--transaction-size N`` spelled ``T=N`` (a note says so), so that every name
    stays whole in about 100 columns."""
    ref, rows = headline_rows(dumps, restores)
    counts = sorted({r.count for r in rows})
    sep = "\n" if compact else " "
    out = [
        {
            "los": r.count,
            "step": r.step,
            "what": _what(r, compact),
            "wall_s": _secs(r.figures.wall_s),
            "peak_rss": format_bytes(r.figures.max_rss_kb * 1024),
            "archive": "-" if r.figures.archive_bytes is None
            else format_bytes(r.figures.archive_bytes),
            "files": "-" if r.figures.files is None else f"{r.figures.files:,.0f}",
            **{f"{k}_x": _times(r.ratios[k], r.seed[k], sep) for k in FIGURES},
        }
        for r in rows
    ]  # fmt: skip
    cols = [Column("los", "LOs", numeric=True)] if len(counts) > 1 else []
    cols += [
        Column("what", "dump / restore"), Column("wall_s", "wall s", numeric=True),
        Column("peak_rss", "peak RSS", numeric=True), Column("archive", numeric=True),
        Column("files", numeric=True), Column("wall_x", "wall x", numeric=True),
        Column("peak_rss_x", "RSS x", numeric=True),
        Column("archive_bytes_x", "bytes x", numeric=True),
        Column("files_x", "files x", numeric=True),
    ]  # fmt: skip
    name = ref.label if ref is not None else "-"
    at = f"{counts[0]:,} LOs: " if len(counts) == 1 else ""
    what = (
        f"each dump and restore over {name} (restores over its pg_restore, one job)"
        if any(r.step == "restore" for r in rows)
        else f"each dump over {name}"
    )
    title = f"{at}{what}; the seed's ratios at {SEED_COUNT:,} LOs in parentheses"
    return Table(cols, out, title=title, notes=(*notes, *_own_notes(rows, compact)))
