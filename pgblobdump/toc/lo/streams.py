"""The data streams of an archive's LOs, whatever its format: in data order, each LO's
stored size and (on demand) its bytes, decompressed; or its size only, in runs.

A custom archive's LOs are in its BLOBS data blocks (custom.py), a directory or tar
archive's in one file each, named by LO list files (directory.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pgblobdump.toc.blocks import BlockIndex
from pgblobdump.toc.lo import custom, directory
from pgblobdump.toc.lo.catalog import BlobsEntry
from pgblobdump.toc.lo.data import LoData, SizeRun
from pgblobdump.toc.reader import Archive


def iter_data(
    archive: Archive, known: list[BlobsEntry] | None = None, index: BlockIndex | None = None
) -> Iterator[LoData]:
    """Every LO with data in the archive, in data order, in one pass: its stored size is
    known at once, its bytes are read when ``pieces()`` is iterated (at most once, before
    the next LO is asked for) and skipped otherwise. ``known`` as for iter_sizes; a custom
    archive's blocks walked are recorded in ``index`` (see toc.blocks.block_index)."""
    if archive.kind == "custom":
        yield from custom.data(archive, known, index)
    else:
        yield from directory.data(archive, known)


def iter_sizes(
    archive: Archive, known: list[BlobsEntry] | None = None, verify: bool = False
) -> Iterator[tuple[int, int, int]]:
    """iter_data's sizes, flat: (oid, stored size, BLOBS dump id) per LO.

    ``known`` are the archive's BLOBS entries when a caller already has them (saves a
    pass over the TOC); ``verify`` as for iter_size_runs."""
    return flat(iter_size_runs(archive, known, verify))


def flat(items: Iterable[tuple[int, int, int] | SizeRun]) -> Iterator[tuple[int, int, int]]:
    """iter_size_runs' items as (oid, stored size, BLOBS dump id), one per LO."""
    for item in items:
        if isinstance(item, SizeRun):
            size, blobs_id = item.size, item.blobs_id
            for oid in item.oids:
                yield (oid, size, blobs_id)
        else:
            yield item


def iter_size_runs(
    archive: Archive, known: list[BlobsEntry] | None = None, verify: bool = False
) -> Iterator[tuple[int, int, int] | SizeRun]:
    """The sizes of iter_data, without reading any LO's bytes: (oid, stored size, BLOBS
    dump id) per LO, or a SizeRun for a run of same-size LOs of a custom archive.

    ``verify``: in a directory or tar archive, also check that each compressed data file
    holds a whole stream, which reads every file instead of taking its size (a custom
    archive's walk already checks every chunk length against the file)."""
    if archive.kind == "custom":
        yield from custom.size_runs(archive, known)
    else:
        for lo in directory.data(archive, known, verify):
            yield (lo.oid, lo.size, lo.blobs_id)
