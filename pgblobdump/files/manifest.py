"""Export's manifest: one row per LO written (OID, path, size, sha256, owner, ACL,
comment, the referencing row, how many rows reference it, why its name was changed),
as CSV and as JSON. The journal's segments are rows of the same CSV, so the manifest is
the journal's rows, each OID once (a later run's row wins), in OID order.

The ACL and comment are kept so an import can give them back; ``acl`` is PostgreSQL's
aclitem[] text (``{alice=rw/bob}``), empty for the default.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import astuple, dataclass, fields
from typing import Any

FORMAT = "pgblobdump-export"
VERSION = 1


@dataclass(frozen=True)
class Row:
    """One LO in the target. ``row``: the referencing row's template columns as a JSON
    object's text ("" for an LO named by OID); ``renamed``: why the name is not the
    template's ("" when it is)."""

    oid: int
    path: str
    size: int
    sha256: str
    owner: str
    acl: str
    comment: str
    row: str
    rows: int
    renamed: str


COLUMNS = tuple(f.name for f in fields(Row))


def acl_text(acl: tuple[str, ...] | None) -> str:
    return "" if acl is None else "{" + ",".join(acl) + "}"


def encode(rows: Iterable[Row], header: bool = True) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    if header:
        w.writerow(COLUMNS)
    for r in rows:
        w.writerow(astuple(r))
    return out.getvalue().encode()


def decode(data: bytes) -> Iterator[Row]:
    """Rows of a segment or manifest CSV (a header first); a last line cut short (a
    segment is written whole, atomically, so only a damaged file has one) ends it."""
    reader = csv.reader(io.StringIO(data.decode()))
    head = next(reader, None)
    if head is None:
        return
    if tuple(head) != COLUMNS:
        raise ValueError(f"not an export journal: columns {head}")
    for rec in reader:
        if len(rec) != len(COLUMNS):
            return
        yield Row(int(rec[0]), rec[1], int(rec[2]), rec[3], rec[4], rec[5], rec[6], rec[7],
                  int(rec[8]), rec[9])  # fmt: skip


def as_json(rows: list[Row], about: dict[str, Any]) -> bytes:
    """The JSON manifest: ``about`` (the export's settings and totals) and ``objects``,
    one object per row (``acl``, ``comment`` null when none; ``row`` an object)."""
    objects = []
    for r in rows:
        d: dict[str, Any] = dict(zip(COLUMNS, astuple(r), strict=True))
        d["acl"] = r.acl or None
        d["comment"] = r.comment or None
        d["row"] = json.loads(r.row) if r.row else None
        d["renamed"] = r.renamed or None
        objects.append(d)
    doc = {"format": FORMAT, "version": VERSION, **about, "objects": objects}
    return (json.dumps(doc, ensure_ascii=False, indent=1) + "\n").encode()
