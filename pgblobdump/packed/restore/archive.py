"""``restore_archive``: the one entry to restoring a packed archive by name, choosing a
plain restore (directory, stream file, ``-``, ``s3://``), one share of it (``part``) or a
``--full`` archive's pg_restore sections around its LOs."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import ParamSpec

from pgblobdump import logs, storage
from pgblobdump.errors import UsageError
from pgblobdump.packed.chain.archives import Chain
from pgblobdump.packed.read import source
from pgblobdump.packed.read.parts import job_shares, share, share_items
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.restore.full import restore_full
from pgblobdump.packed.restore.jobs import restore_jobs
from pgblobdump.packed.restore.request import RestoreRequest, RestoreResult
from pgblobdump.packed.restore.restorer import restore
from pgblobdump.pgconstants import OID_MAX
from pgblobdump.report.reporter import QUIET, Reporter

log = logging.getLogger(__name__)

P = ParamSpec("P")


def _logged(fn: Callable[P, RestoreResult]) -> Callable[P, RestoreResult]:
    """For -v: the restore as a phase with its timing, and what it restored."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> RestoreResult:
        given = signature.bind(*args, **kwargs).arguments
        req: RestoreRequest = given["req"]
        how = "full, " if req.full else ""
        how += f"part {req.part[0]}/{req.part[1]}, " if req.part else ""
        with logs.phase(log, f"restoring {given['archive']} ({how}{req.jobs} connection(s))"):
            result = fn(*args, **kwargs)
        log.info("restored %d LOs, %d bytes; %d skipped", result.los, result.bytes, result.skipped)
        return result

    return run


@_logged
def restore_archive(
    conninfo: str,
    archive: str,
    req: RestoreRequest,
    reporter: Reporter = QUIET,
) -> RestoreResult:
    """Restore the packed archive named ``archive`` into the database at ``conninfo`` as
    ``req`` says."""
    chain = _chain(archive, req)
    if chain is not None and chain.incremental:
        return _restore_chain(conninfo, chain, req, reporter)
    opened = chain.top if chain is not None else None
    if req.full:
        if archive == storage.STREAM:
            raise UsageError(
                "--full restores a directory archive (dump --full writes one), not a stream"
            )
        los = None
        if req.jobs > 1:

            def los() -> RestoreResult:
                return _restore_jobs(conninfo, archive, req, reporter, opened)

        directory = opened or source.directory(archive)
        announce(reporter, directory)
        return restore_full(conninfo, directory, req, req.jobs, reporter, los)
    if req.jobs > 1:
        return _restore_jobs(conninfo, archive, req, reporter, opened)
    if req.part is not None:
        directory = opened or source.directory(archive)
        first, last = _part(reporter, directory, req.part)
        announce(reporter, directory, (first, last))
        items = share_items(directory, first, last)
        metas = directory.index.metas.values
        return restore(conninfo, items, req, reporter, directory.index, metas, (first, last))
    with source.open_source(archive, req.skip_damaged, opened) as src:
        if src.directory is not None:
            announce(reporter, src.directory)
        return restore(conninfo, src.items, req, reporter, src.index, src.metas)


def _restore_jobs(
    conninfo: str, archive: str, req: RestoreRequest, reporter: Reporter,
    opened: PackedDirectory | None,
) -> RestoreResult:  # fmt: skip
    """``--jobs N`` without --full: the archive (or its ``--part K/N``) cut into N
    contiguous OID ranges by the index, one connection each. Share j of part K/N is
    share (K-1)*N_jobs + j of N*N_jobs: the same cuts, so the parts still tile.
    ``opened``: the archive, opened and checked already."""
    if archive == storage.STREAM:
        raise UsageError("--jobs restores a directory archive over N connections, not a stream")
    directory = opened or source.directory(archive)
    part = _part(reporter, directory, req.part) if req.part is not None else None
    announce(reporter, directory, part)
    ranges = job_shares(directory, req.part, req.jobs)
    # a directory each: reading the index and volumes is not shared between threads
    shares = [share_items(source.directory(archive), lo, hi, req.skip_damaged) for lo, hi in ranges]
    return restore_jobs(conninfo, shares, req, reporter, directory.index,
                        directory.index.metas.values, part)  # fmt: skip


def _part(reporter: Reporter, directory: PackedDirectory, part: tuple[int, int]) -> tuple[int, int]:
    """The OID range of share K of N (``part``) of the archive, said in a note."""
    k, n = part
    first, last = share(directory, k, n)
    reporter.note(f"part {k}/{n}: OIDs {first}..{last}")
    return first, last


def _chain(archive: str, req: RestoreRequest) -> Chain | None:
    """The chain of a directory archive (a standalone one is a chain of one), its bases found
    and checked, and its own index whole against its manifest: before anything is
    written, since restore takes every LO's owner, ACL and comment from it (and the
    OIDs it checks for conflicts). None for a stream, whose metadata comes in frames
    each checked as it comes (read/stream.py)."""
    if archive == storage.STREAM or not storage.is_directory(archive):
        if req.bases:
            raise UsageError("--base goes with an incremental archive, a directory")
        return None
    chain = Chain.open(archive, req.bases)
    chain.top.check_index()
    if not chain.incremental:
        return chain
    if req.skip_damaged:
        raise UsageError(
            f"--skip-damaged reads one archive; {archive} is incremental (a chain of"
            f" {len(chain.links) + 1}): merge it into one first (pgblobdump merge)"
        )
    return chain


def _restore_chain(
    conninfo: str, chain: Chain, req: RestoreRequest, reporter: Reporter
) -> RestoreResult:
    """An incremental archive and its bases, restored as the one archive they make: cut
    into ``--jobs`` (and ``--part``) OID ranges by the top's index, which lists every LO;
    each range reads the top's volumes, then each base's, for the LOs each holds."""
    top = chain.top
    part = _part(reporter, top, req.part) if req.part is not None else None
    metas = top.index.metas.values

    def los() -> RestoreResult:
        announce(reporter, top, part)
        ranges = job_shares(top, req.part, req.jobs)
        if req.jobs == 1:
            return restore(conninfo, chain.items(*ranges[0]), req, reporter, top.index, metas,
                           part)  # fmt: skip
        shares = [chain.reopened().items(lo, hi) for lo, hi in ranges]
        return restore_jobs(conninfo, shares, req, reporter, top.index, metas, part)

    if req.full:
        return restore_full(conninfo, top, req, req.jobs, reporter, los)
    return los()


def announce(reporter: Reporter, directory: PackedDirectory,
             part: tuple[int, int] | None = None) -> None:  # fmt: skip
    """Tell the reporter how many LOs and bytes the restore will take, before it begins:
    the manifest's totals, or the index's over a ``part``'s OID range."""
    if part is None and directory.manifest is not None:
        reporter.totals(*directory.manifest.snapshot_totals)  # a chain's: every LO's
        return
    if not reporter.shown:
        return  # a pass over the index only for the display
    first, last = part or (0, OID_MAX)
    los = nbytes = 0
    for r in directory.index.range(first, last):
        los += 1
        nbytes += r.size
    reporter.totals(los, nbytes)
