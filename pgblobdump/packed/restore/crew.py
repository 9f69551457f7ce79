"""The one runner of N Restorers at once, one thread each: ``restore --jobs N`` and
``copy``/``sync``. It owns the threads, the stop flag, the first failure (or Ctrl-C,
SIGTERM in the main thread) that stops them all, the clean-up through
pg/failure.failed_all (every connection's batch cancelled, then exactly what each one
made removed, or named) and the workers' counts summed. Its caller gives what differs:
the Restorers (their connections, ledgers and settings) and each one's work, which
hands items to ``drive`` (restore: a share of the archive; copy and sync: what a source
connection reads under one snapshot)."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Protocol

import psycopg

from pgblobdump.errors import PgBlobDumpError
from pgblobdump.packed.read.items import Item
from pgblobdump.packed.restore.restorer import STOP_WAIT, Counts, Tally
from pgblobdump.pg.failure import failed_all
from pgblobdump.pg.ledger import Ledger
from pgblobdump.report.reporter import Reporter


class Writes(Protocol):
    """Where a worker's batches are entered."""

    @property
    def ledger(self) -> Ledger: ...


class Worker(Tally, Protocol):
    """What the runner asks of a worker (a Restorer): its target connection and ledger,
    its items taken, its last batch written, its batch in flight stopped."""

    @property
    def conn(self) -> psycopg.Connection: ...

    @property
    def writer(self) -> Writes: ...

    def take(self, item: Item) -> None: ...

    def finish(self) -> None: ...

    def stop(self) -> bool: ...


class _TargetFailed(Exception):
    """A worker's (the target's) psycopg error, carried past a work's own translation of
    psycopg errors (copy's source connection names its errors so)."""

    def __init__(self, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.error = error


def _on_target(fn: Callable[..., None], *args: object) -> None:
    try:
        fn(*args)
    except psycopg.Error as e:
        raise _TargetFailed(e) from e


class Crew:
    """The threads of one run over ``workers``: ``name`` names the threads, ``what`` the
    run in messages (``restore``, ``copy``, ``sync``); ``taken`` words the error of an
    OID the target holds already, ``if_left`` what to do about what a failed clean-up
    leaves."""

    def __init__(
        self,
        workers: Sequence[Worker],
        name: str,
        what: str,
        taken: Callable[[str], str],
        if_left: str,
    ) -> None:
        self.workers = list(workers)
        self.name = name
        self.what = what
        self.taken = taken
        self.if_left = if_left
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.readers: list[psycopg.Connection] = []
        """Other connections a thread reads from (copy's source), cancelled on a stop."""

    def drive(self, worker: Worker, items: Iterable[Item]) -> bool:
        """From a work's thread: ``items`` taken by ``worker`` until they run out or the
        run stops, then its last batch written (unless stopped). False when the run
        stopped before the items ran out. The worker's psycopg errors leave wrapped, so
        that a work's own connection (copy's source) does not take them for its own.
        A generator of items is closed on leaving, whatever ends it: one reading a
        connection (copy's source) ends its COPY before the work closes that connection
        (kept alive by a failure's traceback, a generator left mid-COPY hung a sync cut
        short, tests/sync/test_large.py)."""
        try:
            for item in items:
                if self.stop.is_set():
                    return False
                _on_target(worker.take, item)
            if not self.stop.is_set():
                _on_target(worker.finish)
            return True
        finally:
            if isinstance(items, Generator):
                items.close()

    def run(
        self,
        works: Sequence[Callable[[], object]],
        reporter: Reporter,
        failing: Callable[[], None] | None = None,
    ) -> Counts:
        """One thread per work, progress reported every 0.1 s until all end; returns the
        workers' counts summed. The first failure (or Ctrl-C, SIGTERM) stops every
        connection and the clean-up removes exactly what each made, or names what is
        left, in the error raised; ``failing`` runs after the clean-up (restore's journal
        keeps what is left)."""
        try:
            self._run(works, reporter)
        except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt) as e:
            runs = [(w.writer.ledger, w.conn) for w in self.workers]
            error = failed_all(e, self.what, runs, self.taken, if_left=self.if_left,
                               stop=self.stop_all)  # fmt: skip
            if failing is not None:
                failing()
            raise error from e
        return Counts.of(self.workers)

    def _run(self, works: Sequence[Callable[[], object]], reporter: Reporter) -> None:
        """The threads started and watched; the first error raised here."""
        self.threads = [
            threading.Thread(target=functools.partial(self._thread, work), name=self.name,
                             daemon=True)
            for work in works
        ]  # fmt: skip
        for t in self.threads:
            t.start()
        while any(t.is_alive() for t in self.threads) and not self.errors:
            self.stop.wait(0.1)
            reporter.progress(*self.done())
        if self.errors:
            raise self.errors[0]
        reporter.progress(*self.done())

    def _thread(self, work: Callable[[], object]) -> None:
        """One work; its error (the first one is the run's) stops every thread."""
        try:
            work()
        except BaseException as e:
            with self.lock:
                self.errors.append(e.error if isinstance(e, _TargetFailed) else e)
            self.stop.set()

    def done(self) -> tuple[int, int]:
        """LOs (made or skipped) and bytes so far, over every worker."""
        ws = self.workers
        return sum(w.los + w.skipped for w in ws), sum(w.bytes for w in ws)

    def stop_all(self) -> list[bool]:
        """Every connection's batch cancelled and its thread ended (True), or still
        running after STOP_WAIT (False: its connection is left alone)."""
        self.stop.set()
        for c in list(self.readers):
            with contextlib.suppress(Exception):
                c.cancel_safe(timeout=5)
        for w in self.workers:
            w.stop()
        deadline = time.monotonic() + STOP_WAIT
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return [
            w.stop() and not t.is_alive() for w, t in zip(self.workers, self.threads, strict=True)
        ]
