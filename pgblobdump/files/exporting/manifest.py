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
from typing import IO, Any, NamedTuple

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
"""Bytes of a manifest's text gathered before they are written out."""


def _object(r: Row) -> dict[str, Any]:
    d: dict[str, Any] = r._asdict()
    d["acl"] = r.acl or None
    d["comment"] = r.comment or None
    d["row"] = json.loads(r.row) if r.row else None
    d["renamed"] = r.renamed or None
    return d


class Writer:
    """Both manifests written row by row into two binary files (never held whole): the
    CSV, a header first; the JSON, ``about`` (the export's settings) then ``objects``,
    one object a line (``acl``, ``comment``, ``renamed`` null when none, ``row`` an
    object), then the totals ``los`` and ``bytes``."""

    def __init__(self, csv_file: IO[bytes], json_file: IO[bytes], about: dict[str, Any]):
        self.csv_file, self.json_file = csv_file, json_file
        self.text = io.StringIO()
        self.csv = csv.writer(self.text, lineterminator="\n")
        self.csv.writerow(COLUMNS)
        head = json.dumps({"format": FORMAT, "version": VERSION, **about}, ensure_ascii=False)
        self.json_parts = [head[:-1] + ', "objects": [\n']
        self.json_size = 0
        self.sep = ""
        self.los = self.bytes = 0

    def add(self, r: Row) -> None:
        self.los += 1
        self.bytes += r.size
        self.csv.writerow(r)
        if self.text.tell() >= CHUNK:
            self._csv_out()
        line = self.sep + json.dumps(_object(r), ensure_ascii=False)
        self.sep = ",\n"
        self.json_parts.append(line)
        self.json_size += len(line)
        if self.json_size >= CHUNK:
            self._json_out()

    def _csv_out(self) -> None:
        self.csv_file.write(self.text.getvalue().encode())
        self.text.seek(0)
        self.text.truncate()

    def _json_out(self) -> None:
        self.json_file.write("".join(self.json_parts).encode())
        self.json_parts, self.json_size = [], 0

    def finish(self) -> None:
        self._csv_out()
        self.json_parts.append(f'\n], "los": {self.los}, "bytes": {self.bytes}}}\n')
        self._json_out()
