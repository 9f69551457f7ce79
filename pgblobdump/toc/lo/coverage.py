"""Check that an archive's LO data holds exactly the LOs its TOC entries create.

Every LO has an entry (a BLOB entry up to 1.15, a line of a BLOB METADATA definition
from 1.16) and, in a dump with data, a place in the data of a BLOBS entry: in a custom
archive its block, in a directory or tar archive a line of the LO list (``blobs.toc``,
``blobs_<dumpId>.toc`` from 1.16) naming the LO's data file. A line lost from a list
leaves an LO with an entry and no data, which a listing would silently leave out.

While the data is walked, the LOs of each BLOBS entry are tallied: their count and, in a
directory or tar archive, the sum and the sum of squares of their OIDs. When the walk
ends the tallies are compared with those of the entries (up to 1.15 tallied by the
catalog's own pass over the TOC, so no second pass lists every OID). Equal counts, sums and sums of
squares leave two different OID sets only when three or more OIDs changed in concert.
A custom archive is compared by count only: its walk already checks every length
against the file, and summing a million OIDs would cost a tenth of `toc summary`. On a
difference, a second pass names the first LO involved and the list (or block) at fault.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from operator import mul
from typing import TypeVar, cast

from pgblobdump.errors import CorruptArchive, NotFound, PgBlobDumpError
from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.entry import blobs_oid, parse_oids
from pgblobdump.toc.fields import F_DESC
from pgblobdump.toc.header import K_VERS_1_16
from pgblobdump.toc.lo import directory, streams
from pgblobdump.toc.lo.catalog import BlobsEntry, LoCatalog, Tally
from pgblobdump.toc.lo.data import LoData, SizeRun
from pgblobdump.toc.primitives import K_OFFSET_NO_DATA
from pgblobdump.toc.reader import Archive

ALL = -1
"""The tally key of archives up to 1.15: one BLOBS entry holds every LO's data."""


def _with_data(archive: Archive, cat: LoCatalog) -> list[BlobsEntry]:
    """The BLOBS entries whose data the walk reads (custom.blocks, directory.data)."""
    if archive.kind == "custom":
        return [e for e in cat.blobs if e.data_state != K_OFFSET_NO_DATA]
    return [e for e in cat.blobs if e.filename]


def _metadata_of(cat: LoCatalog, e: BlobsEntry) -> int | None:
    """The BLOB METADATA entry a 1.16 BLOBS entry depends on."""
    return next((d for d in e.dependencies if d in cat.metadata), None)


def _entry_oids(archive: Archive, cat: LoCatalog, key: int) -> list[int]:
    """The OIDs the entries create for tally ``key``: a BLOBS entry's metadata group
    (1.16), or every BLOB entry (ALL, a pass over the TOC)."""
    if key != ALL:
        e = next(e for e in cat.blobs if e.dump_id == key)
        meta = _metadata_of(cat, e)
        return [] if meta is None else list(parse_oids(cat.metadata[meta][1], archive.name))
    oids: list[int] = []
    for item in archive.iter_items():
        if isinstance(item, BlobRun):
            oids.extend(item.oids())
        elif item[F_DESC] == b"BLOB":
            oids.append(blobs_oid(item))
    return oids


def _expected(archive: Archive, cat: LoCatalog, summing: bool) -> dict[int, Tally]:
    """The tally of the LOs the entries create, per BLOBS entry (1.16) or for ALL."""
    if archive.header.version < K_VERS_1_16:  # the catalog's pass tallied the entries
        return {ALL: cat.tally if summing else Tally(cat.count)}
    out: dict[int, Tally] = {}
    for e in _with_data(archive, cat):
        meta = _metadata_of(cat, e)
        text = b"" if meta is None else cat.metadata[meta][1]
        if summing:
            out[e.dump_id] = Tally.of(list(parse_oids(text, archive.name)))
        else:  # one OID a line, counted as catalog() counts them
            lines = text.count(b"\n") + (0 if text.endswith(b"\n") or not text else 1)
            out[e.dump_id] = Tally(lines)
    return out


Item = TypeVar("Item", tuple[int, int, int] | SizeRun, LoData)


