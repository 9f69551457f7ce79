"""The entry lines of `pg_restore -l` (PrintTOCSummary), written from runs where possible.

A pre-17 archive has one BLOB entry per LO; formatting each through a TocEntry costs
more than pg_restore itself, so runs of same-shape BLOB entries (blobruns) are formatted
from their template and their per-entry dump ids and OIDs: a run's lines are one ``%``
of the template repeated, its values interleaved by slice assignment (no Python-level
loop per entry), and a listing is written in blocks of many lines (``chunks``).
"""

from __future__ import annotations

from collections.abc import Iterator

from pgblobdump.pgconstants import OID_MAX
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

BLOCK_LINES = 10_000
"""Lines of entries outside runs gathered into one block."""

MAX_OID_TEXT = str(OID_MAX).encode()
"""The largest OID; ten digits beyond it print as 0 (ReadToc's sscanf fails)."""


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def lines(archive: Archive, show_all: bool = False) -> Iterator[str]:
    """Each entry line `pg_restore -l` prints (every entry with ``show_all``), in order."""
    for block in chunks(archive, show_all):
        # split("\n"), not splitlines(): a tag may hold \x0b, \x1c or \u2028
        yield from block[:-1].split("\n")


def chunks(archive: Archive, show_all: bool = False) -> Iterator[str]:
    """The entry lines of ``lines`` in blocks of whole lines, each line ending with a
    newline (what `toc show` writes)."""
    current = SECTION_PRE_DATA
    from_raw = TocEntry.from_raw
    pending: list[str] = []
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
            if pending:
                yield "\n".join(pending) + "\n"
                pending = []
            yield _run_block(item)
            continue
        e = from_raw(item)
        if e.section != SECTION_NONE:
            current = e.section
        if show_all or required(e.desc, e.tag, e.defn, e.had_dumper, current) & (
            REQ_SCHEMA | REQ_DATA
        ):
            pending.append(
                format_line(e.dump_id, e.tableoid, e.oid, e.desc, e.namespace, e.tag, e.owner)
            )
            if len(pending) >= BLOCK_LINES:
                yield "\n".join(pending) + "\n"
                pending = []
    if pending:
        yield "\n".join(pending) + "\n"


def _run_block(run: BlobRun) -> str:
    """The listing lines of a run of BLOB entries: everything but the dump id, the OID and
    the tag is the template's; the tag is the OID's digits as written, the OID their
    value (0 past 32 bits)."""
    t = run.family.template
    digits = run.tags()
    ids = run.dump_ids(digits)
    tags = b"\n".join(digits).decode("ascii").split("\n")  # the pattern took ASCII digits
    # The OID column prints the digits' value: the same text unless a tag has a leading
    # zero or exceeds 2^32 - 1 (ten digits compare as text).
    joined = "\n" + "\n".join(tags)
    canonical = "\n0" not in joined.replace("\n0\n", "\n\n") and (
        max(map(len, digits)) < 10 or all(d <= MAX_OID_TEXT for d in digits if len(d) == 10)
    )
    oids = tags if canonical else [str(o) for o in run.oids()]
    fixed = (
        f"; {catalog_id(t[F_TABLEOID])} ",
        f" BLOB {sanitize(_text(t[F_NAMESPACE]), True)} ",
        f" {sanitize(_text(t[F_OWNER]))}\n",
    )
    line = "%d" + "%s".join(x.replace("%", "%%") for x in fixed)
    values: list[object] = [None] * (3 * run.count)
    values[0::3] = ids
    values[1::3] = oids
    values[2::3] = tags
    return (line * run.count) % tuple(values)
