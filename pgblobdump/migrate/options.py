"""What a ``migrate run`` is asked to do, and what it reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from pgblobdump.errors import UsageError
from pgblobdump.migrate.locking import LockPolicy

MISSING = ("error", "null", "skip")


@dataclass(frozen=True)
class RunOptions:
    to: str = "bytea"
    missing: str = "error"
    """Dangling OIDs: ``error`` refuses, ``null`` gives those rows NULL, ``skip`` gives them
    NULL and keeps the old column (their OIDs) as ``<column>_lo``."""
    unlink: bool = False
    keep_old: bool = False
    batch_rows: int | None = None
    schema: str = "pgblobdump"
    storage: str | None = None
    compression: str | None = None
    lock: LockPolicy = field(default_factory=LockPolicy)

    def check(self) -> None:
        """UsageError for options that do not go together."""
        if self.missing not in MISSING:
            raise UsageError(f"--missing must be one of {', '.join(MISSING)}")
        if self.unlink and self.keep_old:
            raise UsageError(
                "--unlink with --keep-old: the kept column still names those LOs; drop it"
                " first, then unlink the orphans (vacuumlo)"
            )


@dataclass
class RunResult:
    run_id: int
    column: str
    direction: str
    phase: str
    resumed: bool
    rows: int
    recopied: int
    unlinked: int
    kept_referenced: int
    lock_ms: int
    seconds: float
    storage: str | None
    compression: str | None
    notes: list[str]
