"""Tables for a terminal too narrow for their usual layout: the pure parts (which
heading stands for what, each row's first cell on a line of its own), no terminal needed."""

from __future__ import annotations

import textwrap

from pgblobdump.report.table import Table

GAP = "  "
INDENT = "  "


def legend(table: Table) -> str:
    """``compr.: compressed``: the short headings a narrow layout uses that are not their
    heading wrapped (``bytes/ row`` is ``bytes/row``); empty when there are none."""
    pairs = [f"{c.short}: {c.heading}" for c in table.columns
             if c.short and c.short.replace(" ", "") != c.heading.replace(" ", "")]  # fmt: skip
    return ", ".join(pairs)


def stacked(table: Table, width: int) -> list[str] | None:
    """``table`` with each row's first cell on a line of its own (wrapped at words), the
    other cells on the line under it, indented, in aligned columns (numeric ones
    right-aligned) under headings wrapped at words (short ones where given); None when
    even that is wider than ``width``. Cells are never cut."""
    label, *rest = table.columns
    cells = table.cells()
    heads = [(c.short or c.heading).split() for c in rest]
    widths = [max([*(len(w) for w in h), *(len(row[i + 1]) for row in cells)], default=1)
              for i, h in enumerate(heads)]  # fmt: skip
    if len(INDENT) + sum(widths) + len(GAP) * (len(widths) - 1) > width:
        return None
    wrapped = [_words(h, w) for h, w in zip(heads, widths, strict=True)]
    depth = max((len(h) for h in wrapped), default=0)

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if c.numeric else v.ljust(w)
                 for v, w, c in zip(values, widths, rest, strict=True)]  # fmt: skip
        return (INDENT + GAP.join(parts)).rstrip()

    out = [label.short or label.heading]
    for k in range(depth):  # the headings bottom-aligned, as rich's
        out.append(line([h[k - depth + len(h)] if k >= depth - len(h) else "" for h in wrapped]))
    out.append(INDENT + GAP.join("-" * w for w in widths))
    for row in cells:
        for part in row[0].splitlines() or [""]:
            out += textwrap.wrap(part, width, break_on_hyphens=False) or [""]
        out.append(line(row[1:]))
    return out


def _words(words: list[str], width: int) -> list[str]:
    """A heading's words joined into lines of at most ``width`` (a word is never wider)."""
    lines: list[str] = []
    for w in words:
        if lines and len(lines[-1]) + 1 + len(w) <= width:
            lines[-1] += " " + w
        else:
            lines.append(w)
    return lines
