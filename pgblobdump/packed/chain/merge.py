"""``merge``: an incremental archive's chain folded into one standalone archive, with no
database: every LO from the archive that holds it, in OID order, with the metadata of the
incremental's snapshot, packed anew (one worker); a ``--full`` archive's pg_dump file
copied. The result is a standalone archive of the incremental's snapshot, as a fresh dump of
that snapshot would be LO by LO, and a base for the next incremental dumps."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pgblobdump.errors import CorruptArchive, UsageError
from pgblobdump.packed.chain.archives import Chain, where_of
from pgblobdump.packed.format.holes import filled
from pgblobdump.packed.format.manifest import DumpSource, MergedFrom
from pgblobdump.packed.format.spec import DATABASE_FILE
from pgblobdump.packed.read.items import Item, LoPiece, WholeLos
from pgblobdump.packed.read.parts import share
from pgblobdump.packed.write.packer import LoPacker
from pgblobdump.packed.write.writer import ArchiveWriter
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
          reporter: Reporter = QUIET, jobs: int = 1) -> MergeResult:  # fmt: skip
    """Write ``chain`` as one standalone archive into ``storage``; any failure leaves nothing.
    ``jobs``: threads, each packing a contiguous OID range (cut from the top's index) of
    its own readers into its own volumes, as dump's workers do (zstd, reading and
    writing run beside each other; the Python between them takes turns)."""
    if not chain.incremental:
        raise UsageError(f"{chain.path} is a standalone archive already: nothing to merge")
    if not 1 <= jobs <= 64:
        raise UsageError(f"--jobs must be between 1 and 64 (got {jobs})")
    t0 = time.perf_counter()
    top = chain.top
    assert top.manifest is not None
    reporter.totals(*chain.totals())
    ranges = [share(top, k, jobs) for k in range(1, jobs + 1)]
    with ArchiveWriter(storage, None, volume_size, level) as writer:
        packers = [writer.worker() for _ in ranges]
        chains = [chain] + [chain.reopened() for _ in ranges[1:]]
        feeds = [functools.partial(_feed, p, c.ordered_items(lo, hi))
                 for p, c, (lo, hi) in zip(packers, chains, ranges, strict=True)]  # fmt: skip
        _run(feeds, reporter)
        source = top.manifest.source
        if isinstance(source, DumpSource) and source.pg_dump is not None:
            writer.put_file(DATABASE_FILE, _chunks(top, DATABASE_FILE))
        merged = MergedFrom(where_of(chain.path), top.manifest_sum,
                            top.incremental.chain if top.incremental else ())  # fmt: skip
        manifest = writer.finish(source, merged_from=merged)
        files = [*writer.files, *([writer.manifest_file] if writer.manifest_file else [])]
    return MergeResult(manifest.los, manifest.bytes, time.perf_counter() - t0,
                       len(chain.links) + 1, files)  # fmt: skip


class _Counts:
    """LOs and bytes merged so far, over every thread."""

    def __init__(self) -> None:
        self.los = self.bytes = 0
        self.lock = threading.Lock()

    def add(self, los: int, nbytes: int) -> None:
        with self.lock:
            self.los += los
            self.bytes += nbytes


def _run(feeds: Sequence[Callable[[_Counts, threading.Event], None]], reporter: Reporter) -> None:
    """The first feed in this thread, the others in threads of their own; the first
    failure (or Ctrl-C here) stops them all, and is raised once they have stopped."""
    counts, stop = _Counts(), threading.Event()
    errors: list[BaseException] = []

    def work(feed: Callable[[_Counts, threading.Event], None]) -> None:
        try:
            feed(counts, stop)
        except BaseException as e:
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=work, args=(f,), name="pgblobdump-merge", daemon=True)
               for f in feeds[1:]]  # fmt: skip
    for t in threads:
        t.start()
    try:
        feeds[0](counts, stop)
        while any(t.is_alive() for t in threads):
            stop.wait(0.1)
            reporter.progress(counts.los, counts.bytes)
    except BaseException:
        stop.set()
        for t in threads:
            t.join(30)
        raise
    if errors:
        raise errors[0]
    reporter.progress(counts.los, counts.bytes)


def _chunks(top: Any, name: str) -> Iterator[bytes]:
    with top.storage.open(name) as f:
        while chunk := f.read(1 << 20):
            yield chunk


def _feed(packer: LoPacker, items: Iterator[Item], counts: _Counts,
          stop: threading.Event) -> None:  # fmt: skip
    """The chain's LOs, in OID order, into ``packer``: a run of whole LOs in bulk
    (``add_run``), an LO in pieces (large, or with holes: given as zeros, which the
    packer finds again) through ``add_chunks``."""
    it = iter(items)
    for item in it:
        if stop.is_set():
            return
        if isinstance(item, WholeLos):
            sizes = list(map(len, item.datas))
            packer.add_run(item.oids, item.metas, sizes, b"".join(item.datas))
            counts.add(len(item.oids), sum(sizes))
        elif isinstance(item, LoPiece):
            packer.add_chunks(item.oid, item.meta, item.size, _rest(item, it))
            counts.add(1, item.size)


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
