"""What a restore is asked to do and what it reports: the request checks its own
combinations when it is made, so a library caller meets the same refusals as the CLI."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pgblobdump.errors import UsageError
from pgblobdump.units import plural

PARTS_MAX = 1024
"""The most restores ``--part K/N`` shares an archive among."""
PART_RULE = "must be K/N with 1 <= K <= N (2/3: the second third)"


def parse_part(text: str) -> tuple[int, int]:
    """``K/N`` -> (K, N), 1 <= K <= N."""
    k, sep, n = text.partition("/")
    if not sep or not k.isdigit() or not n.isdigit():
        raise UsageError(f"--part {text!r} {PART_RULE}")
    return check_part((int(k), int(n)), text)


def check_part(part: tuple[int, int], text: str | None = None) -> tuple[int, int]:
    """``part`` (K, N) itself if 1 <= K <= N <= PARTS_MAX, else the UsageError naming it
    as the user wrote it (``text``, or ``K/N``)."""
    k, n = part
    if not 1 <= k <= n <= PARTS_MAX:
        raise UsageError(f"--part {text or f'{k}/{n}'!r} {PART_RULE}")
    return part


class OnConflict(enum.StrEnum):
    ERROR = "error"
    SKIP = "skip"


@dataclass(frozen=True)
class RestoreRequest:
    """What to restore and how; options that do not go together are refused here (a
    UsageError on construction), so a library caller meets the CLI's refusals.

    ``full``: a --full archive (pg_restore's sections around the LOs). ``jobs``:
    connections restoring the LOs at once, each a contiguous OID range of the archive
    (of the ``part``); with --full also pg_restore's jobs. ``part``: (K, N),
    share K of N of the archive's LOs (``packed.parts``), N restores at once into one
    database.
    """

    no_owner: bool = False
    no_acl: bool = False
    no_comments: bool = False
    on_conflict: OnConflict = OnConflict.ERROR
    resume: bool = False
    skip_damaged: bool = False
    full: bool = False
    part: tuple[int, int] | None = None
    jobs: int = 1
    bases: tuple[str, ...] = ()
    """Where to look first for an incremental archive's bases (``--base``)."""
    resume_command: str = ""
    """The command that finishes this restore once interrupted (the CLI's, with
    --resume), named in the messages that say to run it; empty: none is named."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_conflict", OnConflict(self.on_conflict))
        object.__setattr__(self, "bases", tuple(self.bases))
        if not 1 <= self.jobs <= 64:
            raise UsageError(f"--jobs must be between 1 and 64 (got {self.jobs})")
        if self.part is None:
            return
        if self.full:
            raise UsageError("--part restores a share of the LOs alone; --full restores everything")
        check_part(self.part)
        if self.skip_damaged:
            raise UsageError("--part and --skip-damaged do not go together")

    @property
    def sharing(self) -> int:
        """Connections restoring LOs at once into the database (``--part K/N``: N, each
        with its ``--jobs``). Each batch takes 1/sharing of one restore's share of the
        lock table, so all of them together take no more of it than one restore does,
        and none runs out of shared memory."""
        return (1 if self.part is None else self.part[1]) * self.jobs

    @property
    def skipping(self) -> bool:
        return self.resume or self.on_conflict is OnConflict.SKIP

    @property
    def resume_hint(self) -> str:
        """What a message adds when an interrupted run left LOs: run it again with
        --resume (``resume_command``, when known)."""
        return "; run the restore again with --resume to finish it" + (
            f": {self.resume_command}" if self.resume_command else ""
        )


@dataclass(frozen=True)
class RestoreResult:
    """``skipped``: LOs that existed (--on-conflict skip, --resume); ``damaged``: LOs lost
    to a damaged archive and skipped (--skip-damaged), their OIDs, ascending, in
    ``damaged_oids`` (a list in JSON; ``damaged_ranges`` for people and CSV)."""

    los: int
    bytes: int
    skipped: int
    seconds: float
    damaged: int = 0
    damaged_oids: tuple[int, ...] = ()
    redone: int = 0
    """--resume: LOs the interrupted run was writing when it stopped (its journal names
    them, the target had them not: their batch never committed), restored by this run
    and counted in ``los``."""

    @property
    def damaged_ranges(self) -> str:
        """``damaged_oids`` as ranges: ``1..5, 9`` (empty when none)."""
        from pgblobdump.pg.ledger import ranges_text

        return ranges_text(self.damaged_oids)

    def resumed(self) -> str:
        """What a --resume found and did, for a note: the numbers reconcile with the
        interrupted run's ``left N LOs``."""
        said = f"resumed: kept the {plural(self.skipped, 'LO')} there already"
        if self.redone:
            said += (f"; restored the other {plural(self.redone, 'LO')} the interrupted run"
                     " was writing when it stopped (their batch never committed)")  # fmt: skip
        more = self.los - self.redone
        return said + (f", and {plural(more, 'LO')} it had not begun" if more else "")
