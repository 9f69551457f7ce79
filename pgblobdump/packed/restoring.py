"""``restore_archive``: the one entry to restoring a packed archive by name, choosing a
plain restore (directory, stream file, ``-``, ``s3://``), one share of it (``part``) or a
``--full`` archive's pg_restore sections around its LOs."""

from __future__ import annotations

from pgblobdump import storage
from pgblobdump.errors import UsageError
from pgblobdump.packed import source
from pgblobdump.packed.full import restore_full
from pgblobdump.packed.parts import share, share_items
from pgblobdump.packed.restore import RestoreRequest, RestoreResult, restore
from pgblobdump.report.reporter import QUIET, Reporter


def restore_archive(
    conninfo: str,
    archive: str,
    req: RestoreRequest,
    reporter: Reporter = QUIET,
    again: str = "",
) -> RestoreResult:
    """Restore the packed archive named ``archive`` into the database at ``conninfo`` as
    ``req`` says. ``again``: the command that resumes this restore, for messages."""
    if req.full:
        if archive == storage.STREAM:
            raise UsageError(
                "--full restores a directory archive (dump --full writes one), not a stream"
            )
        return restore_full(conninfo, source.directory(archive), req, req.jobs, reporter)
    if req.part is not None:
        k, n = req.part
        directory = source.directory(archive)
        first, last = share(directory, k, n)
        reporter.note(f"part {k}/{n}: OIDs {first}..{last}")
        items = share_items(directory, first, last)
        metas = directory.index.metas.values
        return restore(conninfo, items, req, reporter, directory.index, metas, (first, last),
                       again)  # fmt: skip
    with source.open_source(archive, req.skip_damaged) as src:
        return restore(conninfo, src.items, req, reporter, src.index, src.metas, again=again)
