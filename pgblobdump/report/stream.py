"""Rows written as they come, for listings too long to hold (a million LOs): JSON, CSV,
Markdown or tab-separated text, with the same cell rules as ``report.table``.

Each writer fetches the first record before it writes anything (the ``[`` or the header
line), so a source that fails at once (a damaged archive) leaves stdout empty, never a
stray ``[``. A failure after that leaves partial output, with a non-zero exit status.
"""

from __future__ import annotations

import csv
import itertools
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, TextIO, TypeVar

from pgblobdump.report.formats import Format

T = TypeVar("T")


def started(records: Iterable[T]) -> Iterator[T] | None:
    """``records`` with its first item already fetched (so that an error in reading it is
    raised here, before any output), or None when there is none."""
    it = iter(records)
    for first in it:
        return itertools.chain((first,), it)
    return None


def cell(value: Any) -> str:
    """A raw value as one text cell: None is empty, lists are joined with ``; ``."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return "; ".join(str(v) for v in value)
    return str(value)


def write_json(out: TextIO, records: Iterable[dict[str, Any]]) -> None:
    """A JSON array written record by record."""
    rows = started(records)
    if rows is None:
        out.write("[]\n")
        return
    out.write("[")
    sep = "\n  "
    for rec in rows:
        out.write(sep)
        out.write(json.dumps(rec, ensure_ascii=False))
        sep = ",\n  "
    out.write("\n]\n")


def write_csv(out: TextIO, columns: Sequence[str], records: Iterable[dict[str, Any]]) -> None:
    rows = started(records)
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for rec in rows or ():
        w.writerow([cell(rec[c]) for c in columns])


def write_markdown(out: TextIO, columns: Sequence[str], records: Iterable[dict[str, Any]]) -> None:
    rows = started(records)
    out.write("| " + " | ".join(columns) + " |\n")
    out.write("|" + "|".join("---" for _ in columns) + "|\n")
    for rec in rows or ():
        cells = (cell(rec[c]).replace("|", "\\|").replace("\n", " ") for c in columns)
        out.write("| " + " | ".join(cells) + " |\n")


def write_tsv(out: TextIO, columns: Sequence[str], records: Iterable[dict[str, Any]]) -> None:
    """Tab-separated lines under a header line; newlines inside cells become spaces."""
    rows = started(records)
    out.write("\t".join(columns) + "\n")
    for rec in rows or ():
        out.write("\t".join(cell(rec[c]).replace("\n", " ") for c in columns) + "\n")


def write_rows(
    out: TextIO, fmt: Format, columns: Sequence[str], records: Iterable[dict[str, Any]]
) -> None:
    """``records`` streamed as JSON, CSV or Markdown, or tab-separated text for a table
    (a listing may be too long to hold for a terminal table)."""
    if fmt is Format.JSON:
        write_json(out, records)
    elif fmt is Format.CSV:
        write_csv(out, columns, records)
    elif fmt is Format.MARKDOWN:
        write_markdown(out, columns, records)
    else:
        write_tsv(out, columns, records)


def write_json_object(
    out: TextIO,
    head: Mapping[str, Any],
    key: str,
    records: Iterable[dict[str, Any]],
    tail: Callable[[], Mapping[str, Any]],
) -> None:
    """One JSON object: ``head``'s fields, then ``key``: the records as an array written as
    they come, then ``tail()``'s fields (counts, known only once the records are out).
    The first record is fetched before the ``{``, as in every writer here."""
    rows = started(records)
    out.write("{")
    for k, v in head.items():
        out.write(f"\n  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},")
    out.write(f"\n  {json.dumps(key)}: [")
    sep = "\n    "
    for rec in rows or ():
        out.write(sep)
        out.write(json.dumps(rec, ensure_ascii=False))
        sep = ",\n    "
    out.write("\n  ]" if rows is not None else "]")
    for k, v in tail().items():
        out.write(f",\n  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}")
    out.write("\n}\n")


ALIGN_SAMPLE = 1000
"""Rows read before an aligned listing starts: its column widths are theirs."""


def write_aligned(
    out: TextIO,
    columns: Sequence[str],
    records: Iterable[dict[str, Any]],
    numeric: Collection[str] = (),
    show: Mapping[str, Callable[[Any], str]] | None = None,
    width: int | None = None,
    titles: Mapping[str, str] | None = None,
) -> int:
    """A table for people, streamed: the header and rows in columns as wide as the first
    ALIGN_SAMPLE rows need (a later, wider cell pushes its row right), the ``numeric``
    columns right-aligned, the last column left unpadded. ``show`` formats a column's
    values (default: ``cell``); ``titles`` heads a column with other words than its key
    (which JSON, CSV and tab-separated lines keep). ``width``: the terminal's; when the
    columns need more, the widest text columns are narrowed (``fit``) and a cell wider
    than its column is cut with ``…``, numbers never; so is a later cell that would make
    its line wider. Returns the number of cells cut."""
    rows = started(records)
    fmt = {c: (show or {}).get(c, cell) for c in columns}

    def cells(rec: dict[str, Any]) -> list[str]:
        return [fmt[c](rec[c]).replace("\n", " ") for c in columns]

    sample = [cells(r) for r in itertools.islice(rows, ALIGN_SAMPLE)] if rows else []
    heads = [(titles or {}).get(c, c) for c in columns]
    widths = [max([len(heads[i]), *(len(r[i]) for r in sample)]) for i in range(len(columns))]
    last = len(columns) - 1
    fixed = [c in numeric for c in columns]
    caps: list[int | None] = [None] * len(columns)
    if width is not None:
        widths = fit(widths, fixed, [len(h) for h in heads], width - GAP * last)
        room = width - sum(widths[:last]) - GAP * last  # the last column takes what is left
        caps = [None if f else (max(widths[i], room) if i == last else widths[i])
                for i, f in enumerate(fixed)]  # fmt: skip
    cut = 0

    def line(values: Sequence[str]) -> str:
        nonlocal cut
        parts = []
        for i, (v, w) in enumerate(zip(values, widths, strict=True)):
            cap = caps[i]
            if cap is not None and len(v) > cap:
                v, cut = v[: cap - 1] + "…", cut + 1
            if columns[i] in numeric:
                parts.append(v.rjust(w))
            else:
                parts.append(v if i == last else v.ljust(w))
        return (" " * GAP).join(parts).rstrip() + "\n"

    out.write(line(heads))
    out.write((" " * GAP).join("-" * w for w in widths) + "\n")
    for values in sample:
        out.write(line(values))
    for rec in rows or ():
        out.write(line(cells(rec)))
    return cut


GAP = 2
"""Spaces between two aligned columns."""


def fit(widths: Sequence[int], fixed: Sequence[bool], least: Sequence[int], room: int) -> list[int]:
    """``widths`` within ``room`` in all: the ``fixed`` columns (numbers) as they are, the
    others' widest narrowed to one width, the most that fits (a narrower one kept whole),
    none below its ``least`` (its heading); as they are when they fit already."""
    if sum(widths) <= room:
        return list(widths)
    free = room - sum(w for w, f in zip(widths, fixed, strict=True) if f)
    elastic = [i for i, f in enumerate(fixed) if not f]

    def total(cap: int) -> int:
        return sum(min(widths[i], max(cap, least[i])) for i in elastic)

    cap = max((widths[i] for i in elastic), default=0)
    while cap > 1 and total(cap) > free:
        cap -= 1
    return [w if f else min(w, max(cap, least[i]))
            for i, (w, f) in enumerate(zip(widths, fixed, strict=True))]  # fmt: skip
