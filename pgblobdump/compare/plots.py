"""Plots of a compare run: dumps (time, peak memory, archive size, files) and, when the run
restored, restores (time, peak memory), against LO count.

A line per contender (colour = major, line style = format; for restores the marker is
the mode), or a bar per contender when the run measured one count (a line would be a
dot). An axis is logarithmic only where its values span ten times or more, so one count,
or figures that barely differ, get a plain linear axis. PNG and SVG, no display needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgblobdump.compare.matrix import PACKED, Contender
from pgblobdump.compare.ratios import summarize_dumps, summarize_restores
from pgblobdump.compare.results import Results
from pgblobdump.harness.plots import log_worthwhile, save_figure

PLOT_NAME = "compare"
RESTORE_PLOT_NAME = "compare-restore"
_COLOURS = {16: "#d62728", 17: "#1f77b4", 18: "#2ca02c"}
_STYLES = {"custom": "-", "directory": "--", PACKED: "-."}
_MODE_MARKERS = ("o", "s", "^", "v", "D")
_PACKED_COLOUR = "black"


@dataclass(frozen=True)
class Series:
    """One line (or bar) of a panel: ``points`` maps LO count to the figure's value;
    ``extra`` is a second, dotted series of the same colour (allocated bytes)."""

    label: str
    short: str
    contender: Contender
    marker: str
    points: dict[int, float]
    extra: dict[int, float] | None = None


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    series: Sequence[Series]


def _colour(c: Contender) -> str:
    return _PACKED_COLOUR if c.tool == PACKED else _COLOURS.get(c.major, "grey")


def _short(c: Contender) -> str:
    return "packed" if c.tool == PACKED else c.label.replace("pg_dump ", "")


def dump_panels(results: Results) -> list[Panel]:
    """Wall time, peak RSS, archive size (dotted: allocated) and files, per contender."""
    summaries = summarize_dumps(results.dumps)
    contenders = sorted({s.contender for s in summaries})

    def series(get: Callable[[Any], float], extra: Callable[[Any], float] | None = None
               ) -> list[Series]:  # fmt: skip
        out = []
        for c in contenders:
            rows = [s for s in summaries if s.contender == c]
            more = {s.count: extra(s) for s in rows} if extra and c.is_directory else None
            out.append(Series(c.label, _short(c), c, "o", {s.count: get(s) for s in rows}, more))
        return out

    return [
        Panel("dump: wall time", "seconds", series(lambda s: s.wall_s.median)),
        Panel("dump: peak RSS", "MiB", series(lambda s: s.max_rss_kb.median / 1024)),
        Panel(
            "archive size (apparent; dotted and in parentheses: allocated)",
            "MiB",
            series(
                lambda s: s.apparent_bytes.median / 2**20,
                lambda s: s.allocated_bytes.median / 2**20,
            ),
        ),
        Panel("files in the archive", "files", series(lambda s: float(s.files))),
    ]


def restore_panels(results: Results) -> list[Panel]:
    """Wall time and peak RSS of each restore, per contender and mode (empty: none ran)."""
    summaries = summarize_restores(results.restores)
    modes = list(dict.fromkeys(s.mode_label for s in summaries))
    keys = sorted({(s.contender, s.mode_label) for s in summaries},
                  key=lambda k: (k[0], modes.index(k[1])))  # fmt: skip

    def series(get: Callable[[Any], float]) -> list[Series]:
        out = []
        for c, mode in keys:
            rows = [s for s in summaries if (s.contender, s.mode_label) == (c, mode)]
            label = "pgblobdump restore" if c.tool == PACKED else f"{c.label}, {mode}"
            brief = mode.replace("--transaction-size ", "T=").replace("1 job", "")
            short = "packed" if c.tool == PACKED else f"{_short(c)}\n{brief}".strip()
            marker = _MODE_MARKERS[modes.index(mode) % len(_MODE_MARKERS)]
            out.append(Series(label, short, c, marker, {s.count: get(s) for s in rows}))
        return out

    if not summaries:
        return []
    return [
        Panel("restore: wall time", "seconds", series(lambda s: s.wall_s.median)),
        Panel("restore: peak RSS", "MiB", series(lambda s: s.max_rss_kb.median / 1024)),
    ]


def write_plots(results: Results, folder: Path) -> list[Path]:
    """``compare.png``/``.svg`` of the dumps and, when the run restored,
    ``compare-restore.png``/``.svg``, in ``folder``; returns their paths."""
    server = results.meta.get("source", {}).get("server_version", "?")
    paths = _figure(
        dump_panels(results), folder, PLOT_NAME, (2, 2),
        f"pg_dump and packed dumps of large objects (server {server}, figures from"
        f" {results.via})",
    )  # fmt: skip
    restores = restore_panels(results)
    if restores:
        title = f"restores into a fresh database (figures from {results.via})"
        paths += _figure(restores, folder, RESTORE_PLOT_NAME, (2, 1), title)
    return paths


def _figure(panels: list[Panel], folder: Path, name: str, grid: tuple[int, int],
            title: str) -> list[Path]:  # fmt: skip
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    fig = figure(panels, grid, title)
    try:
        return save_figure(fig, folder, name)
    finally:
        plt.close(fig)


def figure(panels: Sequence[Panel], grid: tuple[int, int], title: str) -> Any:
    """The matplotlib Figure of ``panels`` on a ``grid`` (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = sorted({n for p in panels for s in p.series for n in s.points})
    bars = len(counts) == 1
    fig, axes = plt.subplots(*grid, figsize=(12, 4.2 * grid[0]), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=True):
        if bars:
            _bars(ax, panel, counts[0])
        else:
            _lines(ax, panel, log_worthwhile(counts))
        ax.set_title(panel.title)
        ax.set_ylabel(panel.unit)
        _y_axis(ax, panel)
    if not bars:
        axes.flat[0].legend(loc="best", fontsize="small")
    fig.suptitle(title)
    return fig


def log_y(panel: Panel) -> bool:
    """Whether the panel's values (dotted ones too) span ten times or more."""
    return log_worthwhile(_values(panel))


FEW_DECADES = 1000.0
"""A log axis spanning less than this many times gets ticks at 1, 2 and 5 of each decade:
at 10 per decade, values from 3.8 to 44 showed one labelled tick (10)."""


def _y_axis(ax: Any, panel: Panel) -> None:
    """Log only where it helps (log_y), with labelled ticks at 1, 2 and 5 of each decade
    over a span of few decades; plain numbers either way (60 and 1,000,000, not 6x10^1
    and 1e6)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    plain = FuncFormatter(lambda v, _pos: f"{v:,.10g}")
    if log_y(panel):
        ax.set_yscale("log")
        values = _values(panel)
        if max(values) / min(values) < FEW_DECADES:
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    else:
        ax.set_ylim(bottom=0)
        if panel.unit == "files":  # whole files: no 0.2 files tick
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(plain)
    ax.grid(True, which="major", alpha=0.3)


def _values(panel: Panel) -> list[float]:
    """Every value of the panel, dotted ones too."""
    return [v for s in panel.series for v in [*s.points.values(), *(s.extra or {}).values()]]


def _lines(ax: Any, panel: Panel, log_x: bool) -> None:
    """A line per series against LO count (several counts)."""
    from matplotlib.ticker import FuncFormatter

    for s in panel.series:
        xs = sorted(s.points)
        colour = _colour(s.contender)
        style = _STYLES.get(s.contender.format, "-")
        ax.plot(xs, [s.points[x] for x in xs], linestyle=style, marker=s.marker, color=colour,
                label=s.label)  # fmt: skip
        if s.extra:
            ax.plot(xs, [s.extra[x] for x in xs], linestyle=":", marker="x", color=colour,
                    alpha=0.7)  # fmt: skip
    ax.set_xlabel("large objects")
    if log_x:
        ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.10g}"))


def _bars(ax: Any, panel: Panel, count: int) -> None:
    """A bar per series, labelled with its value (one count). A series with a dotted
    second value gets one label, ``value`` over ``(dotted)``, above the taller of its two
    bars: two labels at nearly the same height were drawn over each other (0.23, 0.24)."""
    labels = [s.short for s in panel.series]
    colours = [_colour(s.contender) for s in panel.series]
    values = [s.points.get(count, 0.0) for s in panel.series]
    shown = [(s.extra or {}).get(count, 0.0) for s in panel.series]
    text = [_value(v, panel.unit) + (f"\n({_value(e, panel.unit)})" if e else "")
            for v, e in zip(values, shown, strict=True)]  # fmt: skip
    bars = ax.bar(labels, values, color=colours, alpha=0.85)
    ax.bar_label(bars, labels=[t if e <= v else "" for t, v, e in zip(text, values, shown,
                                                                        strict=True)],
                 fontsize="small")  # fmt: skip
    if any(shown):
        extra = ax.bar(labels, shown, color="none", edgecolor=colours, linestyle=":",
                       linewidth=1.5)  # fmt: skip
        ax.bar_label(extra, labels=[t if e > v else "" for t, v, e in zip(text, values, shown,
                                                                           strict=True)],
                     fontsize="small")  # fmt: skip
    if len(labels) > 8:
        ax.tick_params(axis="x", labelsize="small")
    if len(labels) < 4:  # a bar or two, not as wide as the figure
        ax.set_xlim(-1.5, len(labels) + 0.5)
    ax.margins(y=0.15)  # room for the value labels above the tallest bar
    ax.set_xlabel(f"{count:,} large objects")


def _value(value: float, unit: str) -> str:
    """``2,002`` files; ``45`` MiB, ``5.93`` s, ``0.40`` s, ``0.0052`` MiB: two figures
    that count below 0.1 (0.0055 and 0.012 were both ``0.01``)."""
    if unit == "files" or value >= 10:
        return f"{value:,.0f}"
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"
