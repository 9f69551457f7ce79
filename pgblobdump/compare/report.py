"""Turn compare results into report tables (no terminal needed) and one JSON document."""

from __future__ import annotations

from typing import Any

from pgblobdump.compare.entries import NATIVE, NO_TOC, NOT_LISTED, PG_RESTORE_L
from pgblobdump.compare.headline import headline_rows, headline_table, ratio_text
from pgblobdump.compare.ratios import (
    SEED_TOLERANCE,
    DumpSummary,
    PackedRatio,
    Ratio,
    RestoreSummary,
    agreement,
    harness_overhead,
    major_ratios,
    packed_ratios,
    summarize_dumps,
    summarize_restores,
)
from pgblobdump.compare.results import Results
from pgblobdump.harness.stats import Spread
from pgblobdump.report.table import Column, Table, jsonable
from pgblobdump.units import format_bytes


def _spread_text(s: Spread | None, show: Any) -> str:
    if s is None:
        return "-"
    text: str = show(s.median)
    return text if s.n == 1 or s.low == s.high else f"{text} ({show(s.low)}-{show(s.high)})"


def _secs(v: float) -> str:
    return f"{v:,.2f}" if v < 10 else f"{v:,.1f}"


def _kib(v: float) -> str:
    return format_bytes(v * 1024)


FIGURE_NAMES = {
    "wall": "wall time",
    "peak_rss": "peak RSS",
    "archive_bytes": "archive size",
    "allocated_bytes": "allocated on disk",
    "toc_bytes": "toc.dat size",
    "files": "files",
    "restore wall": "restore wall time",
}
"""The figures as people read them (JSON keeps the keys)."""


def figure_name(key: str) -> str:
    return FIGURE_NAMES.get(key, key.replace("_", " "))


def _entries_text(entries: dict[str, int]) -> str:
    total = sum(entries.values())
    lo = {k: v for k, v in entries.items() if k.startswith("BLOB")}
    parts = ", ".join(f"{k} {v:,}" for k, v in sorted(lo.items()))
    return f"{total:,} ({parts})" if parts else f"{total:,}"


def dump_table(summaries: list[DumpSummary], notes: list[str] | None = None) -> Table:
    rows = [
        {
            "los": s.count,
            "contender": s.contender.label,
            "wall_s": _spread_text(s.wall_s, _secs),
            "peak_rss": _spread_text(s.max_rss_kb, _kib),
            "user_s": _spread_text(s.user_s, _secs),
            "sys_s": _spread_text(s.sys_s, _secs),
            "archive": _spread_text(s.apparent_bytes, format_bytes),
            "allocated": _spread_text(s.allocated_bytes, format_bytes),
            "toc_dat": _spread_text(s.toc_bytes, format_bytes),
            "files": s.files,
            "entries": "-" if s.entries_via == NO_TOC else _entries_text(s.entries),
            "runs": s.wall_s.n,
        }
        for s in summaries
    ]
    cols = [
        Column("los", "LOs", numeric=True), Column("contender"),
        Column("wall_s", "wall s", numeric=True), Column("peak_rss", "peak RSS", numeric=True),
        Column("user_s", "user s", numeric=True), Column("sys_s", "sys s", numeric=True),
        Column("archive", numeric=True), Column("allocated", numeric=True),
        Column("toc_dat", "toc.dat", numeric=True), Column("files", numeric=True),
        Column("entries", "TOC entries"), Column("runs", numeric=True),
    ]  # fmt: skip
    return Table(cols, rows, title="pg_dump: median (min-max) over runs", notes=notes or ())


def restore_table(summaries: list[RestoreSummary]) -> Table:
    rows = [
        {
            "los": s.count,
            "archive": s.contender.label,
            "restore": s.mode_label,
            "wall_s": _spread_text(s.wall_s, _secs),
            "peak_rss": _spread_text(s.max_rss_kb, _kib),
            "restored": s.restored_los,
            "checked": s.checked_los,
            "ok": "yes" if s.all_ok else "NO",
        }
        for s in summaries
    ]
    cols = [
        Column("los", "LOs", numeric=True), Column("archive"), Column("restore"),
        Column("wall_s", "wall s", numeric=True), Column("peak_rss", "peak RSS", numeric=True),
        Column("restored", "LOs back", numeric=True),
        Column("checked", "checksummed", numeric=True), Column("ok", "all back"),
    ]  # fmt: skip
    return Table(cols, rows, title="restores into a fresh database, then checked",
                 notes=_checked_notes(summaries))  # fmt: skip


def _checked_notes(summaries: list[RestoreSummary]) -> tuple[str, ...]:
    """What 'checksummed' means, and why it can be fewer than the LOs back."""
    sampled = [s for s in summaries if s.checked_los < s.restored_los]
    what = (
        "LOs back: counted in the restored database; checksummed: LOs whose OID and data"
        " matched the source's (md5 over each OID and md5(lo_get(oid)))"
    )
    if not sampled:
        return (f"{what}: every one",)
    s = sampled[0]
    return (
        f"{what}. {s.checked_los:,} of {s.restored_los:,} is a sample: every n-th OID, about"
        " --verify-sample LOs (default 10,000; --verify-sample 0 checks all)",
    )


