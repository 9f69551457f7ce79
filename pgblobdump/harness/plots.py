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
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize="small")
        return save_figure(fig, folder, name)
    finally:
        plt.close(fig)


def save_figure(fig: Any, folder: Path, name: str) -> list[Path]:
    """``NAME.png`` and ``NAME.svg`` of ``fig`` in ``folder``."""
    fig.tight_layout()
    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    for path in paths:
        fig.savefig(path, dpi=110)
    return paths
