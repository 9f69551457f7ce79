"""``pack``: the LOs of a pg_dump archive into a packed archive.

The archive (custom, directory or tar; versions 1.12 to 1.16; any compression) is read
in one pass through the TOC reader (``toc.lo.iter_data``): each LO with its owner, its
ACL as the aclitems its GRANT/REVOKE commands give (``toc.acl.grants``, the structured
form, restored exactly), its comment and its bytes, decompressed. The LOs go into the
volumes in the archive's data order, which from pg_dump 17 is grouped by owner and ACL
rather than by OID: the index sorts its records (SortingIndexBuilder) and the manifest
says ``"ordered": false``.

What is not LO data is kept so nothing is lost: a directory or tar archive's other files
(toc.dat, the tables' data files, the LO list files) unchanged, as the members of
``pg_dump.tar``; a custom archive as ``pg_dump.custom``, itself a custom archive: the
same header and TOC, the other data blocks byte for byte, the BLOBS entries without
data. ``unpack`` puts the archive back together.
"""

from __future__ import annotations

import logging
import os
import re
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import BinaryIO

import xxhash

from pgblobdump.aclitem import AclItem, format_item
from pgblobdump.errors import NotFound
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.manifest import PackSource
from pgblobdump.packed.format.spec import DEFAULT_VOLUME_SIZE, PIECE_MAX, ZSTD_LEVEL
from pgblobdump.packed.write.packer import LoPacker
from pgblobdump.packed.write.writer import ArchiveWriter, check_settings
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.spool import Gather
from pgblobdump.storage import FileInfo, Storage
from pgblobdump.toc import lo as toc_lo
from pgblobdump.toc.blocks import BlockIndex
from pgblobdump.toc.compression import SUFFIXES
from pgblobdump.toc.reader import Archive
from pgblobdump.toc.write import without_lo_data

log = logging.getLogger(__name__)

REST_CUSTOM = "pg_dump.custom"
"""The file of an archive packed from a custom archive: that archive without LO data."""
REST = "pg_dump.tar"
"""The file of a packed directory or tar archive holding the pg_dump archive's files
that are not LO data (toc.dat, table data, LO list files), as tar members."""


@dataclass(frozen=True)
class PackResult:
    los: int
    bytes: int
    seconds: float
    files: list[FileInfo]
    kept: bool  # whether the pg_dump archive's other files are kept (REST)
    acl_unread: int  # LOs whose ACL commands were not GRANT/REVOKE: default privileges


def meta_of(lo: toc_lo.LargeObject) -> tuple[Meta, bool]:
    """The packed metadata of an archive's LO, and whether its ACL was understood."""
    acl: tuple[str, ...] | None = None
    understood = True
    if lo.acl:
        items = lo.grants
        if items is None:
            understood = False
        else:
            acl = _acl_text(items)
    return Meta(lo.owner, acl, lo.comment), understood


@lru_cache(maxsize=1024)
def _acl_text(items: tuple[AclItem, ...]) -> tuple[str, ...]:
    """``items`` as aclitem text (lo_grants gives the LOs of one group the same items)."""
    return tuple(format_item(i) for i in items)


def _is_lo_data(name: str, suffix: str) -> bool:
    """``blob_<oid>.dat`` (with the compression suffix): an LO's data file."""
    base = name[: -len(suffix)] if suffix and name.endswith(suffix) else name
    return base.startswith("blob_") and base.endswith(".dat") and base[5:-4].isdigit()


def _other_files(root: str, suffix: str) -> list[str]:
    """The files of directory ``root`` that are not LO data (``_is_lo_data``), sorted.

    A million names: those that are plainly LO data (``blob_<ASCII digits>.dat`` with or
    without the suffix) are cut out of the listing by one regex pass; the few left are
    checked one by one, so the answer is _is_lo_data's exactly."""
    plain = re.compile(r"^blob_[0-9]+\.dat(?:" + re.escape(suffix) + r")?\n", re.M)
    left: list[str] = []
    with os.scandir(root) as it:  # in slices: a million names at once are 100 MB
        while names := [e.name for e in islice(it, 1 << 16)]:
            text = "\n".join(names) + "\n"
            if text.count("\n") == len(names):  # no name holds a newline
                names = plain.sub("", text).split("\n")[:-1]
            left += names
    return sorted(
        n for n in left
        if not _is_lo_data(n, suffix) and os.path.isfile(os.path.join(root, n))
    )  # fmt: skip


