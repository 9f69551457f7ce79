"""The server's lock table, and how much of it one transaction of ours may take.

Every LO whose metadata a transaction changes (a comment, an owner, an unlink) holds a
lock until commit; the lock table holds ``max_locks_per_transaction`` x
(``max_connections`` + ``max_prepared_transactions``) locks for all sessions together, and
a transaction that needs more fails with "out of shared memory". So batches are sized from
the server's own settings rather than a constant.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg

from pgblobdump.pg.target import run_number

log = logging.getLogger(__name__)

_said: set[tuple[int, LockBudget]] = set()
"""Budgets already logged in this run (each connection reads its server's)."""

LOCK_SHARE = 4
"""A batch takes at most this fraction (1/4) of the server's lock table: other sessions
(and our own parallel workers) need the rest."""


@dataclass(frozen=True)
class LockBudget:
    """The server's lock table: ``max_locks_per_transaction`` x (``max_connections`` +
    ``max_prepared_transactions``) locks shared by every session."""

    max_locks_per_transaction: int
    max_connections: int
    max_prepared_transactions: int

    @classmethod
    def read(cls, conn: psycopg.Connection) -> LockBudget:
        row = conn.execute(
            "SELECT current_setting('max_locks_per_transaction')::int,"
            " current_setting('max_connections')::int,"
            " current_setting('max_prepared_transactions')::int"
        ).fetchone()
        assert row is not None
        budget = cls(int(row[0]), int(row[1]), int(row[2]))
        if (run_number(), budget) in _said:
            return budget
        _said.add((run_number(), budget))
        log.info(
            "lock budget: %d x (%d + %d) = %s locks in the server's table; our transactions"
            " take at most %s at once (a 1/%d share, split between our connections)",
            budget.max_locks_per_transaction, budget.max_connections,
            budget.max_prepared_transactions, f"{budget.total:,}",
            f"{budget.per_transaction:,}", LOCK_SHARE,
        )  # fmt: skip
        return budget

    @property
    def total(self) -> int:
        return self.max_locks_per_transaction * (
            self.max_connections + self.max_prepared_transactions
        )

    @property
    def per_transaction(self) -> int:
        """Locks one batch may take: a share of the table, leaving room for everyone else."""
        return max(64, self.total // LOCK_SHARE)
