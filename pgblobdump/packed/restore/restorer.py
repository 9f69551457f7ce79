"""``restore``: a packed archive's LOs into a database, with their OIDs, owners, ACLs and
comments, in batches sized from the server's lock table.

Every batch is one transaction through the shared LO writer (pg/lo.py) and the run's
ledger: a failure or an interrupt removes exactly the LOs this run created, and says so.
``resume`` (after a kill -9, when no clean-up could run) skips the LOs that exist: batches
commit whole, so an LO that exists was restored completely. A skipping batch finds what
exists inside its own transaction, and only then tells the ledger what it creates; there
too, a run that writes LOs anew in place of the target's (sync) removes their old copies
(``Replacing``), so that a failure leaves the old copy, never no copy.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Protocol

import psycopg
import psycopg.errors
from psycopg import sql

from pgblobdump.errors import PgBlobDumpError
from pgblobdump.packed.format.index import Index, Meta
from pgblobdump.packed.read.items import Damaged, Item, LoPiece, WholeLos
from pgblobdump.packed.restore.hooks import RemapHooks, Remapping, Replacing, taken_meanwhile
from pgblobdump.packed.restore.journal import Journal
from pgblobdump.packed.restore.plan import (
    BatchLos,
    BatchPlan,
    Rules,
    claimed,
    plan_batch,
    refuse_missing,
    replaced_of,
    roles_named,
)
from pgblobdump.packed.restore.precheck import precheck
from pgblobdump.packed.restore.request import RestoreRequest, RestoreResult
from pgblobdump.packed.restore.sparse import Further, Gatherer, Gathering
from pgblobdump.pg import catalog
from pgblobdump.pg.connect import connect
from pgblobdump.pg.failure import failed
from pgblobdump.pg.ledger import Ledger, to_ranges
from pgblobdump.pg.lo import Batch, Grant, LoWriter
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.units import plural

BATCH_BYTES = 8 << 20
"""LO bytes per batch: one round trip carries them (a binary bytea[] parameter)."""
BATCH_LOS = 50_000
"""LOs per batch at most when nothing but creation takes locks (empty LOs, no comments)."""


STOP_WAIT = 30.0
"""Seconds a failed restore waits for the batch being written (cancelled) before it
cleans up all the same, leaving that batch's connection alone."""


class _Abandoned(Exception):
    """Rolls back the transaction of a large LO that damage cut short."""