def ratio_table(ratios: list[Ratio], notes: tuple[str, ...] = ()) -> Table:
    rows = [
        {
            "los": r.count,
            "format": r.format,
            "versions": f"{r.base} over {r.other}",
            "figure": figure_name(r.figure),
            "ratio": ratio_text(r.value),
            "seed": ratio_text(r.seed) if r.seed else "",
            "off": "" if r.off is None else f"{r.off:+.0%}" + ("" if r.within_tolerance else " !"),
        }
        for r in ratios
    ]
    cols = [
        Column("los", "LOs", numeric=True), Column("format"), Column("versions"),
        Column("figure"), Column("ratio", numeric=True),
    ]  # fmt: skip
    if any(r.seed for r in ratios):  # the seed published figures at three counts only
        cols += [Column("seed", "seed", numeric=True), Column("off", "vs seed", numeric=True)]
    return Table(cols, rows, title="ratios between majors (medians; higher = older is worse)",
                 notes=notes)  # fmt: skip


def packed_table(ratios: list[PackedRatio]) -> Table:
    """A row per pg_dump contender or pg_restore mode and count, a column per figure."""
    by: dict[tuple[int, str], dict[str, Any]] = {}
    for r in ratios:
        row = by.setdefault((r.count, r.against), {"los": r.count, "against": r.against})
        row["wall" if r.figure == "restore wall" else r.figure] = ratio_text(r.value)
    figures = [f for f in FIGURE_NAMES if f != "restore wall" and any(
        r.figure == f or (f == "wall" and r.figure == "restore wall") for r in ratios)]  # fmt: skip
    cols = [Column("los", "LOs", numeric=True), Column("against", "over packed's")]
    cols += [Column(f, figure_name(f), numeric=True) for f in figures]
    rows = [{**{f: "-" for f in figures}, **row} for row in by.values()]
    return Table(cols, rows, title="pg_dump and pg_restore over packed: how many times"
                 " packed's figure each is (medians; higher = packed is better)")  # fmt: skip


def notes(results: Results) -> list[str]:
    """The main table's notes: where the figures come from, and whether the run ended."""
    out = []
    if "wait4" in results.via:
        out.append(
            "figures from the kernel (wait4 rusage): /usr/bin/time (GNU time) was not found;"
            " a peak RSS at pgblobdump's own RSS means 'no more than that'"
        )
    else:
        out.append("figures from GNU time (/usr/bin/time -f %e %M %U %S), as in the seed")
    if not results.meta.get("complete", True):
        out.append("the run stopped early: these are the runs finished before it stopped")
    return out


_ENTRIES_VIA = {
    NATIVE: "read from each archive by pgblobdump's own TOC reader",
    PG_RESTORE_L: f"counted from pg_restore -l (which hides {', '.join(sorted(NOT_LISTED))})",
}


def detail_notes(results: Results) -> list[str]:
    """The dump table's notes: the checks behind the figures, in words."""
    out = []
    agree = agreement(results.dumps, results.restores)
    if agree.runs and agree.cpu_max_diff_s is not None:
        rss = (
            f"peak RSS within {agree.rss_max_diff:.1%} on the {agree.rss_runs} runs that"
            " peaked above the Python process starting them"
            if agree.rss_max_diff is not None
            else "peak RSS not compared: every run peaked below the Python process starting"
            " it, and the kernel's figure cannot go under that"
        )
        out.append(
            "the kernel's own count (wait4 of the /usr/bin/time process) agrees with GNU"
            f" time's on {agree.runs} run{'' if agree.runs == 1 else 's'}: CPU within"
            f" {agree.cpu_max_diff_s:.2f} s; {rss}"
        )
    over = harness_overhead(results.dumps)
    if over is not None:
        out.append(
            f"starting and reaping each pg_dump added at most {over:.2%} to its wall time"
            " (dumps of 10 s or more)"
        )
    sources = sorted({d.entries_via for d in results.dumps} - {NO_TOC})
    if sources:
        how = "; ".join(_ENTRIES_VIA.get(v, v) for v in sources)
        packed = " (a packed archive has no TOC: -)" if any(
            d.entries_via == NO_TOC for d in results.dumps) else ""  # fmt: skip
        out.append(f"TOC entries: {how}{packed}")
    return out


