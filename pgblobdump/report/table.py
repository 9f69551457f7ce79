"""A table of rows with typed columns, and its renderings that need no terminal.

Rows hold raw values (ints, floats, strings, None); each column knows how to show a
value to a person. JSON and CSV carry the raw values, so scripts never parse ``1.5 MiB``.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any


def show(value: Any) -> str:
    """A raw value as a table for people shows it: ``yes``/``no`` for a flag, a list
    joined with commas (``-`` when empty), numbers with thousands separators."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(show(v) for v in value) if value else "-"
    if isinstance(value, float):
        return f"{value:,.2f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


@dataclass(frozen=True)
class Column:
    """One column: ``key`` into each row, a ``title`` for people, a ``show`` formatter.
    ``fold``: on a narrow terminal a long cell (a path, a name) wraps onto more lines
    instead of being cut with an ellipsis. ``short``: the heading where the table is too
    wide for the terminal (wrapped at its spaces; one that is not the heading's words
    gets a legend under the table)."""

    key: str
    title: str = ""
    show: Callable[[Any], str] = show
    numeric: bool = False
    fold: bool = False
    short: str = ""

    @property
    def heading(self) -> str:
        return self.title or self.key


@dataclass(frozen=True)
class Table:
    """Rows (mappings from column key to raw value) under named columns, with a title."""

    columns: Sequence[Column]
    rows: Sequence[Mapping[str, Any]]
    title: str = ""
    notes: Sequence[str] = field(default_factory=tuple)
    stack: bool = False
    """Where the table is too wide for the terminal: each row's first cell on a line of
    its own, the rest under it (``report.narrow.stacked``), rather than every column
    narrowed."""

    def cells(self) -> list[list[str]]:
        """Every row as display strings, in column order."""
        return [[c.show(row.get(c.key)) for c in self.columns] for row in self.rows]

    def records(self) -> list[dict[str, Any]]:
        """Every row as a dict of raw values, in column order."""
        return [{c.key: jsonable(row.get(c.key)) for c in self.columns} for row in self.rows]


def jsonable(value: Any) -> Any:
    """Dataclasses, enums, paths, dates and tuples made into JSON-ready values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def record_table(value: Any, title: str = "") -> Table:
    """``value`` (a dataclass) as one row of raw values, for CSV where the table for people
    is ``what | value`` lines of formatted text: a mapping field becomes ``field.key``
    columns, a list one cell joined by ``; ``."""
    flat: dict[str, Any] = {}

    def add(key: str, v: Any) -> None:
        if isinstance(v, Mapping):
            for k, x in v.items():
                add(f"{key}.{k}", x)
        elif isinstance(v, list):
            flat[key] = "; ".join(str(x) for x in v)
        else:
            flat[key] = v

    for k, v in jsonable(value).items():
        add(k, v)
    return Table([Column(k) for k in flat], [flat], title=title)


def to_json(value: Any) -> str:
    """A table as a list of records, anything else as its JSON form; ends with a newline."""
    data = value.records() if isinstance(value, Table) else jsonable(value)
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def to_csv(table: Table) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([c.key for c in table.columns])
    for rec in table.records():
        writer.writerow(["" if v is None else v for v in rec.values()])
    return buf.getvalue()


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(table: Table) -> str:
    head = "| " + " | ".join(_md_escape(c.heading) for c in table.columns) + " |"
    rule = "|" + "|".join("---:" if c.numeric else "---" for c in table.columns) + "|"
    body = ["| " + " | ".join(_md_escape(x) for x in row) + " |" for row in table.cells()]
    out = [f"**{table.title}**", ""] if table.title else []
    out += [head, rule, *body]
    out += ["", *(f"- {n}" for n in table.notes)] if table.notes else []
    return "\n".join(out) + "\n"
