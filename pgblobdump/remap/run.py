"""``restore ARCHIVE --remap taken|all``: an archive's LOs into a database whose OIDs are
taken, at new OIDs, and the references to them rewritten.

In order, each step done before the next begins:

1. Before anything is written: the archive opened and its index checked; the columns to
   rewrite resolved and checked (the role may update them, nothing hides rows from it,
   the new OIDs fit); the OIDs the target has found (``taken``); the block of new OIDs
   chosen and reserved (remap/plan.py); the run entered in ``pgblobdump_remap.runs``.
2. (``--full``) pg_restore's pre-data and data sections.
3. The LOs, through restore's writer at their new OIDs, each batch's mapping in its own
   transaction (remap/translate.py).
4. The references: each column in one transaction with its journal row
   (remap/columns.py).
5. (``--full``) pg_restore's post-data section, then the run is finished.

After a kill -9, the same command with ``--resume`` finds the run by the archive, takes
the same block again, skips the LOs the mapping holds, and the columns rewritten.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg

from pgblobdump import storage
from pgblobdump.errors import DatabaseError, PgBlobDumpError, UsageError
from pgblobdump.packed.chain.archives import Chain
from pgblobdump.packed.read import source
from pgblobdump.packed.read.items import Item
from pgblobdump.packed.read.parts import job_shares, share_items
from pgblobdump.packed.restore.archive import announce
from pgblobdump.packed.restore.full import restore_full
from pgblobdump.packed.restore.jobs import restore_jobs
from pgblobdump.packed.restore.request import RestoreRequest, RestoreResult
from pgblobdump.packed.restore.restorer import restore
from pgblobdump.pg.connect import connect
from pgblobdump.refs import rewrite
from pgblobdump.remap import common, discover, store
from pgblobdump.remap.common import RemapRequest, RemapResult
from pgblobdump.remap.plan import Assignment, Ranks, taken_of
from pgblobdump.remap.translate import Remapper
from pgblobdump.report.reporter import QUIET, Reporter

__all__ = ["RemapRequest", "RemapResult", "check", "restore_remapped"]


def check(req: RestoreRequest) -> None:
    """What --remap does not go with."""
    common.refuse_companions(req.part, req.on_conflict, "archive", "restores")
    if req.skip_damaged:
        raise UsageError("--remap restores an intact archive; --skip-damaged does not go with it")


def restore_remapped(
    conninfo: str, archive: str, req: RestoreRequest, remap: RemapRequest,
    reporter: Reporter = QUIET,
) -> RemapResult:  # fmt: skip
    """Restore the directory archive ``archive`` (a chain too) into the database at
    ``conninfo`` at new OIDs, as ``remap`` says; see the module's docstring."""
    check(req)
    if archive == storage.STREAM or not storage.is_directory(archive):
        raise UsageError(
            f"--remap restores a directory archive ({archive} is a stream): it reads every"
            " OID from the index before anything is written"
        )
    common.check_map_out(remap, Path(archive), *map(Path, req.bases))
    t0 = time.perf_counter()
    chain = Chain.open(archive, req.bases)
    top = chain.top
    top.check_index()
    ranks = Ranks(top.index)
    subject = common.Subject(archive, top.manifest_sum or archive, "restore", "the archive",
                             "--referenced-by")  # fmt: skip
    with connect(conninfo, autocommit=True, doing="restore") as conn:
        # every refusal before anything is written, the state's schema included
        run, a, cols = common.prepare(conn, subject, remap, req.resume, ranks,
                                      lambda: taken_of(conn, top.index), reporter)  # fmt: skip
        try:
            result = _restore(conninfo, conn, archive, chain, req, run, a, cols, reporter)
        except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt) as e:
            raise common.failed(e, conninfo, run.run, "restore") from None
        result = dataclasses.replace(result, seconds=time.perf_counter() - t0)
        return common.conclude(conn, run, a, remap, result, req.resume)


def _restore(
    conninfo: str, conn: psycopg.Connection, archive: str, chain: Chain, req: RestoreRequest,
    run: store.Run, a: Assignment, cols: list[rewrite.RewriteColumn], reporter: Reporter,
) -> RestoreResult:  # fmt: skip
    """Steps 2 to 5 of the module's docstring."""
    top = chain.top
    done = store.done_olds(conn, run.run) if req.resume else []
    remapper = Remapper(run.run, a, done)
    rreq = dataclasses.replace(req, resume=False)  # the mapping says what is done

    tables: set[int] = {int(t) for t in run.plan.get("tables", ())}
    before = discover.user_tables(conn) if req.full and not req.resume else set()

    def restored(section: str) -> None:
        if section == "data":
            new = discover.user_tables(conn) - before
            tables.update(discover.restored(conn, new, discover.archive_tables(top)))
            store.set_tables(conn, run.run, tables)
            store.set_phase(conn, run.run, "los")

    def los() -> RestoreResult:
        def found() -> list[rewrite.RewriteColumn]:
            named = {(c.relid, c.column) for c in cols}
            return [c for c in discover.columns(conn, tables, run.run, reporter)
                    if (c.relid, c.column) not in named]  # fmt: skip

        return common.los_then_rewrite(
            conn, run, remapper, cols, reporter,
            lambda: _los(conninfo, archive, chain, rreq, reporter, remapper),
            "post-data" if req.full else "done", found,
        )  # fmt: skip

    if req.full:
        if req.resume and run.phase == "begun":
            raise DatabaseError(
                f"the interrupted run {run.run} stopped inside pg_restore's pre-data or data"
                " section, which cannot be resumed: drop the database and start again"
            )
        if not req.resume:
            store.set_phase(conn, run.run, "begun")
        skip: tuple[str, ...] = () if not req.resume else ("pre-data", "data")
        skip += ("post-data",) if run.phase == "done" else ()
        result = restore_full(
            conninfo, top, req, req.jobs, reporter, los, skip=skip,
            after=restored,
        )  # fmt: skip
    else:
        result = los()
    store.finish(conn, run.run)
    return result


def _los(
    conninfo: str, archive: str, chain: Chain, req: RestoreRequest, reporter: Reporter,
    remapper: Remapper,
) -> RestoreResult:  # fmt: skip
    top = chain.top
    announce(reporter, top)
    metas = top.index.metas.values
    if req.jobs == 1:
        items: Iterator[Item] = chain.items() if chain.incremental else top.items()
        return restore(conninfo, remapper.items(items, Ranks(top.index)), req, reporter,
                       top.index, metas, remapping=remapper)  # fmt: skip
    ranges = job_shares(top, None, req.jobs)
    shares = []
    for lo, hi in ranges:
        if chain.incremental:
            c = chain.reopened()
            shares.append(remapper.items(c.items(lo, hi), Ranks(c.top.index)))
        else:
            d = source.directory(archive)
            shares.append(remapper.items(share_items(d, lo, hi), Ranks(d.index)))
    return restore_jobs(conninfo, shares, req, reporter, top.index, metas, None, remapper)
