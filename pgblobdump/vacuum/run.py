"""``vacuum``: the request, the result, and the run from references to removed LOs."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from pgblobdump.errors import UsageError
from pgblobdump.pg import catalog
from pgblobdump.pg.connect import connect, describe
from pgblobdump.pg.locks import LockBudget
from pgblobdump.pg.trust import check_state_schema
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.vacuum import age
from pgblobdump.vacuum.batches import remove
from pgblobdump.vacuum.orphans import collect_refs, iter_candidates, select_candidates
from pgblobdump.vacuum.refs import discover

DEFAULT_MIN_AGE = 3600.0


@dataclass(frozen=True)
class VacuumRequest:
    """What to remove and how. ``references``: ``([schema.]table, column)`` pairs whose
    values hold OIDs in a type discovery does not read (text, jsonb, a composite)."""

    min_age: float = DEFAULT_MIN_AGE
    dry_run: bool = False
    references: tuple[tuple[str, str], ...] = ()
    archive_to: str | None = None
    state_schema: str = "pgblobdump"
    batch_size: int | None = None
    """LOs per transaction; default: the lock budget's share (pg/locks.py) over ``jobs``."""
    jobs: int = 2
    """Connections unlinking at once (the server's lo_unlink is the floor: use them)."""

    def __post_init__(self) -> None:
        if self.min_age < 0:
            raise UsageError(f"--min-age must not be negative (got {self.min_age:g} s)")
        if self.batch_size is not None and self.batch_size < 1:
            raise UsageError(f"--batch-size must be at least 1 (got {self.batch_size})")
        if not 1 <= self.jobs <= 16:
            raise UsageError(f"--jobs must be between 1 and 16 (got {self.jobs})")
        if self.dry_run and self.archive_to:
            raise UsageError("--dry-run removes nothing: it takes no --archive-to")
        if not self.state_schema:
            raise UsageError("--state-schema must not be empty")


@dataclass(frozen=True)
class VacuumResult:
    """What a run found and did. ``removed`` LOs are gone; every other orphan is counted
    in exactly one of ``young``, ``not_owned``, ``not_archived``, ``referenced_meanwhile``
    or ``skipped``."""

    database: str
    los: int
    orphans: int
    removable: int
    removed: int
    young: int
    not_owned: int
    not_owned_sample: tuple[int, ...]
    referenced_meanwhile: int
    skipped: int
    not_archived: int
    archived: int | None
    columns: int
    batches: int
    batch_size: int
    seconds: float
    dry_run: bool
    age: str
    notes: tuple[str, ...] = field(default_factory=tuple)


def vacuum(
    conninfo: str,
    req: VacuumRequest,
    reporter: Reporter = QUIET,
    listing: Callable[[Iterator[int]], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> VacuumResult:
    """Remove the orphans (or, with ``dry_run``, hand ``listing`` the OIDs it would
    remove). UnsafeToRemove, before anything is removed, when a reference is hidden."""
    t0 = time.perf_counter()
    notes: list[str] = []
    if req.archive_to:
        from pgblobdump.vacuum.archive import check_place

        check_place(req.archive_to)
    with connect(conninfo, autocommit=True, doing="vacuum") as conn:
        refs = discover(conn, req.references)
        refs.refuse_unsafe(locking=not req.dry_run)
        for n in refs.notes():
            notes.append(n)
            reporter.note(n)
        # horizon samples are read from it and --archive-to's OIDs written to it
        check_state_schema(conn, req.state_schema, "vacuum")
        rule = age.read(conn, req.min_age, req.state_schema)
        if not req.dry_run and req.min_age > 0:
            why = age.record(conn, req.state_schema, req.min_age)
            if why:
                notes.append(why)
        row = conn.execute("SELECT count(*) FROM pg_catalog.pg_largeobject_metadata").fetchone()
        los = int(row[0]) if row else 0
        reporter.note(f"{len(refs.columns)} reference columns; finding orphans among {los:,} LOs")
        since = collect_refs(conn, refs)
        found = select_candidates(conn, rule)
        budget = LockBudget.read(conn)
        batch_size = req.batch_size or max(1, budget.per_transaction // req.jobs)
        archived = None
        removable = found.removable
        if req.dry_run:
            if listing is not None:
                listing(iter_candidates(conn))
            done = None
        else:
            if req.archive_to and removable:
                from pgblobdump.vacuum.archive import archive_candidates

                archived, before = archive_candidates(
                    conn, conninfo, req.archive_to, req.state_schema, reporter, warn
                )
                if catalog.pages_readable(conn):  # else the pages' xmins are not ours to see
                    rule = dataclasses.replace(rule, bytes_before=before)
                else:
                    notes.append(
                        "this role may not read pg_largeobject: an orphan written to after it"
                        " was archived would be removed with the bytes the archive has"
                    )
            reporter.task("removing orphans", removable)
            done = remove(conninfo, conn, refs, req.references, rule, batch_size, req.jobs,
                          since, reporter)  # fmt: skip
    return VacuumResult(
        database=describe(conninfo), los=los, orphans=found.orphans, removable=removable,
        removed=done.removed if done else 0, young=found.young, not_owned=found.not_owned,
        not_owned_sample=found.not_owned_sample,
        referenced_meanwhile=done.referenced_meanwhile if done else 0,
        skipped=done.skipped if done else 0,
        not_archived=removable - archived if archived is not None else 0, archived=archived,
        columns=len(refs.columns), batches=done.batches if done else 0, batch_size=batch_size,
        seconds=time.perf_counter() - t0, dry_run=req.dry_run, age=rule.describe(),
        notes=tuple(notes),
    )  # fmt: skip