class _Hashing:
    """A write-only file that hashes and counts what passes to ``out``."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.h = xxhash.xxh3_128()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.h.update(data)
        self.size += len(data)
        return len(data)


def _keep_custom(archive: Archive, storage: Storage, blocks: BlockIndex) -> FileInfo:
    """A custom archive without its LO data, as REST_CUSTOM (toc.write.without_lo_data:
    the same header and TOC, the other data blocks byte for byte, the BLOBS entries
    without data); ``blocks``: the LO data blocks the walk passed, not read again."""
    with storage.create(REST_CUSTOM) as raw, tempfile.TemporaryFile() as out:
        # written whole to a temporary file first: the TOC's Offsets are patched at the end
        without_lo_data(out, archive, blocks)
        out.seek(0)
        h = _Hashing(raw)
        while chunk := out.read(1 << 20):
            h.write(chunk)
    return FileInfo(REST_CUSTOM, h.size, h.h.hexdigest())


def _keep_rest(archive: Archive, storage: Storage, blocks: BlockIndex) -> FileInfo | None:
    """A directory or tar archive's files other than LO data, unchanged, as the members
    of one uncompressed tar file, REST (one file however many list files pg_dump 17
    wrote: one per 1,000 LOs); a custom archive without its LO data (_keep_custom)."""
    if archive.kind == "custom":
        return _keep_custom(archive, storage, blocks)
    suffix = SUFFIXES.get(archive.header.compression, "")
    with storage.create(REST) as raw:
        out = _Hashing(raw)
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            if archive.kind == "directory":
                assert archive.root is not None
                for name in _other_files(str(archive.root), suffix):
                    tar.add(str(archive.root / name), arcname=name, recursive=False)
            else:
                with tarfile.open(archive.path) as source:
                    for member in source:
                        if member.isfile() and not _is_lo_data(member.name, suffix):
                            data = source.extractfile(member)
                            assert data is not None
                            with data:
                                tar.addfile(member, data)
    return FileInfo(REST, out.size, out.h.hexdigest())


def pack(
    archive: Archive,
    storage: Storage,
    volume_size: int = DEFAULT_VOLUME_SIZE,
    level: int = ZSTD_LEVEL,
    reporter: Reporter = QUIET,
) -> PackResult:
    """Pack ``archive``'s LOs (and, for a directory or tar archive, its other files)
    into ``storage``. NotFound, before anything is written, if it holds no LO."""
    check_settings(volume_size, level)
    t0 = time.perf_counter()
    blocks = BlockIndex()  # the LO data blocks, as the walk passes them
    walk = toc_lo.iter_data(archive, blocks, lambda n: _counted(archive, n, reporter))
    first = next(walk, None)
    if first is None:
        raise NotFound(f"{archive.name}: no large objects in this archive: nothing to pack")
    unread = 0
    with ArchiveWriter(storage, volume_size=volume_size, level=level) as writer:
        packer = writer.worker(ordered=False)
        done = nbytes = 0
        last = time.monotonic()
        # the last LO's (owner, acl, comment) and its meta: a group's LOs share them
        same: tuple[object, ...] | None = None
        meta = Meta(None, None, None)
        for lo, pieces in _chain(first, walk):
            key = (lo.owner, lo.acl, lo.comment)
            if key != same:
                meta, understood = meta_of(lo)
                same = key if understood else None
                if not understood:
                    unread += 1
                    reporter.note(f"LO {lo.oid}: ACL commands not understood, packed with the"
                                  f" default privileges: {'; '.join(lo.acl)}")  # fmt: skip
            # Most LOs come in one piece or none (a million empty ones): no Gather then.
            it = iter(pieces)
            one = next(it, b"")
            two = next(it, None)
            if two is None and len(one) <= PIECE_MAX:
                packer.add(lo.oid, meta, one)
                size = len(one)
            else:
                size = _gathered(packer, lo.oid, meta, one, two, it)
            done += 1
            nbytes += size
            if not done & 0xFF and (now := time.monotonic()) - last > 0.1:
                last = now
                reporter.progress(done, nbytes)
        kept = _keep_rest(archive, storage, blocks)
        if kept is not None:
            writer.files.append(kept)
        h = archive.header
        source = PackSource(
            pg_dump_archive=archive.name,
            format=archive.kind,
            archive_version=h.version_text,
            compression=h.compression,
            pg_dump_version=h.pg_dump_version,
            server_version=h.server_version,
            database=h.dbname,
            kept=kept.name if kept is not None else None,
        )
        try:
            manifest = writer.finish(source)
        except BaseException:
            if kept is not None:
                storage.remove(kept.name)
            raise
        files = list(writer.files) + [f for f in [writer.manifest_file] if f is not None]
    reporter.progress(done, nbytes)
    return PackResult(manifest.los, manifest.bytes, time.perf_counter() - t0, files,
                      kept is not None, unread)  # fmt: skip


def _gathered(
    packer: LoPacker, oid: int, meta: Meta, one: bytes, two: bytes | None, rest: Iterator[bytes]
) -> int:
    """Pack an LO that came in several pieces (``one``, ``two``, then ``rest``), or in
    one too big for a single record; returns its size."""
    data = Gather()
    data.add(one)
    if two is not None:
        data.add(two)
    for piece in rest:
        data.add(piece)
    chunks = data.result()
    if data.size <= PIECE_MAX:
        assert isinstance(chunks, list)
        packer.add(oid, meta, b"".join(chunks))
    else:
        packer.add_chunks(oid, meta, data.size, chunks)
    return data.size


def _counted(archive: Archive, los: int, reporter: Reporter) -> None:
    h = archive.header
    log.info("%s: a pg_dump %s archive of %d LOs, written by %s", archive.name, archive.kind,
             los, h.pg_dump_version)  # fmt: skip
    reporter.totals(los, 0)


Item = tuple[toc_lo.LargeObject, Iterator[bytes]]


def _chain(first: Item, rest: Iterator[Item]) -> Iterator[Item]:
    yield first
    yield from rest
