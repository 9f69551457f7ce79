"""``vacuum``: the request, the result, and the run from references to removed LOs."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgblobdump.errors import UnsafeToRemove, UsageError
from pgblobdump.pg import catalog
from pgblobdump.pg.connect import connect, describe
from pgblobdump.pg.locks import LockBudget
from pgblobdump.pg.trust import check_state_schema
from pgblobdump.refs import candidates, suspects
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.units import noun, plural
from pgblobdump.vacuum import age
from pgblobdump.vacuum.batches import remove
from pgblobdump.vacuum.orphans import (
    CANDIDATES,
    collect_refs,
    iter_candidates,
    kept_by_suspects,
    select_candidates,
)
from pgblobdump.vacuum.refs import LIST_MAX, References, discover

DEFAULT_MIN_AGE = 3600.0


@dataclass(frozen=True)
class VacuumRequest:
    """What to remove and how. ``references``: ``([schema.]table, column)`` pairs whose
    values hold OIDs in a type discovery does not read (text, jsonb, a composite)."""

    min_age: float = DEFAULT_MIN_AGE
    dry_run: bool = False
    references: tuple[tuple[str, str], ...] = ()
    not_references: tuple[tuple[str, str], ...] = ()
    """Candidate columns dismissed after review (``--not-references``): never read."""
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
    """How the run told an orphan's age."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    old_enough: str = ""
    """When the ``young`` ones will be old enough, or what makes them so ("" when none)."""
    suspects: tuple[dict[str, object], ...] = ()
    """Suspected reference columns found (refs/suspects.py): each counts as a reference."""
    kept_only_by_suspects: int = 0
    """LOs only suspected references name: not orphans here; vacuumlo would delete them."""
    kept_by_candidates: int = 0
    """Orphans some other candidate column names, found by the check before removing."""
    candidate_check: dict[str, object] | None = None
    """What that check read (columns, how), kept (per column) and cost (seconds)."""


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
        found_suspects, others = _suspects(conn, refs, req)
        hits = [f.column.spec for f in found_suspects.hits]
        for f in found_suspects.hits:
            d = f.summary()
            n = (f"suspected reference {f.column.qualified} ({f.column.type}): {d['live']:,}"
                 f" live OIDs of {d['values']:,} values{'' if d['confirmed'] else ' screened'},"
                 f" {f.pattern or 'a key'}, {f.confidence} confidence: kept as a reference"
                 " (--not-references dismisses it)")  # fmt: skip
            notes.append(n)
            reporter.note(n)
        if hits:
            refs = discover(conn, req.references, hits)
        for n in refs.notes():
            notes.append(n)
            reporter.note(n)
        # horizon samples are read from it and --archive-to's OIDs written to it
        check_state_schema(conn, req.state_schema, "vacuum")
        rule = age.read(conn, req.min_age, req.state_schema)
        recorded = False
        if not req.dry_run and req.min_age > 0:
            why = age.record(conn, req.state_schema, req.min_age)
            if why:
                notes.append(why)
            recorded = not why
        los = catalog.count(conn)
        reporter.note(f"{plural(len(refs.columns), 'reference column')}; finding orphans"
                      f" among {plural(los, 'LO')}")  # fmt: skip
        since = collect_refs(conn, refs)
        found = select_candidates(conn, rule)
        only_suspects = kept_by_suspects(conn)
        check = None
        if others and found.removable:
            reporter.note(f"checking {plural(found.removable, 'orphan')} against"
                          f" {len(others):,} more {noun(len(others), 'column')} that may hold"
                          " OIDs as text or integers")  # fmt: skip
            check = suspects.kept(conn, others, sql.SQL("pg_temp.{}").format(
                sql.Identifier(CANDIDATES)))  # fmt: skip
            if check.kept:
                more = [c.spec for c in others if c.qualified in check.kept]
                hits += more
                refs = discover(conn, req.references, hits)
                n = (f"{check.removed:,} orphans are named by "
                     + ", ".join(f"{k} ({v:,})" for k, v in check.kept.items())
                     + ": kept, and those columns count as references")  # fmt: skip
                notes.append(n)
                reporter.note(n)
        budget = LockBudget.read(conn)
        batch_size = req.batch_size or max(1, budget.per_transaction // req.jobs)
        archived = None
        removable = found.removable - (check.removed if check else 0)
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
            done = remove(conninfo, conn, refs, (*req.references, *hits), rule, batch_size,
                          req.jobs, since, reporter)  # fmt: skip
    return VacuumResult(
        database=describe(conninfo), los=los, orphans=found.orphans, removable=removable,
        removed=done.removed if done else 0, young=found.young, not_owned=found.not_owned,
        not_owned_sample=found.not_owned_sample,
        referenced_meanwhile=done.referenced_meanwhile if done else 0,
        skipped=done.skipped if done else 0,
        not_archived=removable - archived if archived is not None else 0, archived=archived,
        columns=len(refs.columns), batches=done.batches if done else 0, batch_size=batch_size,
        seconds=time.perf_counter() - t0, dry_run=req.dry_run, age=rule.describe(),
        old_enough=rule.when_old(recorded) if found.young else "",
        notes=tuple(notes),
        suspects=tuple(f.summary() for f in found_suspects.hits),
        kept_only_by_suspects=only_suspects,
        kept_by_candidates=check.removed if check else 0,
        candidate_check=None if check is None else {
            "columns": list(check.columns), "kept": dict(check.kept),
            "seconds": round(check.seconds, 3)},
    )  # fmt: skip


def _suspects(
    conn: psycopg.Connection, refs: References, req: VacuumRequest
) -> tuple[suspects.Suspects, list[candidates.Candidate]]:
    """The suspected references (screened: statistics, a sample, a full pass of the
    columns that hit) and the other candidate columns, which are checked against the
    orphans before any is removed. UnsafeToRemove when one cannot be read whole."""
    cands = candidates.candidates(
        conn, skip={(c.relid, c.attnum) for c in refs.columns}, dismissed=req.not_references
    )
    unread = [c for c in cands if not c.readable or c.rls]
    if unread:
        why = {True: "row-level security applies to the role", False: "the role may not read it"}
        listed = "; ".join(f"{c.qualified} ({why[c.readable]})" for c in unread[:LIST_MAX])
        more = f" and {len(unread) - LIST_MAX} more" if len(unread) > LIST_MAX else ""
        raise UnsafeToRemove(
            "cannot see every reference to LOs, nothing removed: columns that may hold OIDs"
            f" as text or integers cannot be read whole: {listed}{more}; vacuum as a role"
            " that may read them, or dismiss each after review with --not-references"
        )
    live = [c for c in cands if c.populated]
    found = suspects.screen(conn, live)
    hit = {(f.column.relid, f.column.attnum) for f in found.hits}
    return found, [c for c in live if (c.relid, c.attnum) not in hit]
