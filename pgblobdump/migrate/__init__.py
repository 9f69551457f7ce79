"""Move LO columns to bytea and back, text columns of CLOB OIDs to their text, columns
of OIDs in integers or digits to oid: plan (what is there), run (online, verified,
resumable), abort (before the switch). The state of a run lives in the database.

The names below are loaded on first use, so that importing the package for the CLI's
choices and defaults (``DIRECTIONS``, ``MISSING``, in ``migrate.options``) loads no other
module of it, nor libpq: ``migrate --help`` stays light. No module is named as a function
the package offers (``plan`` lives in ``planning``, ``run`` in ``running``, ``abort`` in
``aborting``): an imported module would otherwise shadow its function here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgblobdump import lazy

if TYPE_CHECKING:
    from pgblobdump.migrate.aborting import abort
    from pgblobdump.migrate.inplace import run_in_place
    from pgblobdump.migrate.options import (
        DIRECTIONS,
        MISSING,
        LockPolicy,
        RunOptions,
        RunResult,
    )
    from pgblobdump.migrate.planning import ColumnPlan, Plan, plan
    from pgblobdump.migrate.running import run
    from pgblobdump.migrate.state import Migration, every

_HOME = {
    "DIRECTIONS": "options",
    "MISSING": "options",
    "ColumnPlan": "planning",
    "LockPolicy": "options",
    "Migration": "state",
    "Plan": "planning",
    "RunOptions": "options",
    "RunResult": "options",
    "abort": "aborting",
    "every": "state",
    "plan": "planning",
    "run": "running",
    "run_in_place": "inplace",
}
"""Each name the package offers and its module."""

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

__getattr__ = lazy.exports(__name__, _HOME)