def tables(results: Results, details: bool = False, compact: bool = False) -> list[Table]:
    """The main table (every dump and restore over pg_dump 17 -Fc, the seed's ratios
    beside, the run's notes under it; ``compact`` for a narrow terminal); with
    ``details`` also the dump table with TOC entries, the restores, the ratios between
    majors and against packed."""
    dumps = summarize_dumps(results.dumps)
    restores = summarize_restores(results.restores)
    out = [headline_table(dumps, restores, notes(results), compact=compact)]
    if not details:
        return out
    out.append(dump_table(dumps, detail_notes(results)))
    if restores:
        out.append(restore_table(restores))
    ratios = major_ratios(dumps)
    if ratios:
        tolerance = (f"! marks a ratio more than {SEED_TOLERANCE:.0%} away from the seed's",)
        out.append(ratio_table(ratios, tolerance if any(
            r.within_tolerance is False for r in ratios) else ()))  # fmt: skip
    against = packed_ratios(dumps, restores)
    if against:
        out.append(packed_table(against))
    return out


def json_document(results: Results) -> dict[str, Any]:
    """Everything in raw units: summaries, ratios, raw records and the run's facts."""
    dumps = summarize_dumps(results.dumps)
    reference, rows = headline_rows(dumps, summarize_restores(results.restores))
    return {
        "headline": {
            "reference": None if reference is None else reference.key,
            "rows": jsonable(rows),
        },
        "summary": jsonable(dumps),
        "restores": jsonable(summarize_restores(results.restores)),
        "ratios": [
            {**jsonable(r), "off": r.off, "within_tolerance": r.within_tolerance}
            for r in major_ratios(dumps)
        ],
        "packed_ratios": jsonable(packed_ratios(dumps, summarize_restores(results.restores))),
        "agreement": jsonable(agreement(results.dumps, results.restores)),
        "harness_overhead": harness_overhead(results.dumps),
        "via": results.via,
        "runs": {"dumps": jsonable(results.dumps), "restores": jsonable(results.restores)},
        "meta": results.meta,
    }


def flat_table(results: Results) -> Table:
    """One row per measured run (dump or restore), raw numbers: the CSV form."""
    rows: list[dict[str, Any]] = []
    for d in results.dumps:
        rows.append({
            "phase": "dump", "los": d.count, "contender": d.contender.key, "mode": "",
            "repeat": d.repeat, "wall_s": d.stats.wall_s, "max_rss_kb": d.stats.max_rss_kb,
            "user_s": d.stats.user_s, "sys_s": d.stats.sys_s,
            "apparent_bytes": d.archive.apparent_bytes,
            "allocated_bytes": d.archive.allocated_bytes, "toc_bytes": d.archive.toc_bytes,
            "files": d.archive.files, "toc_entries": d.toc_entries, "via": d.stats.via,
        })  # fmt: skip
    for r in results.restores:
        rows.append({
            "phase": "restore", "los": r.count, "contender": r.contender.key,
            "mode": r.mode.label, "repeat": r.repeat, "wall_s": r.stats.wall_s,
            "max_rss_kb": r.stats.max_rss_kb, "user_s": r.stats.user_s,
            "sys_s": r.stats.sys_s, "restored_los": r.restored_los, "ok": r.ok,
            "via": r.stats.via,
        })  # fmt: skip
    keys = [
        "phase", "los", "contender", "mode", "repeat", "wall_s", "max_rss_kb", "user_s",
        "sys_s", "apparent_bytes", "allocated_bytes", "toc_bytes", "files", "toc_entries",
        "restored_los", "ok", "via",
    ]  # fmt: skip
    return Table([Column(k) for k in keys], rows, title="compare runs")


def _over(here: float, there: float) -> str:
    """``here / there`` as ``1.23x``; ``-`` when there is nothing to divide by."""
    return f"{here / there:.2f}x" if there else "-"


def against_table(mine: Results, theirs: Results, their_name: str) -> Table:
    """Each (count, contender) measured in both runs: figures here over figures there.

    Times move with the machine; RSS and sizes should not, so a size ratio away from 1.00x
    means a different pg_dump build or data, not a faster disk.
    """
    there = {(s.count, s.contender): s for s in summarize_dumps(theirs.dumps)}
    rows = []
    for s in summarize_dumps(mine.dumps):
        o = there.get((s.count, s.contender))
        if o is None:
            continue
        rows.append(
            {
                "los": s.count,
                "contender": s.contender.label,
                "wall": _over(s.wall_s.median, o.wall_s.median),
                "peak_rss": _over(s.max_rss_kb.median, o.max_rss_kb.median),
                "archive": _over(s.apparent_bytes.median, o.apparent_bytes.median),
                "files": f"{s.files:,} / {o.files:,}",
            }
        )
    cols = [
        Column("los", "LOs", numeric=True), Column("contender"),
        Column("wall", "wall", numeric=True), Column("peak_rss", "peak RSS", numeric=True),
        Column("archive", numeric=True), Column("files", "files here / there", numeric=True),
    ]  # fmt: skip
    where = theirs.meta.get("machine", {}).get("hostname", "?")
    return Table(
        cols,
        rows,
        title=f"this run over {their_name} ({where}): medians, here / there",
        notes=() if rows else ("no (count, contender) was measured in both runs",),
    )
