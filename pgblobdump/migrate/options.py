"""What a ``migrate run`` is asked to do (its options, its lock policy), and what it
reports. No psycopg here: the CLI's choices and defaults come from this module."""

from __future__ import annotations

from dataclasses import dataclass, field

from pgblobdump.errors import UsageError


@dataclass(frozen=True)
class LockPolicy:
    """How a run takes its short exclusive locks (migrate/locking.py)."""

    timeout_ms: int = 500
    """Give up one attempt after this long waiting for the lock."""
    wait_s: float = 120.0
    """Give up altogether after this long."""


MISSING = ("error", "null", "skip")
DIRECTIONS = ("bytea", "lo", "text", "oid")
"""``bytea``: LO references become the bytes; ``lo``: bytea values become new LOs (or a
column of object keys, new LOs of the objects); ``text``: a text column's LO references
become the LOs' text (inline values stay); ``oid``: a column of references (integers,
digits) is retyped oid, no bytes move. ``--to s3://bucket/prefix`` is the fifth way."""
STATE_DIRECTIONS = (*DIRECTIONS, "s3", "s3lo")
"""As a run's state records them: ``s3``: LO references become object keys (the LOs
written as objects first); ``s3lo``: a column of object keys becomes new LOs of them."""


@dataclass(frozen=True)
class RunOptions:
    """What a run is asked to do; options that do not go together are refused on
    construction (UsageError), so a library caller meets the CLI's refusals."""

    to: str = "bytea"
    missing: str = "error"
    """Values that name no LO (dangling OIDs; in a text or integer column, values not in
    a reference's form too): ``error`` refuses, ``null`` gives those rows NULL, ``skip``
    gives them NULL and keeps the old column (their values). Not for ``--to text``, which
    keeps such values: they are the column's inline text."""
    unlink: bool = False
    keep_old: bool = False
    batch_rows: int | None = None
    schema: str = "pgblobdump"
    storage: str | None = None
    compression: str | None = None
    lock: LockPolicy = field(default_factory=LockPolicy)
    allow_acl_widening: bool = False
    """To bytea: copy LOs into the column even where a reader of the column (or of a view
    or SECURITY DEFINER function over it) may not read the LO; each such LO's bytes become
    readable by all of them. To lo: make LOs of a table with row-level security (each
    reader of the column may then read every row's LO, not only its rows')."""
    owner: str | None = None
    """Backward: the owner of the new LOs (default: the table's owner)."""
    store: str | None = None
    """``--to s3://bucket/prefix`` (``to`` is then ``s3``), or ``--from s3://...`` with
    ``--to lo`` of a text column of keys (``to`` is then ``s3lo``)."""
    url: bool = False
    """``--to s3://``: the column holds ``s3://bucket/key`` rather than the key."""

    def __post_init__(self) -> None:
        """UsageError for options that do not go together (before any server is asked)."""
        if self.to not in STATE_DIRECTIONS:
            raise UsageError(f"--to must be one of {', '.join(DIRECTIONS)}, or s3://bucket/prefix")
        if self.to in ("s3", "s3lo") and not (self.store or "").startswith("s3://"):
            raise UsageError("object storage is named s3://bucket/prefix")
        if self.store is not None:
            from pgblobdump.migrate.objects.target import Target

            # one spelling in the run's state: s3://bucket/prefix, no trailing slash
            object.__setattr__(self, "store", Target.parse(self.store).where)
        if self.store is not None and self.to not in ("s3", "s3lo", "lo"):
            raise UsageError("--from s3://bucket/prefix goes with --to lo")
        if self.url and self.to not in ("s3", "s3lo"):
            raise UsageError("--url goes with --to s3://bucket/prefix")
        if self.to == "s3" and (self.storage or self.compression or self.missing == "skip"):
            raise UsageError(
                "--storage, --compression and --missing skip are for a column of bytes:"
                " --to s3:// makes a text column of keys"
            )
        if self.owner is not None and self.to not in ("lo", "s3lo"):
            raise UsageError("--owner goes with --to lo (it names the new LOs' owner)")
        if self.missing not in MISSING:
            raise UsageError(f"--missing must be one of {', '.join(MISSING)}")
        if self.to == "text" and self.missing != "error":
            raise UsageError(
                "--missing does not go with --to text: a value that names no LO is the"
                " column's own text there, and stays as it is"
            )
        if self.to == "oid" and self.unlink:
            raise UsageError(
                "--unlink with --to oid: the retyped column still references those LOs"
            )
        if self.to == "oid" and (self.storage or self.compression):
            raise UsageError(
                "--storage and --compression are for a column of bytes or text: --to oid"
                " makes an oid column"
            )
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
