"""Short exclusive moments: take ACCESS EXCLUSIVE on a table without queueing behind (and
blocking everyone behind) a long transaction, and time how long it was held.

A waiting ACCESS EXCLUSIVE request blocks every later reader of the table, so the request
gives up after ``lock_timeout`` and is retried after a pause, until ``wait`` seconds pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import psycopg
from psycopg import errors, sql

from pgblobdump.errors import DatabaseError
from pgblobdump.migrate.options import LockPolicy

T = TypeVar("T")


@dataclass
class LockClock:
    """The longest exclusive hold so far, in milliseconds."""

    longest_ms: int = 0

    def held(self, ms: int) -> None:
        self.longest_ms = max(self.longest_ms, ms)


def exclusively(
    conn: psycopg.Connection,
    table: sql.Composable,
    what: str,
    work: Callable[[], T],
    policy: LockPolicy,
    clock: LockClock,
) -> T:
    """Run ``work`` in one transaction holding ACCESS EXCLUSIVE on ``table``."""
    deadline = time.monotonic() + policy.wait_s
    pause = 0.05
    while True:
        try:
            with conn.transaction():
                conn.execute(
                    sql.SQL("SET LOCAL lock_timeout = {}").format(
                        sql.Literal(f"{policy.timeout_ms}ms")
                    )
                )
                conn.execute(sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(table))
                start = time.monotonic()
                result = work()
            clock.held(int((time.monotonic() - start) * 1000))
            return result
        except errors.LockNotAvailable:
            if time.monotonic() > deadline:
                raise DatabaseError(
                    f"{what}: could not lock the table within {policy.wait_s:.0f} s (other"
                    " transactions hold it); run again when they are done, or raise --lock-wait"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
