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

from pgblobdump.packed.format.index import Index, Meta
from pgblobdump.packed.read.items import Item
from pgblobdump.packed.restore.crew import Crew
from pgblobdump.packed.restore.hooks import RemapHooks, taken_meanwhile
from pgblobdump.packed.restore.journal import Journal
from pgblobdump.packed.restore.precheck import precheck
from pgblobdump.packed.restore.request import RestoreRequest, RestoreResult
from pgblobdump.packed.restore.restorer import Restorer, taken
from pgblobdump.pg.connect import connect
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
    remapping: RemapHooks | None = None,
) -> RestoreResult:
    """``restore`` over one connection per share (``restore --jobs N``: contiguous OID
    ranges of the archive, or of its ``part``), at once. Roles and conflicts are checked
    once for all before anything is written; each connection has its own ledger and its
    share of the lock table (``req.sharing``), one journal holds them all. The first
    failure (or Ctrl-C, SIGTERM) stops every connection, and the clean-up removes exactly
    what each made, or names what is left and --resume. ``remapping``: as ``restore``'s
    (no precheck, no journal)."""
    t0 = time.perf_counter()
    metas = list(metas)
    lock = threading.Lock()
    with contextlib.ExitStack() as stack:
        main = stack.enter_context(connect(conninfo, autocommit=True, doing="restore"))
        journal = Journal.open(main, conninfo, index, part) if remapping is None else None
        ledgers: list[Ledger] = []

        def save(_: Ledger) -> None:
            if journal is not None:
                with lock:
                    journal.save(*ledgers)

        forget = remapping.forget if remapping is not None else None
        ledgers += [Ledger(conninfo, "restore", on_change=save, on_remove=forget) for _ in shares]
        first = Restorer(main, ledgers[0], req, reporter, metas=metas, remapping=remapping)
        first.check_roles(metas)
        if not req.skipping and journal is not None:
            precheck(main, index, req, part, journal)
        workers = [first] + [
            Restorer(
                stack.enter_context(connect(conninfo, autocommit=True, doing="restore")),
                ledger, req, reporter, metas=metas, remapping=remapping,
            )
            for ledger in ledgers[1:]
        ]  # fmt: skip
        said = taken if remapping is None else taken_meanwhile
        crew = Crew(workers, "pgblobdump-restore-job", "restore", said, req.resume_hint)
        works = [functools.partial(crew.drive, w, items)
                 for w, items in zip(workers, shares, strict=True)]  # fmt: skip
        # what is left after a failure, if anything, kept for the next run's hint
        counts = crew.run(works, reporter, failing=lambda: save(ledgers[0]))
        redone = journal.redone(*ledgers) if journal is not None else 0
        if journal is not None:
            journal.remove()
    return counts.result(time.perf_counter() - t0, redone)
