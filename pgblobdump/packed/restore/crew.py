"""N Restorers at once, one thread each: what ``restore --jobs N`` and ``copy``/``sync``
share. Each thread runs its own work on its own Restorer; the first failure (or Ctrl-C,
SIGTERM in the main thread) stops them all; ``stop_all`` then cancels every connection's
batch and says which threads ended, so the caller's clean-up (pg/failure.failed_all)
knows which connections it may use."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence

import psycopg

from pgblobdump.packed.restore.restorer import STOP_WAIT, Restorer
from pgblobdump.report.reporter import Reporter


class Crew:
    """The threads of one run over ``workers``; ``name`` names the threads."""

    def __init__(self, workers: Sequence[Restorer], name: str) -> None:
        self.workers = list(workers)
        self.name = name
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.readers: list[psycopg.Connection] = []
        """Other connections a thread reads from (copy's source), cancelled on a stop."""

    def failed(self, e: BaseException) -> None:
        """From a thread: its error (the first one is the run's), and every thread stops."""
        with self.lock:
            self.errors.append(e)
        self.stop.set()

    def run(self, works: Sequence[Callable[[], None]], reporter: Reporter) -> None:
        """One thread per work (each catches its own errors into ``failed``), progress
        reported every 0.1 s until all end; the first error raised here."""
        self.threads = [
            threading.Thread(target=work, name=self.name, daemon=True) for work in works
        ]
        for t in self.threads:
            t.start()
        while any(t.is_alive() for t in self.threads) and not self.errors:
            self.stop.wait(0.1)
            reporter.progress(*self.done())
        if self.errors:
            raise self.errors[0]
        reporter.progress(*self.done())

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
