"""Plots of a compare run: time, peak memory, archive size and file count vs LO count.

One figure, four panels, one line per contender (colour = major, line style = format),
written as PNG and SVG. matplotlib's Agg backend needs no display.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pgblobdump.compare.matrix import Contender
from pgblobdump.compare.ratios import DumpSummary, summarize_dumps
from pgblobdump.compare.results import Results
from pgblobdump.harness.plots import save_figure

PLOT_NAME = "compare"
_COLOURS = {16: "#d62728", 17: "#1f77b4", 18: "#2ca02c"}
_STYLES = {"custom": ("-", "o"), "directory": ("--", "s"), "packed": ("-.", "D")}
_PACKED_COLOUR = "black"

Panel = tuple[str, str, Callable[[DumpSummary], float | None], bool]
PANELS: tuple[Panel, ...] = (
    # (title, unit, figure, log y always): sizes and files differ by orders of magnitude
    # between formats at every count, so a linear axis would hide one of them.
    ("wall time", "seconds", lambda s: s.wall_s.median, False),
    ("peak RSS", "MiB", lambda s: s.max_rss_kb.median / 1024, False),
    (
        "archive size (apparent; dotted: allocated)",
        "MB",
        lambda s: s.apparent_bytes.median / 1e6,
        True,
    ),
    ("files in the archive", "files", lambda s: float(s.files), True),
)


def write_plots(results: Results, folder: Path) -> list[Path]:
    """Write ``compare.png`` and ``compare.svg`` into ``folder``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    summaries = summarize_dumps(results.dumps)
    by_contender: dict[Contender, list[DumpSummary]] = {}
    for s in summaries:
        by_contender.setdefault(s.contender, []).append(s)
    counts = sorted({s.count for s in summaries})
    log = len(counts) > 1 and counts[0] > 0 and counts[-1] / counts[0] >= 10
    folder.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    try:
        for ax, panel in zip(axes.flat, PANELS, strict=True):
            if len(counts) == 1:
                _bars(ax, panel, by_contender, counts[0])
            else:
                _lines(ax, panel, by_contender, log)
            ax.set_title(panel[0])
            ax.set_ylabel(panel[1])
            if (log and len(counts) > 1) or panel[3]:
                ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            # Plain numbers (60, 1e+06 -> 1,000,000) instead of 6x10^1 on log axes.
            plain = FuncFormatter(lambda v, _pos: f"{v:,.10g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_formatter(plain if panel[0] == "wall time" else NullFormatter())
            if len(counts) > 1:
                ax.xaxis.set_major_formatter(plain)
        if len(counts) > 1:
            axes.flat[0].legend(loc="best", fontsize="small")
        server = results.meta.get("source", {}).get("server_version", "?")
        fig.suptitle(
            f"pg_dump of empty large objects (server {server}, figures from {results.via})"
        )
        return save_figure(fig, folder, PLOT_NAME)
    finally:
        plt.close(fig)


def _lines(ax: Any, panel: Panel, by_contender: dict[Contender, list[DumpSummary]],
           log: bool) -> None:  # fmt: skip
    """A line per contender against LO count (several counts)."""
    title, _unit, get, _log_y = panel
    for contender, rows in sorted(by_contender.items()):
        rows = sorted(rows, key=lambda r: r.count)
        style, marker = _STYLES.get(contender.format, ("-", "^"))
        colour = _PACKED_COLOUR if contender.tool == "packed" else _COLOURS.get(contender.major)
        xs = [r.count for r in rows]
        ax.plot(xs, [get(r) for r in rows], linestyle=style, marker=marker, color=colour,
                label=contender.label)  # fmt: skip
        if title.startswith("archive") and contender.is_directory:
            ax.plot(xs, [r.allocated_bytes.median / 1e6 for r in rows], linestyle=":",
                    marker="x", color=colour, alpha=0.7)  # fmt: skip
    ax.set_xlabel("large objects")
    if log:
        ax.set_xscale("log")


def _bars(ax: Any, panel: Panel, by_contender: dict[Contender, list[DumpSummary]],
          count: int) -> None:  # fmt: skip
    """A bar per contender, labelled with its value (one count: a line would be a dot)."""
    title, unit, get, _log_y = panel
    items = sorted(by_contender.items())
    labels = [c.label.replace("pg_dump ", "") for c, _ in items]
    colours = [_PACKED_COLOUR if c.tool == "packed" else _COLOURS.get(c.major, "grey")
               for c, _ in items]  # fmt: skip
    values = [get(rows[0]) or 0.0 for _, rows in items]
    bars = ax.bar(labels, values, color=colours, alpha=0.85)
    ax.bar_label(bars, labels=[_short(v, unit) for v in values], fontsize="small")
    if title.startswith("archive"):
        allocated = [rows[0].allocated_bytes.median / 1e6 for _, rows in items]
        shown = [a if c.is_directory else 0.0 for (c, _), a in zip(items, allocated, strict=True)]
        extra = ax.bar(labels, shown, color="none", edgecolor=colours, linestyle=":",
                       linewidth=1.5)  # fmt: skip
        ax.bar_label(extra, labels=[_short(v, unit) if v else "" for v in shown],
                     fontsize="small")  # fmt: skip
    ax.margins(y=0.12)  # room for the value labels above the tallest bar
    ax.set_xlabel(f"pg_dump major and format, {count:,} large objects")


def _short(value: float, unit: str) -> str:
    if unit == "files":
        return f"{value:,.0f}"
    return f"{value:,.0f}" if value >= 10 else f"{value:.2f}"