def checked(
    archive: Archive, cat: LoCatalog, items: Iterable[Item] | None = None
) -> Iterator[Item]:
    """``items`` (default: streams.iter_size_runs(archive, cat.blobs, verify=True); or
    streams.iter_data's LoData), checked: when the walk ends, CorruptArchive naming an LO
    and its list file if the data does not hold exactly the LOs the entries create (an LO
    with an entry and no data, or the reverse)."""
    summing = archive.kind != "custom"
    found: dict[int, Tally] = {}
    key, n, total, squares = ALL, 0, 0, 0

    def flush() -> None:
        tally = found.setdefault(key, Tally())
        tally.count += n
        tally.total += total
        tally.squares += squares

    if items is None:
        items = cast(Iterable[Item], streams.iter_size_runs(archive, cat.blobs, verify=True))
    for item in items:
        if type(item) is tuple:
            oid, _size, blobs_id = item
        elif isinstance(item, LoData):
            oid, blobs_id = item.oid, item.blobs_id
        else:
            assert isinstance(item, SizeRun)
            if item.blobs_id != key:
                flush()
                key, n, total, squares = item.blobs_id, 0, 0, 0
            n += len(item.oids)
            if summing:
                total += sum(item.oids)
                squares += sum(map(mul, item.oids, item.oids))
            yield item
            continue
        if blobs_id != key:
            flush()
            key, n, total, squares = blobs_id, 0, 0, 0
        n += 1
        if summing:
            total += oid
            squares += oid * oid
        yield item
    flush()
    entries = _with_data(archive, cat)
    if not entries:
        return  # no LO data at all: a dump without data (--schema-only)
    expected = _expected(archive, cat, summing)
    if archive.header.version < K_VERS_1_16:
        whole = Tally()
        for tally in found.values():
            whole.count += tally.count
            whole.total += tally.total
            whole.squares += tally.squares
        found = {ALL: whole}
    for k, want in expected.items():
        if found.get(k, Tally()) != want:
            raise _mismatch(archive, cat, k)


def _where(archive: Archive, entries: list[BlobsEntry]) -> str:
    """The list files (or, custom format, the data blocks) of ``entries``."""
    if archive.kind == "custom":
        ids = ", ".join(str(e.dump_id) for e in entries)
        return f"the large objects of entry {ids}"
    return ", ".join(dict.fromkeys(directory.list_file(archive, e) for e in entries))


def _data_oids(archive: Archive, entries: list[BlobsEntry]) -> list[int]:
    """The OIDs the data of ``entries`` holds, in order (duplicates kept)."""
    if archive.kind == "custom":
        return [oid for oid, _, _ in streams.iter_sizes(archive, entries)]
    return [oid for e in entries for oid, _ in directory.list_oids(archive, e)]


def _kind(archive: Archive) -> str:
    return "BLOB METADATA" if archive.header.version >= K_VERS_1_16 else "BLOB"


def _no_data(archive: Archive, oid: int, where: str) -> CorruptArchive:
    place = f"no data in {where}" if archive.kind == "custom" else f"no line in {where}"
    return CorruptArchive(
        f"{archive.name}: damaged archive: large object {oid} has a {_kind(archive)} entry"
        f" but {place}"
    )


def _mismatch(archive: Archive, cat: LoCatalog, key: int) -> CorruptArchive:
    """The error for tally ``key``: the first LO missing, unexpected or repeated."""
    entries = _with_data(archive, cat)
    if key != ALL:
        entries = [e for e in entries if e.dump_id == key]
    where = _where(archive, entries)
    want = set(_entry_oids(archive, cat, key))
    have = _data_oids(archive, entries)
    missing = sorted(want.difference(have))
    if missing:
        err = _no_data(archive, missing[0], where)
        if len(missing) > 1:
            err = CorruptArchive(f"{err} ({len(missing):,} large objects are missing)")
        return err
    extra = sorted(set(have) - want)
    if extra:
        return CorruptArchive(
            f"{archive.name}: damaged archive: {where} holds large object {extra[0]}, which"
            f" has no {_kind(archive)} entry"
        )
    twice = [oid for oid, k in Counter(have).items() if k > 1]
    if twice:
        return CorruptArchive(
            f"{archive.name}: damaged archive: {where} holds large object {min(twice)}"
            " more than once"
        )
    return CorruptArchive(  # only if the data changed between the two passes
        f"{archive.name}: damaged archive: the large objects of {where} do not match"
        f" the {_kind(archive)} entries"
    )


def absent(archive: Archive, cat: LoCatalog, oid: int) -> PgBlobDumpError:
    """The error for LO ``oid``, which the data does not hold: CorruptArchive when an
    entry creates it and the archive has LO data; else NotFound."""
    entries = _with_data(archive, cat)
    if archive.header.version >= K_VERS_1_16:
        metas = {m for m, (_, text) in cat.metadata.items() if oid in parse_oids(text)}
        has_entry = bool(metas)
        entries = [e for e in entries if _metadata_of(cat, e) in metas]
    else:
        has_entry = oid in _entry_oids(archive, cat, ALL)
    if not has_entry:
        return NotFound(f"{archive.name}: no large object with OID {oid} in this archive")
    if not entries:
        return NotFound(
            f"{archive.name}: large object {oid} has no data in this archive (dumped without data)"
        )
    return _no_data(archive, oid, _where(archive, entries))
