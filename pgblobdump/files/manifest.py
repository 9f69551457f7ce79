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
from typing import Any, NamedTuple

FORMAT = "pgblobdump-export"
VERSION = 1


class Row(NamedTuple):
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


COLUMNS = Row._fields


def acl_text(acl: tuple[str, ...] | None) -> str:
    return "" if acl is None else "{" + ",".join(acl) + "}"


def encode(rows: Iterable[Row], header: bool = True) -> bytes:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    if header:
        w.writerow(COLUMNS)
    for r in rows:
        w.writerow(r)
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


CHUNK = 1 << 20
"""Bytes of a manifest handed on at a time (it is streamed, never held whole)."""


def csv_chunks(rows: Iterable[Row]) -> Iterator[bytes]:
    """The CSV manifest, a header first, in chunks of about CHUNK bytes."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow(r)
        if out.tell() >= CHUNK:
            yield out.getvalue().encode()
            out.seek(0)
            out.truncate()
    yield out.getvalue().encode()


def _object(r: Row) -> dict[str, Any]:
    d: dict[str, Any] = r._asdict()
    d["acl"] = r.acl or None
    d["comment"] = r.comment or None
    d["row"] = json.loads(r.row) if r.row else None
    d["renamed"] = r.renamed or None
    return d


def json_chunks(rows: Iterable[Row], about: dict[str, Any]) -> Iterator[bytes]:
    """The JSON manifest: ``about`` (the export's settings and totals) and ``objects``,
    one object per row (``acl``, ``comment``, ``renamed`` null when none; ``row`` an
    object), one object a line, in chunks of about CHUNK bytes."""
    head = json.dumps({"format": FORMAT, "version": VERSION, **about}, ensure_ascii=False)
    parts = [head[:-1] + ', "objects": [\n']
    size = 0
    sep = ""
    for r in rows:
        line = sep + json.dumps(_object(r), ensure_ascii=False)
        sep = ",\n"
        parts.append(line)
        size += len(line)
        if size >= CHUNK:
            yield "".join(parts).encode()
            parts, size = [], 0
    parts.append("\n]}\n")
    yield "".join(parts).encode()
