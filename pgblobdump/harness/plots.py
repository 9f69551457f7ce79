"""Figures as PNG and SVG for compare and bench; matplotlib's Agg backend needs no display."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def grouped_bars(
    folder: Path, name: str, ylabel: str, groups: Sequence[str],
    points: Sequence[tuple[str, str, float]], log: bool = True,
) -> list[Path]:  # fmt: skip
    """A bar chart of ``points`` (group, series, value): groups along x in the order
    given, one bar per series in each; ``NAME.png`` and ``NAME.svg`` in ``folder``.
    ``log``: a log axis where the values span ten times or more (never over one value).
    The bench commands draw with it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = list(dict.fromkeys(s for _g, s, _v in points))
    value = {(g, s): v for g, s, v in points}
    width = 0.8 / max(len(series), 1)
    folder.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(len(series), 1) / 2), 4.5))
    try:
        for i, s in enumerate(series):
            xs = [g + i * width for g in range(len(groups))]
            ys = [value.get((grp, s), 0.0) for grp in groups]
            ax.bar(xs, ys, width, label=s)
        ax.set_xticks([g + width * (len(series) - 1) / 2 for g in range(len(groups))])
        ax.set_xticklabels(groups, rotation=20, ha="right")
        if log and log_worthwhile([v for _g, _s, v in points]):
            ax.set_yscale("log")
            ylabel += " (log scale)"
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize="small")
        return save_figure(fig, folder, name)
    finally:
        plt.close(fig)


LOG_SPAN = 10.0
"""An axis is logarithmic only when its largest value is this many times its smallest."""


def log_worthwhile(values: Sequence[float]) -> bool:
    """Whether a log axis helps: every value positive and the largest at least LOG_SPAN
    times the smallest. One value, or values that barely differ, read better on a linear
    axis (a log axis over one value has no ticks worth reading)."""
    if not values or min(values) <= 0:
        return False
    return max(values) / min(values) >= LOG_SPAN


def save_figure(fig: Any, folder: Path, name: str) -> list[Path]:
    """``NAME.png`` and ``NAME.svg`` of ``fig`` in ``folder``."""
    fig.tight_layout()
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    for path in paths:
        fig.savefig(path, dpi=110)
    return paths