class Restorer:
    def __init__(
        self,
        conn: psycopg.Connection,
        ledger: Ledger,
        req: RestoreRequest,
        reporter: Reporter,
        *,
        metas: Iterable[Meta] | None = None,
        roles_checked: bool = False,
        replacing: Replacing | None = None,
        remapping: Remapping | None = None,
    ) -> None:
        """Writes through ``ledger`` on ``conn`` (its hooks given at its own construction).
        ``metas``: every Meta the archive holds (a directory's index), their roles checked
        by the caller (``check_roles``) before any LO is taken: batches are planned from
        what they have in common. ``roles_checked``: the roles of every LO to come were
        checked already (copy's and sync's, for the whole selection). ``replacing``: the
        LOs to write in place of the target's (needs ``req.skipping``). ``remapping``:
        told of each batch's LOs in its transaction (restore --remap; not skipping)."""
        self.conn = conn
        self.req = req
        self.writer = LoWriter(conn, ledger)
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        self.superuser = bool(row and row[0])
        self.known_roles: set[str] = set()
        # the batch of whole LOs, as parallel lists
        self.oids: list[int] = []
        self.metas: list[Meta] = []
        self.datas: list[bytes | memoryview] = []
        self.batch_bytes = 0
        self.further = Further()  # the batch's LOs with holes: their runs after the first
        self.gathering = Gatherer()  # the pieces of one, coming
        # Creating LOs and one GRANT (or ACL update) for many takes no lock per LO; a
        # comment does, and so does removing an LO replaced, until commit: a batch holds
        # at most the lock budget of them.
        self.batch_locks = 0
        self.locks_max = max(1, self.writer.budget.per_transaction // req.sharing)
        self.replacing = replacing
        self.remapping = remapping
        self.batch_replacing: list[int] = []
        self._checked: set[Meta] = set()
        self.all_checked = roles_checked  # every Meta to come was checked up front
        # What every Meta of the archive holds, once known (``metas``): a batch whose LOs
        # can have but one owner, no ACL or no comment is planned with no loop per LO.
        self.owners: set[str | None] | None = None
        self.any_acl = self.any_comment = True
        self.los = self.bytes = self.skipped = self.damaged = 0
        self.damaged_oids: list[int] = []
        self.reporter = reporter
        self._large: contextlib.ExitStack | None = None
        self._large_batch: Batch | None = None
        self._job: futures.Future[None] | None = None
        if metas is not None:
            self._know(metas)

    # -- roles ------------------------------------------------------------------------
    def check_roles(self, metas: Iterable[Meta]) -> None:
        """Every role the metadata names must exist on the target (unless not restored)."""
        wanted = roles_named(metas, self.req.no_owner, self.req.no_acl)
        wanted -= self.known_roles
        if not wanted:
            return
        rows = self.conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (sorted(wanted),)
        ).fetchall()
        have = {r[0] for r in rows}
        refuse_missing(wanted - have)
        self.known_roles |= have

    def _know(self, metas: Iterable[Meta]) -> None:
        """Every Meta the archive holds (a directory's index), its roles checked: the
        batches are planned from what they have in common."""
        metas = list(metas)
        self.all_checked = True
        self.owners = {m.owner for m in metas}
        self.any_acl = any(m.acl is not None for m in metas)
        self.any_comment = any(m.comment is not None for m in metas)

    def _check(self, metas: Iterable[Meta]) -> None:
        """check_roles for the metadata not seen yet (a stream's come as it goes)."""
        if self.all_checked:
            return
        new = [m for m in {id(m): m for m in metas}.values() if m not in self._checked]
        if new:
            self.wait()
            self.check_roles(new)
            self._checked.update(new)

    # -- LOs --------------------------------------------------------------------------
    def take(self, item: Item) -> None:
        if isinstance(item, WholeLos):
            self._take_whole(item)
        elif isinstance(item, Damaged):
            self._skip_damaged(item)
        elif item.offset == 0 and item.last:
            self._take_whole(WholeLos([item.oid], [item.meta], [item.data], [item.checksum]))
        else:
            self._take_piece(item)

    def _take_whole(self, run: WholeLos, holes: Gathering | None = None) -> None:
        """``holes``: the run's one LO has holes, its runs after the first and length."""
        self._check(run.metas)
        locks = 0
        if not self.req.no_comments and self.any_comment:
            locks = sum(m.comment is not None for m in run.metas)
        mine = replaced_of(run.oids, self.replacing)
        locks += len(mine)
        if locks and self.batch_locks + locks > self.locks_max:
            if len(run.oids) > 1:  # split it where the lock budget says
                for one in run.pieces():
                    self._take_whole(WholeLos([one.oid], [one.meta], [one.data], [one.checksum]))
                return
            self.flush()
        self.oids += run.oids
        self.metas += run.metas
        self.datas += run.datas
        self.batch_replacing += mine
        self.batch_bytes += sum(map(len, run.datas))
        if holes is not None:
            self.batch_bytes += self.further.add(holes)
        self.batch_locks += locks
        if (
            len(self.oids) >= BATCH_LOS
            or self.batch_bytes >= BATCH_BYTES
            or self.batch_locks >= self.locks_max
        ):
            self.flush()

    def _skip_damaged(self, d: Damaged) -> None:
        """LOs lost to damage (restore --skip-damaged): a large LO cut by it is rolled
        back; the others are counted and named in the report."""
        self.gathering.drop()  # an LO with holes cut by it: never written
        if self._large is not None:
            stack, self._large, self._large_batch = self._large, None, None
            with contextlib.suppress(_Abandoned):
                stack.__exit__(_Abandoned, _Abandoned(), None)  # the transaction rolls back
        self.damaged += len(d.oids)
        self.damaged_oids.extend(d.oids)
        # the reason names the file and the byte already, as the error would
        where = d.where.partition(" at byte ")[0]
        detail = d.reason if where in d.reason else f"{d.where}: {d.reason}"
        self.reporter.note(f"skipped {plural(len(d.oids), 'LO')} of a damaged part: {detail}")

    def _take_piece(self, p: LoPiece) -> None:
        """A piece of an LO with holes up to BATCHED_MAX bytes: gathered, and the LO
        written in the batch (packed/restore/sparse.py). A piece of a larger LO: the LO is a
        transaction of its own, written piece by piece."""
        if self.gathering.take(p):
            if (lo := self.gathering.done) is not None:
                self._take_whole(lo.whole(p.checksum), lo)
            return
        if p.offset == 0:
            self.flush()
            self.wait()
            self._check((p.meta,))
            self._large = contextlib.ExitStack()
            if not self.req.skipping:
                self._large_batch = self._large.enter_context(self.writer.batch_of([p.oid]))
            else:
                self._large_batch = self._large.enter_context(self.writer.batch_of_ranges([]))
                if self._claim([p.oid], replaced_of([p.oid], self.replacing))[0]:
                    self.skipped += 1
                    self._large.close()  # its transaction made nothing
                    self._large = contextlib.ExitStack()  # swallow its pieces
                    self._large_batch = None
                    return
        assert self._large is not None
        if self._large_batch is not None:  # holes between pieces are left missing
            self._large_batch.write_at(p.oid, p.offset, p.data, p.size if p.last else None,
                                       p.offset == 0, self._owner(p.meta))  # fmt: skip
        if p.last:
            stack, b = self._large, self._large_batch
            self._large = self._large_batch = None
            if b is not None:
                self._decorate(b, plan_batch(BatchLos([p.oid], [p.meta], [b""], empty=True),
                                             self._rules()))  # fmt: skip
                if self.remapping is not None:
                    self.remapping.record(self.conn, [p.oid])
                self.los += 1
                self.bytes += p.size
            stack.close()

    def _owner(self, meta: Meta) -> str | None:
        return None if self.req.no_owner else meta.owner

    def _existing(self, oids: list[int]) -> set[int]:
        return catalog.existing(self.conn, oids)

    def _claim(self, oids: list[int], replacing: list[int]) -> tuple[set[int], set[int]]:
        """In a skipping batch's transaction, opened with no LOs: the old copies of
        ``replacing`` removed, then which of ``oids`` exist (skipped), and the ledger
        told which it creates. Those replacing a copy are not among them: a failed run's
        clean-up removes what the ledger holds, and must not leave no copy at all.
        Returns (OIDs that exist, OIDs replaced)."""
        ledger = self.writer.ledger
        replaced: set[int] = set()
        if replacing:
            assert self.replacing is not None and ledger.pending is not None
            assert ledger.pending.xid is not None
            replaced = self.replacing.remove(self.conn, replacing, ledger.pending.xid)
        there = self._existing(oids)
        ledger.claim(to_ranges(claimed(oids, there, replaced)))
        return there, replaced

    def flush(self) -> None:
        """Hand the batch to the writer thread, once it has written the one before: the
        server creates one batch while the next is decoded and planned here (the writer
        does little but wait for the server, so the two hardly contend for the GIL)."""
        if not self.oids:
            return
        batch = BatchLos(self.oids, self.metas, self.datas, self.further, not self.batch_bytes)
        replacing, self.batch_replacing = self.batch_replacing, []
        self.oids, self.metas, self.datas, self.further = [], [], [], Further()
        self.batch_bytes = self.batch_locks = 0
        plan = None if self.req.skipping else plan_batch(batch, self._rules())
        self.wait()
        self._job = _in_thread(self._write, batch, plan, replacing)

    def wait(self) -> None:
        """Wait for the batch being written (its error is raised here): before the
        connection is used for anything else."""
        job = self._job
        if job is None:
            return
        try:
            job.result()
        finally:
            # Interrupted (Ctrl-C) before the batch ended, it stays known: stop() must
            # wait for it before the clean-up closes the connection it runs on. (Closing
            # it under the writer freed its socket's number to the clean-up's connection,
            # which the writer then polled: the clean-up hung for ever.)
            if job.done():
                self._job = None

    def stop(self) -> bool:
        """After a failure: the batch being written is cancelled (or let finish) before
        the clean-up uses the ledger and the connection. False when it is still running
        after STOP_WAIT (a server that does not answer): the connection is its still."""
        job, self._job = self._job, None
        if job is not None and not job.done():
            with contextlib.suppress(Exception):
                self.conn.cancel_safe(timeout=5)
        if job is not None:
            futures.wait([job], timeout=STOP_WAIT)
        return job is None or job.done()

    def _rules(self) -> Rules:
        """What this run's batches are planned by (as far as ``know`` has told)."""
        req = self.req
        return Rules(req.no_owner, req.no_acl, req.no_comments, self.superuser, self.owners,
                     self.any_acl, self.any_comment)  # fmt: skip

    def _write(self, batch: BatchLos, plan: BatchPlan | None, replacing: list[int]) -> None:
        """One batch: one transaction through the ledger (runs in the writer thread)."""
        if plan is not None:
            with self.writer.batch_of_ranges(plan.ranges) as b:
                self._create(b, plan)
                if self.remapping is not None:
                    self.remapping.record(self.conn, batch.oids)
        else:  # skipping: what exists is known only in the batch's transaction
            with self.writer.batch_of_ranges([]) as b:
                there, _ = self._claim(batch.oids, replacing)
                self.skipped += len(there)
                plan = plan_batch(batch.without(there), self._rules())
                if plan.los:
                    self._create(b, plan)
        self.los += plan.los
        self.bytes += plan.bytes

    def _create(self, b: Batch, plan: BatchPlan) -> None:
        for c in plan.creations:
            if c.empty:
                b.create_many_empty(c.empty, c.owner)
            if c.full:
                b.create(c.full, c.contents, c.owner)
        plan.further.write(b)
        self._decorate(b, plan)

    def _decorate(self, b: Batch, plan: BatchPlan) -> None:
        if plan.acls is not None:
            b.set_acls(*plan.acls)
        for (grantor, grantee, privileges, option), oids in plan.grants.items():
            self.conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(grantor)))
            b.grant(Grant(grantee, privileges, option), oids)
            self.conn.execute("RESET ROLE")
        b.comment(plan.comments)

    def finish(self) -> None:
        self.flush()
        self.wait()


