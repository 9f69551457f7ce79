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
from collections.abc import Iterable, Iterator, Sequence
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
