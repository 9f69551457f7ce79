"""Rows written as they come, for listings too long to hold (a million LOs): JSON, CSV,
Markdown or tab-separated text, with the same cell rules as ``report.table``."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from typing import Any, TextIO


def cell(value: Any) -> str:
    """A raw value as one text cell: None is empty, lists are joined with ``; ``."""
    if value is None:
        return ""
    if isinstance(value, list | tuple):
        return "; ".join(str(v) for v in value)
    return str(value)


def write_json(out: TextIO, records: Iterable[dict[str, Any]]) -> None:
    """A JSON array written record by record."""
    first = True
    out.write("[")
    for rec in records:
        out.write("\n  " if first else ",\n  ")
        out.write(json.dumps(rec, ensure_ascii=False))
        first = False
    out.write("\n]\n" if not first else "]\n")


def write_csv(out: TextIO, columns: Sequence[str], records: Iterable[dict[str, Any]]) -> None:
    w = csv.writer(out, lineterminator="\n")
    w.writerow(columns)
    for rec in records:
        w.writerow([cell(rec[c]) for c in columns])


def write_markdown(out: TextIO, columns: Sequence[str], records: Iterable[dict[str, Any]]) -> None:
    out.write("| " + " | ".join(columns) + " |\n")
    out.write("|" + "|".join("---" for _ in columns) + "|\n")
    for rec in records:
        cells = (cell(rec[c]).replace("|", "\\|").replace("\n", " ") for c in columns)
        out.write("| " + " | ".join(cells) + " |\n")


def write_tsv(out: TextIO, columns: Sequence[str], records: Iterable[dict[str, Any]]) -> None:
    """Tab-separated lines under a header line; newlines inside cells become spaces."""
    out.write("\t".join(columns) + "\n")
    for rec in records:
        out.write("\t".join(cell(rec[c]).replace("\n", " ") for c in columns) + "\n")
