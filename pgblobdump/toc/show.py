"""The entry lines of `pg_restore -l` (PrintTOCSummary), written from runs where possible.

A pre-17 archive has one BLOB entry per LO; formatting each through a TocEntry costs
more than pg_restore itself, so runs of same-shape BLOB entries (blobruns) are formatted
from their template and their per-entry dump ids and OIDs.
"""

from __future__ import annotations

from collections.abc import Iterator

from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.entry import SECTION_NONE, SECTION_PRE_DATA, TocEntry, catalog_id
from pgblobdump.toc.fields import (
    F_DEFN,
    F_HAD_DUMPER,
    F_NAMESPACE,
    F_OWNER,
    F_SECTION,
    F_TABLEOID,
    F_TAG,
)
from pgblobdump.toc.listing import REQ_DATA, REQ_SCHEMA, format_line, required, sanitize
from pgblobdump.toc.reader import Archive


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def lines(archive: Archive, show_all: bool = False) -> Iterator[str]:
    """Each entry line `pg_restore -l` prints (every entry with ``show_all``), in order."""
    current = SECTION_PRE_DATA
    from_raw = TocEntry.from_raw
    for item in archive.iter_items():
        if isinstance(item, BlobRun):
            t = item.family.template
            if t[F_SECTION] != SECTION_NONE:
                current = t[F_SECTION]
            shown = required(
                "BLOB", _text(t[F_TAG]), _text(t[F_DEFN]), bool(t[F_HAD_DUMPER]), current
            )
            if not (show_all or shown & (REQ_SCHEMA | REQ_DATA)):
                continue
            # Everything but the dump id, the OID and the tag is the template's.
            tableoid = catalog_id(t[F_TABLEOID])
            namespace = sanitize(_text(t[F_NAMESPACE]), True)
            owner = sanitize(_text(t[F_OWNER]))
            for dump_id, oid, tag in zip(item.dump_ids(), item.oids(), item.tags(), strict=True):
                yield f"{dump_id}; {tableoid} {oid} BLOB {namespace} {tag.decode()} {owner}"
            continue
        e = from_raw(item)
        if e.section != SECTION_NONE:
            current = e.section
        if show_all or required(e.desc, e.tag, e.defn, e.had_dumper, current) & (
            REQ_SCHEMA | REQ_DATA
        ):
            yield format_line(e.dump_id, e.tableoid, e.oid, e.desc, e.namespace, e.tag, e.owner)
