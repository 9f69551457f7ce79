"""``restore --jobs N``: a packed archive's LOs over N connections at once, each a
contiguous OID range (a share cut by the index), sharing one precheck and one journal,
each with its own ledger and lock-table share; the first failure stops them all and the
clean-up removes exactly what each made, or names it with ``--resume``."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterable, Iterator

import psycopg

from pgblobdump.errors import PgBlobDumpError
from pgblobdump.packed.crew import Crew
from pgblobdump.packed.index import Index, Meta
from pgblobdump.packed.journal import Journal
from pgblobdump.packed.precheck import precheck
from pgblobdump.packed.reader import Item
from pgblobdump.packed.request import RestoreRequest, RestoreResult
from pgblobdump.packed.restore import Restorer, taken
from pgblobdump.pg.connect import connect
from pgblobdump.pg.failure import failed_all
from pgblobdump.pg.ledger import Ledger
from pgblobdump.report.reporter import Reporter


def restore_jobs(
    conninfo: str,
    shares: list[Iterator[Item]],
    req: RestoreRequest,
    reporter: Reporter,
    index: Index,
    metas: Iterable[Meta],
    part: tuple[int, int] | None = None,
) -> RestoreResult:
    """``restore`` over one connection per share (``restore --jobs N``: contiguous OID
    ranges of the archive, or of its ``part``), at once. Roles and conflicts are checked
    once for all before anything is written; each connection has its own ledger and its
    share of the lock table (``req.sharing``), one journal holds them all. The first
    failure (or Ctrl-C, SIGTERM) stops every connection, and the clean-up removes exactly
    what each made, or names what is left and --resume."""
    t0 = time.perf_counter()
    metas = list(metas)
    lock = threading.Lock()
    with contextlib.ExitStack() as stack:
        main = stack.enter_context(connect(conninfo, autocommit=True, doing="restore"))
        journal = Journal.open(main, conninfo, index, part)
        ledgers: list[Ledger] = []

        def save(_: Ledger) -> None:
            with lock:
                journal.save(*ledgers)

        ledgers += [Ledger(conninfo, "restore", on_change=save) for _ in shares]
        first = Restorer(main, ledgers[0], req, reporter, metas=metas)
        first.check_roles(metas)
        if not req.skipping:
            precheck(main, index, req, part, journal)
        workers = [first] + [
            Restorer(
                stack.enter_context(connect(conninfo, autocommit=True, doing="restore")),
                ledger, req, reporter, metas=metas,
            )
            for ledger in ledgers[1:]
        ]  # fmt: skip
        crew = Crew(workers, "pgblobdump-restore-job")

        def work(w: Restorer, items: Iterator[Item]) -> None:
            try:
                for item in items:
                    if crew.stop.is_set():
                        return
                    w.take(item)
                if not crew.stop.is_set():
                    w.finish()
            except BaseException as e:  # the first one is the restore's error
                crew.failed(e)

        try:
            crew.run([functools.partial(work, w, items)
                      for w, items in zip(workers, shares, strict=True)], reporter)  # fmt: skip
        except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt) as e:
            runs = [(w.writer.ledger, w.conn) for w in workers]
            error = failed_all(e, "restore", runs, taken, if_left=req.resume_hint,
                               stop=crew.stop_all)  # fmt: skip
            journal.save(*ledgers)  # what is left, if anything, for the next run's hint
            raise error from e
        redone = journal.redone(*ledgers)
        journal.remove()
    lost = tuple(sorted(o for w in workers for o in w.damaged_oids))
    return RestoreResult(
        sum(w.los for w in workers), sum(w.bytes for w in workers),
        sum(w.skipped for w in workers), time.perf_counter() - t0,
        sum(w.damaged for w in workers), lost, redone,
    )  # fmt: skip
