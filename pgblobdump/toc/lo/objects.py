"""The LOs of an archive, each with its owner, ACL, comment and stored size (and, for
``iter_data``, its bytes): the catalog's one pass over the TOC joined with one walk over
the LO data, checked by coverage. The public API of toc.lo.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from pgblobdump.aclitem import AclItem
from pgblobdump.toc import acl as aclmod
from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.blocks import BlockIndex
from pgblobdump.toc.entry import blobs_oid, parse_oids
from pgblobdump.toc.fields import F_DESC, F_DUMP_ID
from pgblobdump.toc.header import K_VERS_1_16
from pgblobdump.toc.lo import coverage, streams
from pgblobdump.toc.lo.catalog import LoCatalog, catalog
from pgblobdump.toc.lo.data import SizeRun
from pgblobdump.toc.reader import Archive


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
        """The ACL the statements give, as lomacl would hold it (see aclmod.grants),
        resolved once for all the LOs whose statements differ in the OID only."""
        return aclmod.lo_grants(self.acl, self.owner, self.oid)


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


def iter_data(
    archive: Archive, blocks: BlockIndex | None = None, counted: Callable[[int], None] | None = None
) -> Iterator[tuple[LargeObject, Iterator[bytes]]]:
    """Every LO in the archive with its bytes, in one pass over the TOC and one over the
    data, in constant memory: ``(lo, pieces)`` in data order (then LOs without data, with
    no pieces). ``pieces`` gives the LO's bytes decompressed, as pg_dump read them from
    the server; iterate it before taking the next LO, or leave it and the bytes are
    skipped unread. The walk is checked against the entries as ``toc los`` checks it.
    ``blocks``: where a custom archive's LO data blocks are, recorded as they are walked
    (so toc.blocks.block_index need not walk them again). ``counted(n)``: told the LO
    count once the TOC is read, before the first LO (a progress total)."""
    cat = catalog(archive)
    if counted is not None:
        counted(cat.count)
    if blocks is not None:
        blocks.expected = cat.with_data
    describe = _Describer(archive, cat)
    any_data = False
    for lo in coverage.checked(archive, cat, streams.iter_data(archive, cat.blobs, blocks)):
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
    for lo in streams.iter_data(archive):
        if lo.oid == oid:
            return lo.pieces()
    raise coverage.absent(archive, catalog(archive), oid)
