"""``merge``: an incremental archive's chain folded into one full archive, with no
database: every LO from the archive that holds it, in OID order, with the metadata of the
incremental's snapshot, packed anew (one worker); a ``--full`` archive's pg_dump file
copied. The result is a full archive of the incremental's snapshot, as a fresh dump of
that snapshot would be LO by LO, and a base for the next incremental dumps."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pgblobdump.errors import CorruptArchive, UsageError
from pgblobdump.packed.chain import Chain, where_of
from pgblobdump.packed.full import DATABASE_FILE
from pgblobdump.packed.holes import filled
from pgblobdump.packed.packer import LoPacker
from pgblobdump.packed.reader import Item, LoPiece, WholeLos
from pgblobdump.packed.writer import ArchiveWriter
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.storage import FileInfo, Storage


@dataclass(frozen=True)
class MergeResult:
    los: int
    bytes: int
    seconds: float
    links: int
    files: list[FileInfo] = field(default_factory=list)


def merge(chain: Chain, storage: Storage, volume_size: int, level: int,
          reporter: Reporter = QUIET) -> MergeResult:  # fmt: skip
    """Write ``chain`` as one full archive into ``storage``; any failure leaves nothing."""
    if not chain.incremental:
        raise UsageError(f"{chain.path} is a full archive already: nothing to merge")
    t0 = time.perf_counter()
    top = chain.top
    assert top.manifest is not None
    reporter.totals(*chain.totals())
    with ArchiveWriter(storage, None, volume_size, level) as writer:
        _feed(writer.worker(), chain.ordered_items(), reporter)
        source = dict(top.manifest["source"])
        if "pg_dump" in source:
            writer.put_file(DATABASE_FILE, _chunks(top, DATABASE_FILE))
        merged = {"archive": where_of(chain.path), "manifest": top.manifest_sum,
                  "chain": top.incremental["chain"] if top.incremental else []}  # fmt: skip
        manifest = writer.finish(source, {"merged_from": merged})
        files = [*writer.files, *([writer.manifest_file] if writer.manifest_file else [])]
    return MergeResult(manifest["los"], manifest["bytes"], time.perf_counter() - t0,
                       len(chain.links) + 1, files)  # fmt: skip


def _chunks(top: Any, name: str) -> Iterator[bytes]:
    with top.storage.open(name) as f:
        while chunk := f.read(1 << 20):
            yield chunk


def _feed(packer: LoPacker, items: Iterator[Item], reporter: Reporter) -> None:
    """The chain's LOs, in OID order, into ``packer``: a run of whole LOs in bulk
    (``add_run``), an LO in pieces (large, or with holes: given as zeros, which the
    packer finds again) through ``add_chunks``."""
    los = nbytes = 0
    it = iter(items)
    for item in it:
        if isinstance(item, WholeLos):
            sizes = list(map(len, item.datas))
            packer.add_run(item.oids, item.metas, sizes, b"".join(item.datas))
            los += len(item.oids)
            nbytes += sum(sizes)
        elif isinstance(item, LoPiece):
            packer.add_chunks(item.oid, item.meta, item.size, _rest(item, it))
            los += 1
            nbytes += item.size
        reporter.progress(los, nbytes)


def _rest(first: LoPiece, it: Iterator[Item]) -> Iterator[bytes]:
    """An LO's bytes from its ``first`` piece through its last, from ``it``, holes given
    as zeros."""

    def pieces() -> Iterator[LoPiece]:
        p = first
        yield p
        while not p.last:
            nxt = next(it)
            if not isinstance(nxt, LoPiece) or nxt.oid != first.oid:
                raise CorruptArchive(f"LO {first.oid} is cut short")
            p = nxt
            yield p

    for p in filled(pieces()):
        yield bytes(p.data)
