"""The jobs of a copy or sync: N threads, each reading from its own source connection
(under one exported snapshot) into restore's writer (a Restorer) on its own target
connection, every batch entered in the target's state (sync/state.py) in its own
transaction; the first failure stops them all and the ledgers' clean-up removes exactly
what each made."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import psycopg

from pgblobdump.errors import PgBlobDumpError
from pgblobdump.packed.reader import Item
from pgblobdump.packed.request import RestoreRequest
from pgblobdump.packed.restore import STOP_WAIT, Restorer
from pgblobdump.pg.connect import connect
from pgblobdump.pg.failure import failed_all
from pgblobdump.pg.ledger import Ledger
from pgblobdump.report.reporter import Reporter
from pgblobdump.sync import source, state


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


class _TargetFailed(Exception):
    """A target's psycopg error carried past the source connection's translation."""

    def __init__(self, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.error = error


def _on_target(fn: Callable[..., None], *args: object) -> None:
    try:
        fn(*args)
    except psycopg.Error as e:
        raise _TargetFailed(e) from e


Feed = Callable[[psycopg.Connection], Iterator[Item]]
"""What one job copies: given its source connection (the snapshot imported), the items."""


def run_jobs(
    src: str,
    dst: str,
    snapshot: str,
    feeds: list[Feed],
    req: RestoreRequest,
    reporter: Reporter,
    stack: contextlib.ExitStack,
    what: str = "copy",
) -> list[Restorer]:
    """One thread per feed: its source connection (the snapshot imported) read into its
    own Restorer on its own target connection. The first failure (or Ctrl-C, SIGTERM)
    stops them all and the clean-up removes exactly what each made. ``what`` names the
    run in messages (``copy``, ``sync``)."""
    stop = threading.Event()
    errors: list[BaseException] = []
    lock = threading.Lock()
    workers: list[Restorer] = []
    for _ in feeds:
        conn = stack.enter_context(connect(dst, doing=f"{what}: on the target"))
        w = Restorer(conn, Ledger(dst, what), req, reporter)
        w.all_checked = True  # roles were checked for the whole selection
        w.writer.ledger.on_change = _recorder(conn)
        workers.append(w)
    readers: list[psycopg.Connection] = []

    def work(w: Restorer, feed: Feed) -> None:
        try:
            # psycopg errors escaping this block are the source's (named so); the
            # target's pass through it wrapped, to be told as restore tells them
            with connect(src, doing=f"{what}: reading the source") as conn:
                with lock:
                    readers.append(conn)
                source.begin(conn, snapshot)
                for item in feed(conn):
                    if stop.is_set():
                        return
                    _on_target(w.take, item)
                if not stop.is_set():
                    _on_target(w.finish)
                conn.execute("COMMIT")
        except BaseException as e:  # the first one is the copy's error
            with lock:
                errors.append(e.error if isinstance(e, _TargetFailed) else e)
            stop.set()

    threads = [
        threading.Thread(target=work, args=(w, f), name=f"pgblobdump-{what}", daemon=True)
        for w, f in zip(workers, feeds, strict=True)
    ]

    def stop_all() -> list[bool]:
        stop.set()
        for c in list(readers):
            with contextlib.suppress(Exception):
                c.cancel_safe(timeout=5)
        for w in workers:
            w.stop()
        deadline = time.monotonic() + STOP_WAIT
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [w.stop() and not t.is_alive() for w, t in zip(workers, threads, strict=True)]

    def done() -> tuple[int, int]:
        return sum(w.los + w.skipped for w in workers), sum(w.bytes for w in workers)

    try:
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads) and not errors:
            stop.wait(0.1)
            reporter.progress(*done())
        if errors:
            raise errors[0]
    except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt) as e:
        runs = [(w.writer.ledger, w.conn) for w in workers]
        raise failed_all(e, what, runs, taken, if_left=f"; run the {what} again to finish it",
                         stop=stop_all) from e  # fmt: skip
    reporter.progress(*done())
    return workers
