"""``sync``: bring the target's LOs to equal the source's as of one source snapshot, doing
work in proportion to what changed.

1. The source's snapshot is exported and its mark taken; the target's state gives the
   mark of the last copy or sync of this selection (sync/state.py). A mark of the
   selection's LOs read from another source is refused (sync/source.py
   ``another_source``) unless ``source_changed``.
2. What changed on the source: from tuple xids since that mark (pg/changes.py), or, when
   that cannot be exact (no state, another source, past the xid horizon, a role that may
   not read pg_largeobject, a --referenced-by selection: it changes with the rows that
   reference LOs, which leave no trace in the LOs' xids), from per-LO digests computed
   on each server (said so). With --referenced-by, an LO of ours is gone only when the
   source has none of that OID at all.
3. The target's LOs as ours, changed there, or foreign (sync/state.py), merged with the
   source's into a plan (sync/plan.py); ``dry_run`` stops here.
4. ``delete``: LOs gone from the source that a copy or sync made are removed (only if
   still ours and unchanged on the target: metadata, pages and comment checked again in
   the removing statement). New LOs and those to rewrite are copied by copy's jobs
   (restore's writer, the ledger's clean-up); the target's copy of an LO to rewrite is
   removed (checked so too) in the transaction that writes the new one
   (sync/rewrite.py): a sync cut short leaves the old copy or the new one, never none.
5. The new mark replaces the old one, only once all of it succeeded: a sync cut short
   leaves the old mark, and the next one does again whatever was not done.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import psycopg
from psycopg import sql

from pgblobdump.errors import UsageError
from pgblobdump.pg import catalog, changes
from pgblobdump.pg import snapshot as snap
from pgblobdump.pg.connect import describe, sql_errors
from pgblobdump.pg.ledger import to_ranges
from pgblobdump.pg.lostream import Selection, Side
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.sync import source, state
from pgblobdump.sync.plan import GONE_CHANGED, GONE_REPLACED, Plan, decide

if TYPE_CHECKING:
    from pgblobdump.packed.read.items import Item
    from pgblobdump.sync.jobs import Feed

log = logging.getLogger(__name__)

RANGE_READ = 1_000
"""A run of at least this many LOs to copy, with no other source LO between them, is read
by OID range (the dump's reader, pages in one COPY); shorter runs by OID list."""


@dataclass(frozen=True)
class SyncRequest:
    """``delete``: remove LOs gone from the source (only those a copy or sync made);
    ``force``: rewrite LOs changed on the target since a copy made them; ``dry_run``:
    plan only; ``source_changed``: the source is not the database the last copy or sync
    read, on purpose (else such a sync is refused: it would remove and overwrite what
    was copied from that one). ``detect``: how the LOs whose pages were written since
    the mark are found (``changes.DETECT``)."""

    selection: Selection = field(default_factory=Selection)
    jobs: int = 1
    delete: bool = False
    force: bool = False
    dry_run: bool = False
    source_changed: bool = False
    detect: str = "auto"

    def __post_init__(self) -> None:
        if not 1 <= self.jobs <= 64:
            raise UsageError(f"--jobs must be between 1 and 64 (got {self.jobs})")


@dataclass(frozen=True)
class SyncResult:
    """What was done (or, with dry_run, would be): ``method`` says how changes were found
    (``transaction ids since <mark>``, ``wal summaries since <mark>`` or ``digests:
    <why>``); ``detection`` the way alone (``transaction ids``, ``wal summaries`` or
    ``digests``)."""

    plan: Plan
    copied: int
    bytes: int
    deleted: int
    seconds: float
    method: str
    snapshot: str
    detection: str = "digests"

    def record(self) -> dict[str, object]:
        return {**self.plan.counts(), "copied": self.copied, "bytes": self.bytes,
                "deleted": self.deleted, "seconds": round(self.seconds, 3),
                "method": self.method, "detection": self.detection,
                "snapshot": self.snapshot}  # fmt: skip


def sync(src: str, dst: str, req: SyncRequest, reporter: Reporter = QUIET) -> SyncResult:
    """Sync the LOs ``req`` selects from the database at ``src`` into the one at ``dst``."""
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        leader, main, sel = source.open_pair(stack, src, dst, "sync", req.selection)
        snapshot = snap.export(leader)
        now = changes.mark(leader)
        key = state.key_of(sel)
        here = source.recorded(leader, src)
        other, drop = source.other_sources(state.overlapping(main, sel), now, here)
        if other is not None and not req.source_changed:
            if not req.dry_run:
                raise UsageError(f"{other}: {ANOTHER}")
            reporter.note(f"{other}: without --dry-run, sync refuses ({ANOTHER})")
        marks = state.load_marks(main, key)
        since = state.combine(marks)
        why = _inexact(leader, sel, marks, since, now)
        if not catalog.pages_readable(main):
            reporter.note(
                "this role may not read the target's pg_largeobject: bytes written on the"
                " target since they were copied are not seen as conflicts (owner, ACL and"
                " comment changes are)"
            )
        detection = "digests"
        if why is not None:
            if req.detect == "wal-summaries":
                raise UsageError(f"--detect wal-summaries: {why}")
            method = f"digests computed on each server: {why}"
            reporter.note(f"comparing per-LO digests on both servers ({why})")
            # the target's pass runs beside the source's: both servers read at once
            made = state.coverage(main, sel.first, sel.last)
            with _ahead(state.held(main, sel.first, sel.last, True)) as held:
                plan = decide(changes.digests(leader, sel), held, req.force, True, made=made)
            if sel.referenced_by:
                _only_gone_from_the_source(leader, plan)
        else:
            assert since is not None
            found = changes.detect(leader, sel, since, now, req.detect)
            if found.quiet:  # no summaries kept at all: the full pass, said in -v only
                log.info("%s", found.note())
            else:  # once, -v or not
                reporter.note(found.note())
            detection = found.how
            method = f"{detection} since {since.xmin}:{since.xmax}"
            plan = _by_xids(leader, main, sel, since, req.force, found)
        if req.dry_run:
            leader.execute("COMMIT")
            return SyncResult(plan, 0, 0, 0, time.perf_counter() - t0, method, snapshot,
                              detection)  # fmt: skip
        if plan.new or plan.rewrite or plan.forced:
            source.check_roles(leader, main, [sel])
        state.ensure(main)
        deleted = copied = nbytes = 0
        with sql_errors("sync: on the target", describe(dst)):
            if req.delete and plan.gone:
                deleted = state.unlink(main, plan.gone)
        if plan.segments:
            total = len(plan.new) + len(plan.rewrite) + len(plan.forced)
            reporter.task("syncing LOs", total)
            # restore's writer, imported only when there is something to write
            from pgblobdump.packed.restore.request import OnConflict, RestoreRequest
            from pgblobdump.sync.jobs import run_jobs
            from pgblobdump.sync.rewrite import Rewrites

            rreq = RestoreRequest(on_conflict=OnConflict.SKIP, jobs=req.jobs)
            feeds = _feeds(plan, sel, req.jobs)
            again = Rewrites(plan.rewrite, plan.forced, catalog.pages_readable(main))
            wrote = run_jobs(src, dst, snapshot, feeds, rreq, reporter, stack, "sync",
                             again or None)  # fmt: skip
            copied, nbytes = wrote.los, wrote.bytes
            if kept := wrote.skipped:  # found changed in their transaction
                reporter.note(
                    f"{kept:,} LOs to copy were changed or made on the target while this"
                    " sync ran: kept as they are (the next sync lists them as conflicts)"
                )
        with sql_errors("sync: on the target", describe(dst)):
            state.add_mark(main, key, now, here, replace=True, drop=drop)
            state.compact(main)
        with sql_errors("sync: on the source", describe(src)):
            leader.execute("COMMIT")
    return SyncResult(plan, copied, nbytes, deleted, time.perf_counter() - t0, method, snapshot,
                      detection)  # fmt: skip


def _by_xids(leader: psycopg.Connection, main: psycopg.Connection, sel: Selection,
             since: changes.Mark, force: bool, found: changes.Detection) -> Plan:  # fmt: skip
    """The plan from transaction ids. Buckets of OIDs whose OID lists differ between the
    two sides (new or gone LOs, the target's own) are merged LO by LO; everywhere else
    only the LOs that changed, are not ours, or have a comment come from either server
    (``sparse``): nothing changed costs the two passes over tuple headers (or, ``found``
    from the WAL summaries, the pages they name and the metadata), not a row per LO."""
    src = changes.buckets(leader, sel.where(sql.SQL("m.oid")))
    tgt = changes.buckets(main, sql.SQL("m.oid BETWEEN {}::int8::oid AND {}::int8::oid").format(
        sql.Literal(sel.first), sql.Literal(sel.last)))  # fmt: skip
    differ = sorted(b for b in src.keys() | tgt.keys() if src.get(b) != tgt.get(b))
    plan = Plan()
    made = state.coverage(main, sel.first, sel.last) if differ else None
    for lo, hi in to_ranges(differ):
        first = max(sel.first, lo << changes.BUCKET_BITS)
        last = min(sel.last, ((hi + 1) << changes.BUCKET_BITS) - 1)
        with _ahead(state.held(main, first, last, False)) as held:
            decide(changes.scan(leader, sel.part(first, last), since, found=found), held,
                   force, False, plan, made=made)  # fmt: skip
    bad = set(differ)

    def equal_buckets(rows: Iterator[T]) -> Iterator[T]:
        return (r for r in rows if (r.oid >> changes.BUCKET_BITS) not in bad)  # type: ignore[attr-defined]

    with _ahead(state.held(main, sel.first, sel.last, False, sparse=True)) as held:
        decide(equal_buckets(changes.scan(leader, sel, since, sparse=True, found=found)),
               equal_buckets(held), force, False, plan, sparse=True)  # fmt: skip
    plan.equal += sum(n for b, (n, _h) in src.items() if b not in bad) - plan.seen
    plan.sort()
    return plan


def _inexact(leader: psycopg.Connection, sel: Selection, marks: list[state.Marked],
             since: changes.Mark | None, now: changes.Mark) -> str | None:  # fmt: skip
    """Why the changes since ``marks`` (combined: ``since``) cannot be found exactly
    from transaction ids, or None when they can."""
    if sel.referenced_by:
        return REFERENCED
    if any(m.source.replaced for m in marks):
        return (
            "a copy --source-changed made the last mark, and LOs copied from the other"
            " source may still be there"
        )
    if marks and since is None:
        return (
            "the marks of these LOs name more than one cluster or database (a restart"
            " between copies, with a role that may not run pg_control_system(), or a"
            " source changed on purpose)"
        )
    return changes.unusable(leader, since, now)


ANOTHER = (
    "a sync from another source would remove and overwrite the LOs copied from that one;"
    " check -d and -p, or sync --source-changed if the source changed on purpose"
)
"""What a sync from another database than the last one read would do, and the way on."""


REFERENCED = (
    "--referenced-by selects LOs by the rows that reference them, and an LO newly"
    " referenced leaves no trace in the LOs' transaction ids"
)
"""Why a --referenced-by sync compares digests every time."""


def _only_gone_from_the_source(leader: psycopg.Connection, plan: Plan) -> None:
    """With --referenced-by, an LO of ours outside the selection is gone from the source
    only when the source has no LO of that OID at all; one that is merely not referenced
    now is left alone (not listed, never deleted, no conflict)."""
    gone = (GONE_CHANGED, GONE_REPLACED)
    listed = plan.gone + [c.oid for c in plan.conflicts if c.why in gone]
    there = source.present(leader, listed)
    plan.gone = [o for o in plan.gone if o not in there]
    plan.conflicts = [c for c in plan.conflicts if c.why not in gone or c.oid not in there]


T = TypeVar("T")


@contextlib.contextmanager
def _ahead(items: Iterator[T], chunk: int = 2_000, chunks: int = 8) -> Iterator[Iterator[T]]:
    """``items`` produced in a thread of their own, at most ``chunks`` x ``chunk`` ahead
    of the consumer (memory stays bounded); the producer's error is raised to the
    consumer. Leaving the block early stops the producer."""
    q: queue.Queue[list[T] | BaseException | None] = queue.Queue(maxsize=chunks)
    stop = threading.Event()

    def put(x: list[T] | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            buf: list[T] = []
            for x in items:
                buf.append(x)
                if len(buf) >= chunk:
                    if not put(buf):
                        return
                    buf = []
            if buf and not put(buf):
                return
            put(None)
        except BaseException as e:
            put(e)

    def consume() -> Iterator[T]:
        while True:
            got = q.get()
            if got is None:
                return
            if isinstance(got, BaseException):
                raise got
            yield from got

    t = threading.Thread(target=produce, name="pgblobdump-sync-scan", daemon=True)
    t.start()
    try:
        yield consume()
    finally:
        stop.set()
        t.join(5)


def _feeds(plan: Plan, sel: Selection, jobs: int) -> list[Feed]:
    """The plan's segments cut into at most ``jobs`` contiguous shares of similar counts,
    each read in OID order: long segments by range, the rest by OID list."""
    actions = sorted(plan.new + plan.rewrite + plan.forced)
    total = len(actions)
    shares: list[list[list[int]]] = [[]]
    done = 0
    for seg in plan.segments:
        if len(shares) < jobs and done >= total * len(shares) / jobs:
            shares.append([])
        shares[-1].append(seg)
        done += seg[2]
    return [functools.partial(_items, segments=share, actions=actions, sel=sel)
            for share in shares if share]  # fmt: skip


def _items(conn: psycopg.Connection, segments: list[list[int]], actions: list[int],
           sel: Selection, side: Side | None = None) -> Iterator[Item]:  # fmt: skip
    from pgblobdump.sync import feed  # restore's items: only when there is something to copy

    listed: list[int] = []
    for first, last, count in segments:
        if count < RANGE_READ:
            lo = bisect.bisect_left(actions, first)
            listed += actions[lo : lo + count]
            continue
        if listed:
            yield from feed.listed_items(conn, listed, side)
            listed = []
        yield from feed.items(conn, sel.part(first, last), side)
    if listed:
        yield from feed.listed_items(conn, listed, side)
