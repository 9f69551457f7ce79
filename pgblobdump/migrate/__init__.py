"""Move LO columns to bytea and back, text columns of CLOB OIDs to their text, columns
of OIDs in integers or digits to oid: plan (what is there), run (online, verified,
resumable), abort (before the switch). The state of a run lives in the database."""

from pgblobdump.migrate.abort import abort
from pgblobdump.migrate.inplace import run_in_place
from pgblobdump.migrate.locking import LockPolicy
from pgblobdump.migrate.options import DIRECTIONS, MISSING, RunOptions, RunResult
from pgblobdump.migrate.plan import ColumnPlan, Plan, plan
from pgblobdump.migrate.run import run
from pgblobdump.migrate.state import Migration, every

__all__ = [
    "DIRECTIONS",
    "MISSING",
    "ColumnPlan",
    "LockPolicy",
    "Migration",
    "Plan",
    "RunOptions",
    "RunResult",
    "abort",
    "every",
    "plan",
    "run",
    "run_in_place",
]
