"""Plots of a compare run: time, peak memory, archive size and file count vs LO count.

One figure, four panels, one line per contender (colour = major, line style = format),
written as PNG and SVG. matplotlib's Agg backend needs no display.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pgblobdump.compare.matrix import Contender
from pgblobdump.compare.ratios import DumpSummary, summarize_dumps
from pgblobdump.compare.results import Results

PLOT_NAME = "compare"
_COLOURS = {16: "#d62728", 17: "#1f77b4", 18: "#2ca02c"}
_STYLES = {"custom": ("-", "o"), "directory": ("--", "s")}

Panel = tuple[str, str, Callable[[DumpSummary], float | None]]
PANELS: tuple[Panel, ...] = (
    ("wall time", "seconds", lambda s: s.wall_s.median),
    ("peak RSS", "MiB", lambda s: s.max_rss_kb.median / 1024),
    ("archive size (apparent; dotted: allocated)", "MB", lambda s: s.apparent_bytes.median / 1e6),
    ("files in the archive", "files", lambda s: float(s.files)),
)


def write_plots(results: Results, folder: Path) -> list[Path]:
    """Write ``compare.png`` and ``compare.svg`` into ``folder``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summaries = summarize_dumps(results.dumps)
    by_contender: dict[Contender, list[DumpSummary]] = {}
    for s in summaries:
        by_contender.setdefault(s.contender, []).append(s)
    counts = sorted({s.count for s in summaries})
    log = len(counts) > 1 and counts[0] > 0 and counts[-1] / counts[0] >= 10
    folder.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    try:
        for ax, (title, unit, get) in zip(axes.flat, PANELS, strict=True):
            for contender, rows in sorted(by_contender.items()):
                rows = sorted(rows, key=lambda r: r.count)
                style, marker = _STYLES.get(contender.format, ("-", "^"))
                colour = _COLOURS.get(contender.major)
                xs = [r.count for r in rows]
                ys = [get(r) for r in rows]
                ax.plot(xs, ys, linestyle=style, marker=marker, color=colour,
                        label=contender.label)  # fmt: skip
                if title.startswith("archive") and contender.is_directory:
                    ax.plot(xs, [r.allocated_bytes.median / 1e6 for r in rows],
                            linestyle=":", color=colour, alpha=0.7)  # fmt: skip
            ax.set_title(title)
            ax.set_xlabel("large objects")
            ax.set_ylabel(unit)
            if log:
                ax.set_xscale("log")
                ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
        axes.flat[0].legend(loc="best", fontsize="small")
        server = results.meta.get("source", {}).get("server_version", "?")
        fig.suptitle(
            f"pg_dump of empty large objects (server {server}, figures from {results.via})"
        )
        fig.tight_layout()
        paths = [folder / f"{PLOT_NAME}.png", folder / f"{PLOT_NAME}.svg"]
        for path in paths:
            fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return paths
