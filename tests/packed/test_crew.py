"""The runner of N Restorers (``restore --jobs N``, copy, sync) with no server: fake
workers that count what they take, so the threads, the first failure, the stop of the
others, the clean-up's words and the counts summed are checked exactly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import psycopg
import pytest

from pgblobdump.errors import DatabaseError, Interrupted
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.read.items import Item, WholeLos
from pgblobdump.packed.restore.crew import Crew, Worker
from pgblobdump.packed.restore.restorer import Counts, taken
from pgblobdump.pg.connect import sql_errors
from pgblobdump.pg.ledger import CleanupFailed, Ledger
from pgblobdump.report.reporter import QUIET

DB = "dbname=target host=db.invalid port=5433"
HINT = "; run the restore again with --resume to finish it: pgblobdump restore a.pbd --resume"


class _Closed:
    """A connection already closed: the clean-up leaves it alone."""

    closed = True


class _Left(Ledger):
    """A ledger whose clean-up could not finish (the server went away meanwhile)."""

    def undo(self, conn: psycopg.Connection | None) -> str:
        raise CleanupFailed("clean-up failed (server gone); left LOs 5..9 in the target")


class _Writer:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger


class Fake:
    """What the runner sees of a Restorer: each LO taken is counted (its bytes too);
    ``fail``: the error raised on taking the LO of OID ``fail_at``."""

    def __init__(self, ledger: Ledger | None = None, fail_at: int = -1,
                 fail: BaseException | None = None, skipped: int = 0,
                 damaged_oids: tuple[int, ...] = ()) -> None:  # fmt: skip
        self.conn = _Closed()
        self.writer = _Writer(ledger or Ledger(DB, "restore"))
        self.los = self.bytes = 0
        self.skipped = skipped
        self.damaged = len(damaged_oids)
        self.damaged_oids = list(damaged_oids)
        self.fail_at, self.fail = fail_at, fail
        self.finished = self.stopped = False

    def take(self, item: Item) -> None:
        assert isinstance(item, WholeLos)
        if self.fail is not None and self.fail_at in item.oids:
            raise self.fail
        self.los += len(item.oids)
        self.bytes += sum(map(len, item.datas))

    def finish(self) -> None:
        self.finished = True

    def stop(self) -> bool:
        self.stopped = True
        return True


def _lo(oid: int, size: int) -> WholeLos:
    return WholeLos([oid], [Meta(None, None, None)], [b"x" * size], [0])


def _until_stopped(crew: Crew) -> Iterator[Item]:
    """Items for ever, one at a time, until the run stops (then none)."""
    oid = 1_000
    while not crew.stop.wait(0.01):
        oid += 1
        yield _lo(oid, 1)


def _crew(*workers: Fake, if_left: str = HINT) -> Crew:
    return Crew(cast(list[Worker], list(workers)), "test-crew", "restore", taken, if_left)


def _drives(crew: Crew, feeds: list[Any]) -> list[Any]:
    return [lambda w=w, f=f: crew.drive(w, f) for w, f in zip(crew.workers, feeds, strict=True)]


def test_every_worker_finishes_and_the_counts_are_summed() -> None:
    a, b = Fake(skipped=2, damaged_oids=(70, 9)), Fake(damaged_oids=(8,))
    crew = _crew(a, b)
    counts = crew.run(_drives(crew, [[_lo(1, 10), _lo(2, 0)], [_lo(3, 5)]]), QUIET)
    assert counts == Counts(los=3, bytes=15, skipped=2, damaged=3, damaged_oids=(8, 9, 70))
    assert counts.result(1.5, redone=1).damaged_ranges == "8..9, 70"
    assert a.finished and b.finished and not (a.stopped or b.stopped)


def test_the_first_failure_stops_the_others_and_is_the_runs_error() -> None:
    saved: list[str] = []
    a = Fake(fail_at=2, fail=DatabaseError("restore failed: disk full"))
    b = Fake()
    crew = _crew(a, b)
    with pytest.raises(DatabaseError) as raised:
        crew.run(_drives(crew, [[_lo(1, 4), _lo(2, 4), _lo(3, 4)], _until_stopped(crew)]),
                 QUIET, failing=lambda: saved.append("journal"))  # fmt: skip
    assert str(raised.value) == "restore failed: disk full"  # nothing was left to name
    assert saved == ["journal"]  # after the clean-up
    assert (a.los, a.finished, b.finished) == (1, False, False)
    assert a.stopped and b.stopped
    assert not any(t.is_alive() for t in crew.threads)


def test_a_later_failure_is_not_the_runs() -> None:
    crew = _crew(Fake(fail_at=1, fail=DatabaseError("first")), Fake())

    def second() -> Iterator[Item]:
        crew.stop.wait(10)
        raise DatabaseError("second")
        yield  # a generator

    with pytest.raises(DatabaseError, match=r"^first$"):
        crew.run(_drives(crew, [[_lo(1, 1)], second()]), QUIET)
    assert [str(e) for e in crew.errors] == ["first", "second"]


def test_what_a_failed_clean_up_leaves_is_named_with_the_hint() -> None:
    left = _Left(DB, "restore")
    crew = _crew(Fake(left, fail_at=1, fail=DatabaseError("restore failed: out of memory")))
    with pytest.raises(DatabaseError) as raised:
        crew.run(_drives(crew, [[_lo(1, 1)]]), QUIET)
    assert str(raised.value) == (
        "restore failed: out of memory; clean-up failed (server gone); left LOs 5..9 in the"
        " target" + HINT
    )


def test_a_targets_error_is_told_as_the_runs_through_a_sources_translation() -> None:
    """copy reads its items under its source connection, which names psycopg errors as
    the source's: the target's error goes past it, told as restore tells it."""
    crew = _crew(Fake(fail_at=1, fail=psycopg.errors.DiskFull("could not extend file")))

    def work() -> None:
        with sql_errors("copy: reading the source"):
            crew.drive(cast(Worker, crew.workers[0]), [_lo(1, 1)])

    with pytest.raises(DatabaseError) as raised:
        crew.run([work], QUIET)
    assert str(raised.value) == "restore failed: could not extend file"


def test_an_interrupt_in_a_thread_is_the_runs_interrupt() -> None:
    crew = _crew(Fake(fail_at=1, fail=KeyboardInterrupt()), Fake())
    with pytest.raises(Interrupted) as raised:
        crew.run(_drives(crew, [[_lo(1, 1)], _until_stopped(crew)]), QUIET)
    assert str(raised.value) == "restore interrupted by SIGINT"


def test_the_items_are_closed_whatever_ends_them() -> None:
    """A generator reading a connection (copy's source) must end its read before the
    connection closes, not when the failure that holds it is dropped."""
    closed: list[str] = []
    crew = _crew(Fake(fail_at=2, fail=DatabaseError("boom")), Fake())

    def failing() -> Iterator[Item]:
        try:
            yield from (_lo(1, 1), _lo(2, 1), _lo(3, 1))
        finally:
            closed.append("failed")

    def stopped() -> Iterator[Item]:
        try:
            yield from _until_stopped(crew)
            yield _lo(9, 1)  # never taken: the run stopped
        finally:
            closed.append("stopped")

    with pytest.raises(DatabaseError, match="boom"):
        crew.run(_drives(crew, [failing(), stopped()]), QUIET)
    assert sorted(closed) == ["failed", "stopped"]
    assert crew.errors  # the failure is still held


def test_a_stop_before_the_items_run_out_says_so() -> None:
    crew = _crew(Fake())
    crew.stop.set()
    assert crew.drive(cast(Worker, crew.workers[0]), [_lo(1, 1)]) is False
    assert crew.drive(cast(Worker, crew.workers[0]), []) is True
    assert not cast(Fake, crew.workers[0]).finished  # stopped: no last batch