class Tally(Protocol):
    """What a Restorer counts as it goes."""

    los: int
    bytes: int
    skipped: int
    damaged: int
    damaged_oids: list[int]


@dataclass(frozen=True)
class Counts:
    """What a run's Restorers did, summed over its connections: LOs made and their
    bytes, LOs skipped as existing, LOs lost to damage and their OIDs (ascending)."""

    los: int
    bytes: int
    skipped: int
    damaged: int
    damaged_oids: tuple[int, ...]

    @classmethod
    def of(cls, workers: Iterable[Tally]) -> Counts:
        ws = list(workers)
        return cls(
            sum(w.los for w in ws), sum(w.bytes for w in ws), sum(w.skipped for w in ws),
            sum(w.damaged for w in ws), tuple(sorted(o for w in ws for o in w.damaged_oids)),
        )  # fmt: skip

    def result(self, seconds: float, redone: int = 0) -> RestoreResult:
        """A restore's result: these counts, its wall time and ``redone`` (--resume)."""
        return RestoreResult(self.los, self.bytes, self.skipped, seconds, self.damaged,
                             self.damaged_oids, redone)  # fmt: skip


def restore(
    conninfo: str,
    items: Iterator[Item],
    req: RestoreRequest,
    reporter: Reporter = QUIET,
    index: Index | None = None,
    metas: Iterable[Meta] | None = None,
    part: tuple[int, int] | None = None,
    remapping: RemapHooks | None = None,
) -> RestoreResult:
    """Restore ``items`` (Source.items) into the database at ``conninfo``. With an
    archive's ``index`` and ``metas``, conflicts and missing roles are found before
    anything is written; from a stream they are found as they come (and what was made is
    removed). ``remapping``: the items come at new OIDs (restore --remap), chosen free
    and recorded batch by batch: no precheck, no journal (the mapping is the record)."""
    t0 = time.perf_counter()
    with connect(conninfo, autocommit=True, doing="restore") as conn:
        journal = None
        if index is not None and remapping is None:
            journal = Journal.open(conn, conninfo, index, part)
        metas = list(metas) if metas is not None else None
        save = journal.save if journal is not None else None
        forget = remapping.forget if remapping is not None else None
        ledger = Ledger(conninfo, "restore", on_change=save, on_remove=forget)
        r = Restorer(conn, ledger, req, reporter, metas=metas, remapping=remapping)
        if metas is not None:
            r.check_roles(metas)
        if index is not None and not req.skipping and remapping is None:
            precheck(conn, index, req, part, journal)
        try:
            last = time.monotonic()
            for item in items:
                r.take(item)
                now = time.monotonic()
                if now - last > 0.1:
                    last = now
                    reporter.progress(r.los + r.skipped, r.bytes)
            r.finish()
        except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt) as e:
            said = taken if remapping is None else taken_meanwhile
            error = failed(e, "restore", ledger, conn, said, if_left=req.resume_hint, stop=r.stop)
            if journal is not None:
                journal.save(ledger)  # what is left, if anything, for the next run's hint
            raise error from e
        redone = 0
        if journal is not None:
            redone = journal.redone(ledger)
            journal.remove()
    reporter.progress(r.los + r.skipped, r.bytes)
    return Counts.of([r]).result(time.perf_counter() - t0, redone)


def _in_thread(fn: Callable[..., None], *args: object) -> futures.Future[None]:
    """``fn(*args)`` in a daemon thread of its own: a batch stuck on a server that no
    longer answers must not keep the process from exiting once clean-up has named what
    is left (a ThreadPoolExecutor's threads are joined at exit)."""
    job: futures.Future[None] = futures.Future()

    def run() -> None:
        if job.set_running_or_notify_cancel():
            try:
                fn(*args)
            except BaseException as e:  # raised in the main thread by wait()
                job.set_exception(e)
            else:
                job.set_result(None)

    threading.Thread(target=run, name="pgblobdump-restore", daemon=True).start()
    return job


def taken(oid: str) -> str:
    return f"LO {oid} already exists in the target; restore with --on-conflict skip to keep it"
