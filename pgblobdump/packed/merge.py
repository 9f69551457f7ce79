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

from pgblobdump.errors import UsageError
from pgblobdump.packed.chain import Chain, where_of
from pgblobdump.packed.full import DATABASE_FILE
from pgblobdump.packed.index import Meta
from pgblobdump.packed.packer import LoPacker
from pgblobdump.packed.reader import LoPiece
from pgblobdump.packed.writer import ArchiveWriter
from pgblobdump.pg.lostream import RUN_BYTES
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
        _feed(writer.worker(), chain.pieces(), reporter)
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


def _feed(packer: LoPacker, pieces: Iterator[LoPiece], reporter: Reporter) -> None:
    """The chain's LOs into ``packer``: runs of whole ones in bulk (``add_run``), an LO
    in pieces (large, or with holes given as zeros) through ``add_chunks``."""
    oids: list[int] = []
    metas: list[Meta] = []
    sizes: list[int] = []
    datas: list[bytes | memoryview] = []
    held = los = nbytes = 0

    def flush() -> None:
        nonlocal held
        if oids:
            packer.add_run(list(oids), list(metas), list(sizes), b"".join(datas))
            for column in (oids, metas, sizes, datas):
                column.clear()
            held = 0

    it = iter(pieces)
    for p in it:
        los += 1
        nbytes += p.size
        if p.offset == 0 and p.last and p.size <= RUN_BYTES:
            oids.append(p.oid)
            metas.append(p.meta)
            sizes.append(p.size)
            datas.append(p.data)
            held += p.size
            if held >= RUN_BYTES:
                flush()
        else:
            flush()
            packer.add_chunks(p.oid, p.meta, p.size, _rest(p, it))
        if los % 2000 == 0:
            reporter.progress(los, nbytes)
    flush()
    reporter.progress(los, nbytes)


def _rest(first: LoPiece, it: Iterator[LoPiece]) -> Iterator[bytes]:
    """An LO's bytes from its ``first`` piece through its last, from ``it``."""
    yield bytes(first.data)
    p = first
    while not p.last:
        p = next(it)
        if p.oid != first.oid:
            raise ValueError(f"LO {first.oid} is cut short")
        yield bytes(p.data)
