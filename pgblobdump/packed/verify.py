"""``verify``: a packed archive checked on its own (every file's size and checksum, every
frame, every LO's checksum, the index against the volumes), and against a live database
(missing, extra and differing LOs by OID)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
import xxhash

from pgblobdump.errors import CorruptArchive, PgBlobDumpError
from pgblobdump.packed.chain.archives import Chain
from pgblobdump.packed.format.index import IndexRecord, Meta
from pgblobdump.packed.format.indexbuild import SortingIndexBuilder
from pgblobdump.packed.format.spec import CHAIN_VOLUME, INDEX_NAME
from pgblobdump.packed.read.items import Damaged
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.pg import snapshot
from pgblobdump.pg.connect import connect
from pgblobdump.pg.lostream import LoRun, Selection, iter_los
from pgblobdump.pg.snapshot import SideConnection
from pgblobdump.report.reporter import QUIET, Reporter

log = logging.getLogger(__name__)

STEP = 2000
"""LOs between two progress reports."""


@dataclass
class ArchiveCheck:
    """What ``verify`` found in the archive itself. ``problems`` empty means sound."""

    files: int = 0
    los: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)
    damaged_files: list[str] = field(default_factory=list)
    """The files among the problems: missing, of another size or checksum."""
    damaged: list[Damaged] = field(default_factory=list)
    """When only data volumes are damaged: each damaged frame (or volume's end) with the
    LOs it loses, by OID from the index, as restore --skip-damaged would skip them."""
    expected_los: int | None = None
    expected_bytes: int | None = None
    """The LOs and bytes the archive's manifest says it holds (None without one)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def data_only(self) -> bool:
        """Damage in data volumes only, the manifest and index sound: what restore
        --skip-damaged reads past."""
        return bool(self.damaged_files) and all(
            f.startswith("data-") and f.endswith(".pbd") for f in self.damaged_files
        )


def check_archive(archive: PackedDirectory, reporter: Reporter = QUIET) -> ArchiveCheck:
    """Every check that needs no server; damage becomes a problem line, not an exception
    (so one damaged volume does not hide another). Progress: the files' bytes read, then
    the LOs checked against the index."""
    result = ArchiveCheck()
    if archive.manifest is None:
        result.problems.append(f"{archive.where}: no manifest.json: an interrupted dump")
        return result
    storage = archive.storage
    result.files = 1  # the manifest itself, read above
    result.expected_los = archive.manifest.los
    result.expected_bytes = archive.manifest.bytes
    listed = archive.manifest.files
    log.info("checking %d files against the manifest, then the LOs against the index",
             len(listed) + 1)  # fmt: skip
    reporter.task("checking files", len(listed))
    reporter.totals(len(listed), sum(f.size for f in listed))
    hashed = 0
    for k, f in enumerate(listed):
        reporter.progress(k, hashed)
        name = f.name
        result.files += 1
        if not storage.exists(name):
            result.problems.append(f"{name}: missing")
            result.damaged_files.append(name)
            continue
        size = storage.size(name)
        if size != f.size:
            result.problems.append(f"{name}: {size:,} bytes, the manifest says {f.size:,}")
            result.damaged_files.append(name)
            continue
        h = xxhash.xxh3_128()
        with storage.open(name) as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
                hashed += len(chunk)
                reporter.progress(k, hashed)
        if h.hexdigest() != f.xxh3_128:
            result.problems.append(f"{name}: damaged (its checksum differs from the manifest's)")
            result.damaged_files.append(name)
    reporter.progress(len(listed), hashed)
    if any(p.startswith(f"{INDEX_NAME}: ") for p in result.problems):
        return result  # the LOs are checked against the index, which is not to be read
    reporter.task("checking LOs", archive.manifest.los)  # those its volumes hold
    reporter.totals(archive.manifest.los, archive.manifest.bytes)
    try:
        result.los, result.bytes = _volumes_match_index(archive, reporter)
    except PgBlobDumpError as e:
        result.problems.append(str(e))
    if result.data_only:
        result.damaged = _damaged_frames(archive)
    return result


def _damaged_frames(archive: PackedDirectory) -> list[Damaged]:
    """The damaged frames of an archive whose manifest and index are sound, each with
    the LOs it loses: its volumes read again the way restore --skip-damaged reads them
    (only once damage was found, so a sound archive is read once)."""
    found: list[Damaged] = []
    try:
        for item in archive._items(skip_damaged=True):
            if isinstance(item, Damaged):
                found.append(item)
    except PgBlobDumpError:
        pass  # what reading past the damage cannot tell is in the problems already
    return found


def _volume_records(archive: PackedDirectory) -> Iterator[tuple[int, int, int, Meta]]:
    """(oid, size, checksum, metadata) of every LO in the volumes, in OID order: as they
    come for a dump; sorted through a SortingIndexBuilder (runs spilled to a temporary
    file) for a pack, whose volumes keep the pg_dump archive's order."""
    if archive.ordered:
        for p in archive.pieces(zeros=False):
            if p.last:
                yield p.oid, p.size, p.checksum, p.meta
        return
    ids = {m: k for k, m in enumerate(archive.index.metas.values)}
    sorter = SortingIndexBuilder()
    try:
        for p in archive.pieces(zeros=False):
            if p.last:
                sorter.add(p.oid, ids.get(p.meta, -1) & 0xFFFFFFFF, p.size, 0, 0, p.checksum)
        for r in sorter.merged():
            yield r.oid, r.size, r.checksum, archive.index.meta(r.meta)
    finally:
        sorter.close()


def _volumes_match_index(archive: PackedDirectory, reporter: Reporter) -> tuple[int, int]:
    index = (r for r in archive.index if r.volume != CHAIN_VOLUME)  # bytes in a base: not here
    los = nbytes = 0
    for oid, size, checksum, meta in _volume_records(archive):
        r = next(index, None)
        if (
            r is None
            or (r.oid, r.size, r.checksum) != (oid, size, checksum)
            or archive.index.meta(r.meta) != meta
        ):
            raise CorruptArchive(f"{archive.where}: the index and the volumes disagree at LO {oid}")
        los += 1
        nbytes += size
        if los % STEP == 0:
            reporter.progress(los, nbytes)
    reporter.progress(los, nbytes)
    extra = next(index, None)
    if extra is not None:
        raise CorruptArchive(f"{archive.where}: the index lists LO {extra.oid}, no volume holds it")
    return los, nbytes


def check_chain(chain: Chain, reporter: Reporter = QUIET) -> ArchiveCheck:
    """``check_archive`` of an incremental archive and of every base it takes LOs from,
    and each LO it places in a base against that base's index (size and checksum): one
    ArchiveCheck for the chain (files of every link; LOs and bytes of the snapshot)."""
    result = check_archive(chain.top, reporter)
    for link in chain.links:
        if link.archive is None:
            continue
        log.info("checking base %d of %d: %s", link.depth + 1, len(chain.links), link.where)
        sub = check_archive(link.archive, reporter)
        result.files += sub.files
        result.problems += sub.problems
        result.damaged_files += [f"{link.where}/{f}" for f in sub.damaged_files]
        result.damaged += sub.damaged
        try:
            _carried_match(chain, link.depth, link.archive)
        except PgBlobDumpError as e:
            result.problems.append(str(e))
    if chain.incremental:
        result.los, result.bytes = chain.totals()
        result.expected_los, result.expected_bytes = result.los, result.bytes
    return result


def _carried_match(chain: Chain, depth: int, base: PackedDirectory) -> None:
    """The top's records of LOs in base ``depth`` equal the base's records."""
    held = iter(base.index)
    h = next(held, None)
    for r in chain.top.index:
        if r.volume != CHAIN_VOLUME or r.offset != depth:
            continue
        while h is not None and h.oid < r.oid:
            h = next(held, None)
        if h is None or h.oid != r.oid:
            raise CorruptArchive(f"{base.where}: does not hold LO {r.oid}, which"
                                 f" {chain.top.where} places there")  # fmt: skip
        if (h.size, h.checksum) != (r.size, r.checksum):
            raise CorruptArchive(f"{base.where}: LO {r.oid} is not the one {chain.top.where}"
                                 " names (size or checksum)")  # fmt: skip


@dataclass(frozen=True)
class Difference:
    """One LO that differs between the archive and the database."""

    oid: int
    what: str  # "missing" (in the archive, not the database), "extra", "differs"
    detail: str


def db_los(
    conn: psycopg.Connection, sel: Selection, side: SideConnection
) -> Iterator[tuple[int, int, int, Meta]]:
    """(oid, size, checksum, metadata) of the selected LOs of the database, in OID order,
    their bytes hashed as they stream (never held whole)."""
    empty = xxhash.xxh3_64_intdigest(b"")
    for row in iter_los(conn, sel, side):
        if isinstance(row, LoRun):
            view, at = memoryview(row.data), 0
            for oid, meta, size in zip(row.oids, row.metas, row.sizes, strict=True):
                digest = xxhash.xxh3_64_intdigest(view[at : at + size]) if size else empty
                at += size
                yield oid, size, digest, Meta(*meta)
            continue
        h = xxhash.xxh3_64()
        for c in row.chunks:
            h.update(c)
        yield row.oid, row.size, h.intdigest(), Meta(row.owner, row.acl, row.comment)


def comparing(
    stack: contextlib.ExitStack, archive: PackedDirectory, conninfo: str, reporter: Reporter,
    task: str,
) -> tuple[psycopg.Connection, SideConnection]:  # fmt: skip
    """A comparison with a database begun: the reporter told ``task`` and the archive's
    totals, a connection in a snapshot and its second one sharing it, both on ``stack``."""
    index = archive.index
    reporter.task(task, index.count)
    if archive.manifest is not None:
        reporter.totals(index.count, archive.manifest.bytes)
    conn = stack.enter_context(connect(conninfo, autocommit=True, doing="verify"))
    snapshot.begin(conn)
    side = SideConnection(conninfo, snapshot.export(conn), "verify (its second connection)", [])
    stack.enter_context(side)
    return conn, side


def compare_database(
    archive: PackedDirectory, conninfo: str, reporter: Reporter = QUIET
) -> Iterator[Difference]:
    """Differences between the archive's LOs and the database's, by OID, in OID order
    (a merge of two sorted streams: memory stays flat). Progress: the archive's LOs
    compared."""
    index = archive.index
    done = nbytes = 0
    with contextlib.ExitStack() as stack:
        conn, side = comparing(stack, archive, conninfo, reporter, "comparing with the database")
        db = db_los(conn, Selection(), side)
        a: IndexRecord | None = next(iter_index := iter(index), None)
        d = next(db, None)
        while a is not None or d is not None:
            if d is None or (a is not None and a.oid < d[0]):
                assert a is not None
                yield Difference(a.oid, "missing", "in the archive, not in the database")
                done, nbytes = done + 1, nbytes + a.size
                a = next(iter_index, None)
            elif a is None or d[0] < a.oid:
                yield Difference(d[0], "extra", "in the database, not in the archive")
                d = next(db, None)
            else:
                oid, size, checksum, meta = d
                differs = lo_diff(size, checksum, meta, a, index.meta(a.meta))
                if differs is not None:
                    yield Difference(oid, "differs", differs)
                done, nbytes = done + 1, nbytes + a.size
                if done % STEP == 0:
                    reporter.progress(done, nbytes)
                a = next(iter_index, None)
                d = next(db, None)
        conn.execute("COMMIT")
    reporter.progress(done, nbytes)


def lo_diff(size: int, checksum: int, meta: Meta, want: IndexRecord, want_meta: Meta) -> str | None:
    """How a database's LO differs from the archive's record of it (its bytes first,
    then owner, ACL and comment), or None when it is equal."""
    if (size, checksum) != (want.size, want.checksum):
        if size != want.size:
            return f"{size:,} bytes vs {want.size:,} in the archive"
        return "same size, other bytes"
    if meta != want_meta:
        return _meta_diff(meta, want_meta)
    return None


def _meta_diff(have: Meta, want: Meta) -> str:
    parts = []
    if have.owner != want.owner:
        parts.append(f"owner {have.owner} vs {want.owner}")
    if have.acl != want.acl:
        parts.append(f"ACL {have.acl} vs {want.acl}")
    if have.comment != want.comment:
        parts.append("comment")
    return ", ".join(parts)
