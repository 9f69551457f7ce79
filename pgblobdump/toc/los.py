"""Large-object views of an archive: which LOs, their owners, ACLs, comments and sizes.

OIDs come from the entries, never from tag ranges: one ``BLOB`` entry per LO up to 1.15
(its catalog oid), and from 1.16 the OID list (one per line) in each ``BLOB METADATA``
entry's definition; a metadata tag ``first..last`` can span OIDs of other groups.
Memory stays proportional to the exceptions (LOs with a non-default owner, an ACL or a
comment), not to the LO count, so a million-LO archive is listed in constant memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from pgblobdump.pg.acl import AclItem
from pgblobdump.toc import acl as aclmod
from pgblobdump.toc import blobs, coverage, listing
from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.entry import SECTION_NONE, SECTION_PRE_DATA, blobs_oid, parse_oids
from pgblobdump.toc.fields import (
    F_DEFN,
    F_DEPENDENCIES,
    F_DESC,
    F_DUMP_ID,
    F_HAD_DUMPER,
    F_OWNER,
    F_SECTION,
    F_TAG,
    RawEntry,
)
from pgblobdump.toc.header import K_VERS_1_16
from pgblobdump.toc.lodata import SizeRun
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


class LargeObject(NamedTuple):
    """One LO of an archive.

    ``owner`` is the owner pg_dump recorded (the entry owner); ``acl`` the GRANT/REVOKE
    statements that restore its privileges as pg_restore issues them for this LO (from
    1.16, a group's ACL names the LO's own OID, as IssueACLPerBlob rewrites it), empty
    for default privileges; ``comment`` the
    comment text or None; ``size`` the stored (compressed, if the archive is) byte count,
    None when the archive has no data for it (``--schema-only``); ``group`` the dump id of
    the entry that created it (BLOB up to 1.15, BLOB METADATA from 1.16). A NamedTuple:
    a million of them are made in a walk.
    """

    oid: int
    owner: str | None
    acl: tuple[str, ...]
    comment: str | None
    size: int | None
    group: int

    @property
    def grants(self) -> tuple[AclItem, ...] | None:
        """The ACL the statements give, as lomacl would hold it (see aclmod.grants)."""
        return aclmod.grants(self.acl, self.owner)


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
    acl_template: dict[int, aclmod.Template] = field(default_factory=dict)
    comment_of: dict[int, str | None] = field(default_factory=dict)
    security_labels: int = 0
    desc_counts: dict[bytes, int] = field(default_factory=dict)  # every entry, by desc
    blobs: list[blobs.BlobsEntry] = field(default_factory=list)  # the BLOBS entries
    listed: int = 0  # entries `pg_restore -l` prints
    # 1.16: metadata dump id -> (owner, OIDs); at most a few thousand groups of 1000
    metadata: dict[int, tuple[str | None, bytes]] = field(default_factory=dict)


def catalog(archive: Archive) -> LoCatalog:
    """One streaming pass over the TOC collecting the LO metadata."""
    cat = LoCatalog()
    new_style = archive.header.version >= K_VERS_1_16
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

    def add_blobs(owner_b: bytes | None, n: int, oids: Callable[[], Iterable[int]]) -> None:
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
            cat.owner_of.update(dict.fromkeys(oids(), owner))

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
            cat.blobs.append(blobs.blobs_entry(raw))
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
                            cat.acl_template[dep] = aclmod.per_blob(defn or "")
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


LoRow = tuple[int, "str | None", tuple[str, ...], "str | None", "int | None", int]
"""The fields of LargeObject as a plain tuple (oid, owner, acl, comment, size, group)."""


def iter_los(archive: Archive, with_sizes: bool = True) -> Iterator[LargeObject]:
    """Every LO in the archive: LOs with data in data order, then LOs without data."""
    for row in iter_rows(archive, with_sizes):
        yield LargeObject(*row)


def iter_rows(archive: Archive, with_sizes: bool = True) -> Iterator[LoRow]:
    """iter_los as plain tuples: a million rows cost a fraction of a million objects."""
    cat = catalog(archive)
    yield from _rows(archive, cat, with_sizes)


def iter_data(archive: Archive) -> Iterator[tuple[LargeObject, Iterator[bytes]]]:
    """Every LO in the archive with its bytes, in one pass over the TOC and one over the
    data, in constant memory: ``(lo, pieces)`` in data order (then LOs without data, with
    no pieces). ``pieces`` gives the LO's bytes decompressed, as pg_dump read them from
    the server; iterate it before taking the next LO, or leave it and the bytes are
    skipped unread. The walk is checked against the entries as ``toc los`` checks it."""
    cat = catalog(archive)
    describe = _Describer(archive, cat)
    any_data = False
    for lo in coverage.checked(archive, cat, blobs.iter_data(archive, cat.blobs)):
        any_data = True
        yield LargeObject(*describe.row(lo.oid, lo.size, lo.blobs_id)), lo.pieces()
    for row in describe.without_data(any_data):
        yield LargeObject(*row), iter(())


Group = tuple[int, "str | None", tuple[str, ...], "aclmod.Template | None"]
"""A 1.16 group's (metadata dump id, owner, ACL commands, per-LO ACL template)."""


