"""The jobs of a copy or sync: N threads, each reading from its own source connection
(under one exported snapshot) into restore's writer (a Restorer) on its own target
connection, every batch entered in the target's state (sync/state.py) in its own
transaction (or, for copy --remap, each batch's mapping: remap/translate.py); the first
failure stops them all and the ledgers' clean-up removes exactly what each made."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import psycopg

from pgblobdump.packed.read.items import Item
from pgblobdump.packed.restore.crew import Crew
from pgblobdump.packed.restore.hooks import RemapHooks, Replacing, taken_meanwhile
from pgblobdump.packed.restore.request import RestoreRequest
from pgblobdump.packed.restore.restorer import Counts, Restorer
from pgblobdump.pg.connect import connect
from pgblobdump.pg.ledger import Ledger
from pgblobdump.pg.snapshot import SideConnection, begin
from pgblobdump.report.reporter import Reporter
from pgblobdump.sync import state


def taken(oid: str) -> str:
    return (
        f"LO {oid} already exists in the target and no copy made it; copy with"
        " --on-conflict skip to keep it, or into another database"
    )


def _recorder(conn: psycopg.Connection) -> Callable[[Ledger], None]:
    """The ledger's hook, inside each batch's transaction: its OID ranges enter the
    target's state in the same transaction."""

    def record(ledger: Ledger) -> None:
        p = ledger.pending
        if p is not None and p.xid is not None:
            state.record(conn, p.los, p.xid)

    return record


Feed = Callable[..., Iterator[Item]]
"""What one job copies: given its source connection (the snapshot imported) and, as
``side``, a second one opened in the same snapshot when first asked for, the items."""


def run_jobs(
    src: str,
    dst: str,
    snapshot: str,
    feeds: list[Feed],
    req: RestoreRequest,
    reporter: Reporter,
    stack: contextlib.ExitStack,
    what: str = "copy",
    replacing: Replacing | None = None,
    remapping: RemapHooks | None = None,
) -> Counts:
    """One thread per feed: its source connection (the snapshot imported) read into its
    own Restorer on its own target connection; returns what they made, summed. The
    first failure (or Ctrl-C, SIGTERM) stops them all and the clean-up removes exactly
    what each made. ``what`` names the run in messages (``copy``, ``sync``);
    ``replacing``: the LOs written in place of the target's copies (sync's rewrites,
    ``req`` skipping); ``remapping``: the items come at new OIDs (copy --remap), each
    batch's mapping recorded in its transaction and removed with its LOs by a clean-up,
    and nothing entered in the target's sync state (a remapped copy cannot be synced)."""
    workers: list[Restorer] = []
    for _ in feeds:
        conn = stack.enter_context(connect(dst, doing=f"{what}: on the target"))
        # a clean-up's removals are ours: no longer expected in the target's state
        if remapping is None:
            ledger = Ledger(dst, what, on_change=_recorder(conn), on_remove=state.uncover)
        else:
            ledger = Ledger(dst, what, on_remove=remapping.forget)
        # roles were checked for the whole selection
        workers.append(Restorer(conn, ledger, req, reporter, roles_checked=True,
                                replacing=replacing, remapping=remapping))  # fmt: skip
    said = taken if remapping is None else taken_meanwhile
    crew = Crew(workers, f"pgblobdump-{what}", what, said, f"; run the {what} again to finish it")

    def work(w: Restorer, feed: Feed) -> None:
        # psycopg errors escaping this block are the source's (named so); the target's
        # pass through it wrapped (Crew.drive), to be told as restore tells them
        with (
            contextlib.ExitStack() as stack_side,
            connect(src, doing=f"{what}: reading the source") as conn,
        ):
            with crew.lock:
                crew.readers.append(conn)
            begin(conn, snapshot)
            side = stack_side.enter_context(
                SideConnection(src, snapshot, f"{what}: reading the source", crew.readers)
            )
            if crew.drive(w, feed(conn, side=side)):
                conn.execute("COMMIT")

    works = [functools.partial(work, w, f) for w, f in zip(workers, feeds, strict=True)]
    return crew.run(works, reporter)
