"""One TOC entry (struct _tocEntry of pg_backup_archiver.h) and its sections."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgblobdump.errors import CorruptArchive
from pgblobdump.pgconstants import OID_MAX
from pgblobdump.toc.fields import F_OID, F_TAG

if TYPE_CHECKING:
    from pgblobdump.toc.fields import RawEntry

SECTION_NONE = 1
"""Comments, ACLs and security labels: they follow their object's section."""
SECTION_PRE_DATA = 2
SECTION_DATA = 3
SECTION_POST_DATA = 4

SECTION_NAMES = {
    SECTION_NONE: "none",
    SECTION_PRE_DATA: "pre-data",
    SECTION_DATA: "data",
    SECTION_POST_DATA: "post-data",
}
"""teSection values as written in each entry."""


def text(raw: bytes | None) -> str | None:
    """A Str as text: pg_dump writes the database encoding; UTF-8 is assumed, and bytes
    that are not UTF-8 become U+FFFD rather than failing a listing."""
    return None if raw is None else raw.decode("utf-8", "replace")


def catalog_id(raw: bytes | None) -> int:
    """A catalog OID Str as a number. ReadToc uses sscanf("%u") into zeroed memory, so
    anything unparsable stays 0; so does it here."""
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        return 0
    return value if 0 <= value <= OID_MAX else 0


def blobs_oid(raw: RawEntry) -> int:
    """The OID of a BLOB entry: its catalog oid, read as ReadToc does (0 if unparsable)."""
    return catalog_id(raw[F_OID]) or catalog_id(raw[F_TAG])


_PLAIN_OIDS = re.compile(rb"(?:[0-9]{1,10}\n)*[0-9]{0,10}")
"""A BLOB METADATA definition as pg_dump writes it: digits a line, nothing else."""


def parse_oids(text: bytes, where: str = "archive") -> Iterator[int]:
    """The OIDs of a BLOB METADATA definition: one decimal OID a line."""
    if _PLAIN_OIDS.fullmatch(text):  # 1,000 OIDs a group, a million in all: in C
        values = list(map(int, text.split()))
        if not values or (min(values) > 0 and max(values) <= OID_MAX):
            return iter(values)
    return _parse_oids(text, where)


def _parse_oids(text: bytes, where: str) -> Iterator[int]:
    for line in text.split(b"\n"):
        if line.strip():
            oid = catalog_id(line.strip())
            if oid == 0:
                raise CorruptArchive(f"{where}: BLOB METADATA line {line[:40]!r} is not an OID")
            yield oid


@dataclass(frozen=True, slots=True)
class TocEntry:
    """One entry of an archive's table of contents, as ReadToc reads it.

    Invariants: ``dump_id`` > 0 and unique within an archive; ``section`` is a key of
    SECTION_NAMES; ``tableoid``/``oid`` are the catalog ids (0 when absent) and fit in
    32 bits; every Str field is None when pg_dump wrote NULL, which differs from ''.
    ``dependencies`` are dump ids, possibly of entries absent from a partial dump.
    ``relkind`` is the pg_class relkind character code from 1.16 (0 when none/older).
    Exactly one of the format parts is meaningful: ``data_state``/``data_offset`` (custom
    format: an Offset flag of primitives.OFFSET_FLAGS and a file position, valid only with
    K_OFFSET_POS_SET) or ``filename`` (directory and tar formats: the data file, None or ''
    when the entry has no data).
    """

    dump_id: int
    had_dumper: bool
    tableoid: int
    oid: int
    tag: str | None
    desc: str
    section: int
    defn: str | None
    drop_stmt: str | None
    copy_stmt: str | None
    namespace: str | None
    tablespace: str | None
    tableam: str | None
    relkind: int
    owner: str | None
    dependencies: tuple[int, ...]
    data_state: int | None
    data_offset: int
    filename: str | None

    @classmethod
    def from_raw(cls, raw: RawEntry) -> TocEntry:
        """Decode what Archive.iter_raw yields."""
        (dump_id, had_dumper, tableoid, oid, tag, desc, section, defn, drop, copy, nsp,
         tblspc, tableam, relkind, owner, deps, state, offset, filename) = raw  # fmt: skip
        return cls(
            dump_id, bool(had_dumper), catalog_id(tableoid), catalog_id(oid), text(tag),
            text(desc) or "", section, text(defn), text(drop), text(copy), text(nsp),
            text(tblspc), text(tableam), relkind, text(owner), deps, state, offset,
            text(filename),
        )  # fmt: skip

    @property
    def section_name(self) -> str:
        return SECTION_NAMES.get(self.section, str(self.section))