class _Describer:
    """Each LO's owner, ACL commands, comment and group from the catalog, for the walk's
    (oid, stored size, BLOBS dump id); then the LOs the walk did not meet."""

    def __init__(self, archive: Archive, cat: LoCatalog) -> None:
        self.archive = archive
        self.cat = cat
        self.new_style = archive.header.version >= K_VERS_1_16
        self.meta_of_blobs: dict[int, int] = {}
        for e in cat.blobs:
            for dep in e.dependencies:
                if dep in cat.metadata:
                    self.meta_of_blobs[e.dump_id] = dep
        self.done: set[int] = set()  # the metadata groups met by the walk
        self._blobs = -1
        self._group: Group = (0, None, (), None)

    def group(self, blobs_id: int) -> Group:
        """(metadata dump id, owner, ACL commands, per-LO ACL template) of the LOs in BLOBS
        entry ``blobs_id`` (archive 1.16: a group's owner and ACL hold for all its LOs)."""
        if blobs_id != self._blobs:
            cat = self.cat
            self._blobs = blobs_id
            meta = self.meta_of_blobs.get(blobs_id, 0)
            self.done.add(meta)
            owner = cat.metadata[meta][0] if meta in cat.metadata else None
            self._group = (meta, owner, cat.group_acl.get(meta, ()), cat.acl_template.get(meta))
        return self._group

    def row(self, oid: int, size: int | None, blobs_id: int) -> LoRow:
        cat = self.cat
        if self.new_style:
            meta, owner, stmts, template = self.group(blobs_id)
            acl = stmts if template is None else aclmod.commands(template, oid)
            return (oid, owner, acl, cat.comment_of.get(oid), size, meta)
        return (
            oid, cat.owner_of.get(oid, cat.default_owner), cat.acl_of.get(oid, ()),
            cat.comment_of.get(oid), size, blobs_id,
        )  # fmt: skip

    def without_data(self, any_data: bool) -> Iterator[LoRow]:
        """The LOs the walk did not meet: from 1.16 the metadata groups with no data;
        up to 1.15 every BLOB entry when the archive has no LO data at all."""
        cat, archive = self.cat, self.archive
        if self.new_style:
            for meta, (owner, oids) in cat.metadata.items():
                if meta in self.done:
                    continue
                stmts = cat.group_acl.get(meta, ())
                template = cat.acl_template.get(meta)
                for oid in parse_oids(oids, archive.name):
                    acl = stmts if template is None else aclmod.commands(template, oid)
                    yield (oid, owner, acl, cat.comment_of.get(oid), None, meta)
            return
        if any_data:
            return
        for entry in archive.iter_items():
            if isinstance(entry, BlobRun):
                pairs: Iterable[tuple[int, int]] = zip(entry.oids(), entry.dump_ids(), strict=True)
            elif entry[F_DESC] == b"BLOB":
                pairs = ((blobs_oid(entry), entry[F_DUMP_ID]),)
            else:
                continue
            for oid, dump_id in pairs:
                yield (
                    oid, cat.owner_of.get(oid, cat.default_owner), cat.acl_of.get(oid, ()),
                    cat.comment_of.get(oid), None, dump_id,
                )  # fmt: skip


def _rows(archive: Archive, cat: LoCatalog, with_sizes: bool) -> Iterator[LoRow]:
    describe = _Describer(archive, cat)
    any_data = False
    if with_sizes:
        row = describe.row
        # no LO is an exception: the rows of a run differ in their OIDs only
        plain = not (cat.owner_of or cat.acl_of or cat.comment_of or cat.acl_template)
        for item in coverage.checked(archive, cat):
            any_data = True
            if type(item) is tuple:
                yield row(*item)
                continue
            assert isinstance(item, SizeRun)
            size, blobs_id = item.size, item.blobs_id
            if not plain:
                for oid in item.oids:
                    yield row(oid, size, blobs_id)
                continue
            if describe.new_style:
                meta, owner, stmts, _ = describe.group(blobs_id)
            else:
                meta, owner, stmts = blobs_id, cat.default_owner, ()
            for oid in item.oids:
                yield (oid, owner, stmts, None, size, meta)
    yield from describe.without_data(any_data)


def extract(archive: Archive, oid: int) -> Iterator[bytes]:
    """LO ``oid``'s bytes as pg_dump read them from the server, found in one pass over the
    data. NotFound if no entry creates it; CorruptArchive if one does but the archive's
    LO data lost it (raised before any byte is given)."""
    for lo in blobs.iter_data(archive):
        if lo.oid == oid:
            return lo.pieces()
    raise coverage.absent(archive, catalog(archive), oid)
