"""``copy``: every selected LO of the source into the target, with owners, ACLs and
comments, from one snapshot, over N connections per side, nothing in between.

Each job reads a contiguous OID range of the source with the dump's reader (under the
snapshot the leader exported) and hands what it reads to restore's writer (its batches
sized from the lock table, each one transaction entered in a Ledger): the same conflict
rules as restore, the same exact clean-up on failure. Each batch also enters its OID
ranges in the target's state (sync/state.py) in its own transaction, so a rerun after a
kill -9 knows which existing LOs an earlier copy made and resumes, while an LO it did not
make is a conflict. A copy from another source than the earlier copies and syncs into
the target read is refused before anything is written (as sync refuses it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from dataclasses import dataclass, field

import psycopg

from pgblobdump.errors import DatabaseError, UsageError
from pgblobdump.packed.restore.request import PARTS_MAX, OnConflict, RestoreRequest
from pgblobdump.pg import catalog, changes
from pgblobdump.pg import snapshot as snap
from pgblobdump.pg.connect import describe, sql_errors
from pgblobdump.pg.ledger import format_ranges, to_ranges
from pgblobdump.pg.lostream import Selection
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.sync import feed, source, state
from pgblobdump.sync.jobs import Feed, run_jobs
from pgblobdump.units import noun, plural


@dataclass(frozen=True)
class CopyRequest:
    """What to copy and how; refuses bad combinations on construction.

    ``jobs``: connections per side, each a contiguous OID range. ``part``: (K, N), share
    K of N of the selection by LO count (N copies at once, on N hosts). ``on_conflict``:
    an OID that exists on the target and that no copy made: refuse (before anything is
    written) or keep what is there. ``resume``: say that an earlier copy was interrupted
    (a rerun finds it out alone: the LOs an earlier copy made are kept either way).
    ``source_changed``: the source is not the database the target's earlier copies and
    syncs of these LOs read, on purpose (else refused: LOs of two sources in one target
    would be removed and overwritten by a sync from either); their marks are replaced."""

    selection: Selection = field(default_factory=Selection)
    jobs: int = 1
    on_conflict: OnConflict = OnConflict.ERROR
    resume: bool = False
    part: tuple[int, int] | None = None
    source_changed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_conflict", OnConflict(self.on_conflict))
        if not 1 <= self.jobs <= 64:
            raise UsageError(f"--jobs must be between 1 and 64 (got {self.jobs})")
        if self.part is not None and not 1 <= self.part[0] <= self.part[1] <= PARTS_MAX:
            raise UsageError(f"--part {self.part[0]}/{self.part[1]} must be K/N, 1 <= K <= N")


@dataclass(frozen=True)
class CopyResult:
    """``kept``: LOs an earlier, interrupted copy had made (resumed); ``skipped``: LOs
    that existed on the target and were kept (--on-conflict skip)."""

    los: int
    bytes: int
    kept: int
    skipped: int
    seconds: float
    snapshot: str
    oids: str  # the OID range this run covered (its --part share)


def copy(src: str, dst: str, req: CopyRequest, reporter: Reporter = QUIET) -> CopyResult:
    """Copy the LOs ``req`` selects from the database at ``src`` into the one at ``dst``."""
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        leader, main, sel = source.open_pair(stack, src, dst, "copy", req.selection)
        snapshot = snap.export(leader)
        mark = changes.mark(leader)
        here = source.recorded(leader, src)
        # before anything is written: which source earlier copies and syncs read
        marks = state.overlapping(main, sel)
        other, drop = source.other_sources(marks, mark, here)
        if other is not None and not req.source_changed:
            raise UsageError(f"{other}: {ANOTHER}")
        # LOs the other source's copy made are kept below as a resumed copy's would be:
        # the mark says so, and the next sync compares digests (state.Recorded)
        here = dataclasses.replace(
            here, replaced=bool(drop) or any(m.source.replaced for m in marks)
        )
        ranges = snap.shares(leader, sel, req.part, req.jobs)
        covered = f"{ranges[0].first}..{ranges[-1].last}"
        if req.part is not None:
            reporter.note(f"part {req.part[0]}/{req.part[1]}: OIDs {covered}")
        total = catalog.count_selected(leader, ranges)
        reporter.task("copying LOs", total)
        source.check_roles(leader, main, ranges)
        kept, skipping = _conflicts(leader, main, ranges, req, reporter)
        state.ensure(main)
        rreq = RestoreRequest(on_conflict=req.on_conflict, resume=skipping,
                              part=req.part, jobs=len(ranges))  # fmt: skip
        # before any LO is made
        state.add_mark(main, state.key_of(sel), mark, here, drop=drop)
        feeds: list[Feed] = [functools.partial(feed.items, sel=s) for s in ranges]
        made = run_jobs(src, dst, snapshot, feeds, rreq, reporter, stack)
        with sql_errors("copy: on the source", describe(src)):
            leader.execute("COMMIT")
    return CopyResult(made.los, made.bytes, kept, max(0, made.skipped - kept),
                      time.perf_counter() - t0, snapshot, covered)  # fmt: skip


ANOTHER = (
    "a copy from another source would leave LOs of two sources in the target, which a"
    " sync from either would remove and overwrite; check -d and -p, or copy"
    " --source-changed if the source changed on purpose"
)
"""What a copy from another database than the one earlier copies read would do."""


def _conflicts(
    leader: psycopg.Connection,
    main: psycopg.Connection,
    ranges: list[Selection],
    req: CopyRequest,
    reporter: Reporter,
) -> tuple[int, bool]:
    """Before anything is written: the selected OIDs that exist on the target. Those an
    earlier copy made are kept (a resumed copy); any other is refused (or, with
    --on-conflict skip, kept). Returns (LOs kept from an earlier copy, whether batches
    must skip existing OIDs). A target holding no LO in the selection's OID range costs
    one statement."""
    first, last = ranges[0].first, ranges[-1].last
    row = main.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_largeobject_metadata"
        " WHERE oid BETWEEN %s::int8::oid AND %s::int8::oid)",
        (first, last),
    ).fetchone()
    if not (row and row[0]):
        if req.resume:
            reporter.note("nothing to resume: the target holds no LO of the selection yet")
        return 0, False
    mine = 0
    others: list[int] = []
    for window in source.oid_windows(leader, ranges):
        ours, theirs = state.existing(main, window)
        mine += len(ours)
        if len(others) < 5 or req.on_conflict is OnConflict.SKIP:
            others += theirs
        elif theirs:
            others.append(theirs[0])
    if others and req.on_conflict is OnConflict.ERROR:
        more = f" (and {', '.join(map(str, others[1:5]))}...)" if len(others) > 1 else ""
        raise DatabaseError(
            f"LO {others[0]} already exists in the target{more}, and no copy made it (or it"
            " changed there since); copy"
            " with --on-conflict skip to keep what is there, with --remap to copy them at new"
            " OIDs, or into another database"
        )
    if mine:
        reporter.note(
            f"resuming: {plural(mine, 'LO')} an earlier copy made {noun(mine, 'is')} there"
            " already; kept"
        )
    if others:
        reporter.note(f"keeping {format_ranges(to_ranges(others))} that exist on the target")
    return mine, bool(mine or others)
