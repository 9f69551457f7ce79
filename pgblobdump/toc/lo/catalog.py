"""The LO catalog of an archive: one streaming pass over the TOC collecting which LOs
there are, their owners, ACLs, comments and the BLOBS entries that hold their data.

OIDs come from the entries, never from tag ranges: one ``BLOB`` entry per LO up to 1.15
(its catalog oid), and from 1.16 the OID list (one per line) in each ``BLOB METADATA``
entry's definition; a metadata tag ``first..last`` can span OIDs of other groups.
Memory stays proportional to the exceptions (LOs with a non-default owner, an ACL or a
comment), not to the LO count, so a million-LO archive is listed in constant memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from operator import mul

from pgblobdump.toc import listing
from pgblobdump.toc.acl import Template, per_blob
from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.entry import SECTION_NONE, SECTION_PRE_DATA, blobs_oid
from pgblobdump.toc.fields import (
    F_DATA_OFFSET,
    F_DATA_STATE,
    F_DEFN,
    F_DEPENDENCIES,
    F_DESC,
    F_DUMP_ID,
    F_FILENAME,
    F_HAD_DUMPER,
    F_OWNER,
    F_SECTION,
    F_TAG,
    RawEntry,
)
from pgblobdump.toc.header import K_VERS_1_16
from pgblobdump.toc.primitives import K_OFFSET_NO_DATA
from pgblobdump.toc.reader import Archive

_LO_TAG = re.compile(rb"LARGE OBJECTS? (\d{1,10})(?:\.\.(\d{1,10}))?\Z")
_COMMENT = re.compile(r"\ACOMMENT ON LARGE OBJECT \d+ IS (E?)'(.*)';\s*\Z", re.S)


def comment_text(defn: str) -> str | None:
    """The comment of a ``COMMENT ON LARGE OBJECT n IS '...';`` statement, unquoted."""
    m = _COMMENT.match(defn)
    if m is None:
        return None
    body = m.group(2).replace("''", "'")
    if m.group(1):  # E'' string: backslash escapes, as pg_dump writes them with std_strings off
        body = body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    return body


def statements(defn: str | None) -> tuple[str, ...]:
    """The non-empty lines of an entry definition (ACL entries: one GRANT/REVOKE a line)."""
    return tuple(line for line in (defn or "").splitlines() if line.strip())


@dataclass(frozen=True)
class BlobsEntry:
    """A BLOBS TOC entry: its dump id, owner, the BLOB METADATA dump ids it depends on,
    and where its data is (custom: Offset flag and position; directory: list file)."""

    dump_id: int
    owner: str | None
    dependencies: tuple[int, ...]
    data_state: int | None
    data_offset: int
    filename: str | None


def blobs_entry(raw: RawEntry) -> BlobsEntry:
    """A BLOBS entry from its raw TOC fields."""
    fname, owner = raw[F_FILENAME], raw[F_OWNER]
    return BlobsEntry(
        raw[F_DUMP_ID],
        None if owner is None else owner.decode("utf-8", "replace"),
        raw[F_DEPENDENCIES],
        raw[F_DATA_STATE],
        raw[F_DATA_OFFSET],
        None if fname is None else fname.decode("utf-8", "replace"),
    )


def blobs_entries(archive: Archive) -> list[BlobsEntry]:
    """Every BLOBS entry of the archive, in TOC order (few: one per 1000 LOs at most)."""
    return [
        blobs_entry(raw)
        for raw in archive.iter_items()
        if type(raw) is tuple and raw[F_DESC] == b"BLOBS"  # BlobRuns are BLOB entries
    ]


@dataclass(slots=True)
class Tally:
    """LOs counted, and (when summing) the sum and sum of squares of their OIDs."""

    count: int = 0
    total: int = 0
    squares: int = 0

    @classmethod
    def of(cls, oids: Sequence[int]) -> Tally:
        return cls(len(oids), sum(oids), sum(map(mul, oids, oids)))

    def add(self, oids: Sequence[int]) -> None:
        self.count += len(oids)
        self.total += sum(oids)
        self.squares += sum(map(mul, oids, oids))


@dataclass
class LoCatalog:
    """What one pass over the TOC learns about LOs, in memory proportional to exceptions."""

    count: int = 0
    groups: int = 0
    default_owner: str | None = None
    owners: dict[str, int] = field(default_factory=dict)  # owner -> LO count
    owner_of: dict[int, str | None] = field(default_factory=dict)  # non-default owners
    acl_of: dict[int, tuple[str, ...]] = field(default_factory=dict)  # by oid (<= 1.15)
    group_acl: dict[int, tuple[str, ...]] = field(default_factory=dict)  # by metadata id
    # metadata id -> the ACL split per LO, for groups whose ACL pg_restore re-issues per LO
    acl_template: dict[int, Template] = field(default_factory=dict)
    comment_of: dict[int, str | None] = field(default_factory=dict)
    security_labels: int = 0
    desc_counts: dict[bytes, int] = field(default_factory=dict)  # every entry, by desc
    # custom format: the dump ids of the entries whose Offset says they have a data block
    # (tables, BLOBS: few), the blocks a listing of the archive's blocks must meet
    with_data: set[int] = field(default_factory=set)
    blobs: list[BlobsEntry] = field(default_factory=list)  # the BLOBS entries
    listed: int = 0  # entries `pg_restore -l` prints
    # 1.16: metadata dump id -> (owner, OIDs); at most a few thousand groups of 1000
    metadata: dict[int, tuple[str | None, bytes]] = field(default_factory=dict)
    # up to 1.15, in a directory or tar archive: the tally of every BLOB entry's OID
    # (coverage compares it with the data's; kept here so no second pass holds the OIDs)
    tally: Tally = field(default_factory=Tally)


def catalog(archive: Archive) -> LoCatalog:
    """One streaming pass over the TOC collecting the LO metadata."""
    cat = LoCatalog()
    new_style = archive.header.version >= K_VERS_1_16
    summing = not new_style and archive.kind != "custom"  # as coverage.checked compares
    tally = cat.tally
    owners = cat.owners
    owner_cache: dict[bytes | None, str | None] = {}
    first_owner: bytes | bool | None = False
    lo_tag = _LO_TAG.match
    counts = cat.desc_counts
    required = listing.required
    current = SECTION_PRE_DATA
    listed = 0
    desc_text: dict[bytes | None, str] = {}
    valid_sections = (2, 3, 4)

    def add_blobs(owner_b: bytes | None, n: int, oids: Callable[[], Sequence[int]]) -> None:
        """Count ``n`` LOs of one owner; remember OIDs only for owners but the first."""
        nonlocal first_owner
        if first_owner is False:
            first_owner = owner_b
        owner = owner_cache.get(owner_b)
        if owner is None:
            owner = owner_cache[owner_b] = (
                None if owner_b is None else owner_b.decode("utf-8", "replace")
            )
        owners[owner or ""] = owners.get(owner or "", 0) + n
        cat.count += n
        if owner_b != first_owner:
            found = oids()
            cat.owner_of.update(dict.fromkeys(found, owner))
            if summing:
                tally.add(found)
        elif summing:
            tally.add(oids())

    for raw in _flatten_odd_runs(archive, valid_sections):
        if isinstance(raw, BlobRun):  # the same bookkeeping as below, for a whole run
            n = raw.count
            counts[b"BLOB"] = counts.get(b"BLOB", 0) + n
            current = raw.section
            listed += n
            add_blobs(raw.owner, n, raw.oids)
            continue
        desc = raw[F_DESC]
        if desc == b"BLOB" and raw[F_SECTION] in valid_sections:
            # The hot case of a pre-17 archive (one entry per LO): pg_restore -l prints
            # every BLOB entry, so skip the general filter below.
            counts[desc] = counts.get(desc, 0) + 1
            current = raw[F_SECTION]
            listed += 1
            add_blobs(raw[F_OWNER], 1, lambda raw=raw: (blobs_oid(raw),))  # type: ignore[misc]
            continue
        counts[desc or b""] = counts.get(desc or b"", 0) + 1
        state = raw[F_DATA_STATE]
        if state is not None and state != K_OFFSET_NO_DATA:
            cat.with_data.add(raw[F_DUMP_ID])
        # PrintTOCSummary's filter, inlined here so the summary needs one pass only
        if raw[F_SECTION] != SECTION_NONE:
            current = raw[F_SECTION]
        d = desc_text.get(desc)
        if d is None:
            d = desc_text[desc] = (desc or b"").decode("utf-8", "replace")
        defn_b = raw[F_DEFN]
        defn = None if not defn_b else defn_b[:32].decode("utf-8", "replace")
        tag_b = raw[F_TAG]
        tag = None if tag_b is None else tag_b[:16].decode("utf-8", "replace")
        if required(d, tag, defn, bool(raw[F_HAD_DUMPER]), current) & 3:
            listed += 1
        if desc == b"BLOB":  # a BLOB in an impossible section
            add_blobs(raw[F_OWNER], 1, lambda raw=raw: (blobs_oid(raw),))  # type: ignore[misc]
        elif desc == b"BLOBS":
            cat.blobs.append(blobs_entry(raw))
        elif desc == b"BLOB METADATA":
            owner = None if raw[F_OWNER] is None else raw[F_OWNER].decode("utf-8", "replace")
            oids = raw[F_DEFN] or b""
            n = oids.count(b"\n") + (0 if oids.endswith(b"\n") or not oids else 1)
            cat.metadata[raw[F_DUMP_ID]] = (owner, oids)
            owners[owner or ""] = owners.get(owner or "", 0) + n
            cat.count += n
            cat.groups += 1
        elif desc in (b"ACL", b"COMMENT", b"SECURITY LABEL") and raw[F_TAG] is not None:
            m = lo_tag(raw[F_TAG])
            if m is None:
                continue
            defn = None if raw[F_DEFN] is None else raw[F_DEFN].decode("utf-8", "replace")
            if desc == b"SECURITY LABEL":
                cat.security_labels += 1
            elif desc == b"COMMENT":
                cat.comment_of[int(m.group(1))] = comment_text(defn or "")
            elif new_style:
                per_lo = raw[F_TAG].startswith(b"LARGE OBJECTS")  # as _printTocEntry tells
                for dep in raw[F_DEPENDENCIES]:
                    if dep in cat.metadata:
                        cat.group_acl[dep] = statements(defn)
                        if per_lo:
                            cat.acl_template[dep] = per_blob(defn or "")
            else:
                cat.acl_of[int(m.group(1))] = statements(defn)
    cat.listed = listed
    if not new_style:
        cat.groups = 1 if cat.count else 0
        if isinstance(first_owner, bytes):
            cat.default_owner = first_owner.decode("utf-8", "replace")
    return cat


def _flatten_odd_runs(
    archive: Archive, valid_sections: tuple[int, ...]
) -> Iterator[RawEntry | BlobRun]:
    """The TOC's items, runs of BLOB entries in an impossible section as single entries."""
    for item in archive.iter_items():
        if isinstance(item, BlobRun) and item.section not in valid_sections:
            yield from item.entries()
        else:
            yield item
