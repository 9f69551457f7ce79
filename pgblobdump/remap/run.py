"""``restore ARCHIVE --remap taken|all``: an archive's LOs into a database whose OIDs are
taken, at new OIDs, and the references to them rewritten.

In order, each step done before the next begins:

1. Before anything is written: the archive opened and its index checked; the columns to
   rewrite resolved and checked (the role may update them, nothing hides rows from it,
   the new OIDs fit); the OIDs the target has found (``taken``); the block of new OIDs
   chosen and reserved (remap/plan.py); the run entered in ``pgblobdump_remap.runs``.
2. (``--full``) pg_restore's pre-data and data sections.
3. The LOs, through restore's writer at their new OIDs, each batch's mapping in its own
   transaction (remap/translate.py).
4. The references: each column in one transaction with its journal row
   (remap/columns.py).
5. (``--full``) pg_restore's post-data section, then the run is finished.

After a kill -9, the same command with ``--resume`` finds the run by the archive, takes
the same block again, skips the LOs the mapping holds, and the columns rewritten.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from pgblobdump import storage
from pgblobdump.errors import DatabaseError, PgBlobDumpError, UsageError
from pgblobdump.packed.chain.archives import Chain
from pgblobdump.packed.read import source
from pgblobdump.packed.read.items import Item
from pgblobdump.packed.read.parts import job_shares, share_items
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.restore.archive import announce
from pgblobdump.packed.restore.full import restore_full
from pgblobdump.packed.restore.jobs import restore_jobs
from pgblobdump.packed.restore.request import OnConflict, RestoreRequest, RestoreResult
from pgblobdump.packed.restore.restorer import restore
from pgblobdump.pg.connect import connect
from pgblobdump.refs import rewrite
from pgblobdump.remap import columns, discover, store
from pgblobdump.remap.plan import Assignment, Mode, Ranks, choose, claim, taken_of
from pgblobdump.remap.translate import Remapper
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.units import plural


@dataclass(frozen=True)
class RemapRequest:
    """``mode``: which LOs get new OIDs; ``oid_range``: where the new OIDs come from
    (None: just above every LO); ``referenced_by``: (table, column) whose rows the user
    loaded and whose references are rewritten; ``map_out``: where to write the mapping
    as CSV."""

    mode: Mode = Mode.TAKEN
    oid_range: tuple[int, int] | None = None
    referenced_by: tuple[tuple[str, str], ...] = ()
    map_out: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode(self.mode))


def check(req: RestoreRequest) -> None:
    """What --remap does not go with."""
    if req.part is not None:
        raise UsageError(
            "--remap chooses the new OIDs of the whole archive in one run; --part restores a"
            " share of it (use --jobs N for N connections)"
        )
    if req.on_conflict is OnConflict.SKIP:
        raise UsageError(
            "--remap gives the LOs whose OID is taken new OIDs; --on-conflict skip would keep"
            " the target's instead: give one of them"
        )
    if req.skip_damaged:
        raise UsageError("--remap restores an intact archive; --skip-damaged does not go with it")


@dataclass(frozen=True)
class RemapResult:
    """What a remapped restore did: the LOs (``restored``), the run kept in the target,
    its mapping as ``[old_first, old_last, new_first]`` runs, and each column rewritten."""

    restored: RestoreResult
    run: str
    mode: str
    los: int
    remapped: int
    block: tuple[int, int] | None
    segments: list[list[int]]
    rewrites: list[dict[str, Any]] = field(default_factory=list)
    resumed: bool = False

    def record(self) -> dict[str, Any]:
        r = self.restored
        return {
            "los": r.los, "bytes": r.bytes, "seconds": round(r.seconds, 3), "run": self.run,
            "mode": self.mode, "mapped": self.los, "remapped": self.remapped,
            "kept_oid": self.los - self.remapped,
            "block": list(self.block) if self.block else None,
            "map_table": f"{store.SCHEMA}.map", "map": self.segments,
            "rewrites": self.rewrites,
        }  # fmt: skip


def restore_remapped(
    conninfo: str, archive: str, req: RestoreRequest, remap: RemapRequest,
    reporter: Reporter = QUIET,
) -> RemapResult:  # fmt: skip
    """Restore the directory archive ``archive`` (a chain too) into the database at
    ``conninfo`` at new OIDs, as ``remap`` says; see the module's docstring."""
    check(req)
    if archive == storage.STREAM or not storage.is_directory(archive):
        raise UsageError(
            f"--remap restores a directory archive ({archive} is a stream): it reads every"
            " OID from the index before anything is written"
        )
    t0 = time.perf_counter()
    chain = Chain.open(archive, req.bases)
    top = chain.top
    top.check_index()
    ranks = Ranks(top.index)
    with connect(conninfo, autocommit=True, doing="restore") as conn:
        # every refusal before anything is written, the state's schema included
        cols = [rewrite.resolve(conn, t, c, f"--referenced-by {t}.{c}")
                for t, c in remap.referenced_by]  # fmt: skip
        run, a = _begin(conn, archive, top, req, remap, ranks)
        if a.count:
            for col in cols:
                rewrite.check_fits(conn, col, a.last)
        store.ensure(conn)
        if req.resume:
            claim(conn, a)
        else:
            store.start(conn, run)
            _note_plan(reporter, a, ranks.count)
        try:
            result = _restore(conninfo, conn, archive, chain, req, run, a, cols, reporter)
        except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt):
            _drop_if_empty(conninfo, run.run)
            raise
        if remap.map_out is not None:
            store.write_csv(conn, run.run, remap.map_out)
        los, remapped = store.counts(conn, run.run)
        segments = store.segments(conn, run.run)
        rewrites = list(store.rewritten(conn, run.run).values())
    result = dataclasses.replace(result, seconds=time.perf_counter() - t0)
    block = (a.first, a.last) if a.count else None
    return RemapResult(result, run.run, a.mode.value, los, remapped, block, segments, rewrites,
                       req.resume)  # fmt: skip


def _begin(
    conn: psycopg.Connection, archive: str, top: PackedDirectory, req: RestoreRequest,
    remap: RemapRequest, ranks: Ranks,
) -> tuple[store.Run, Assignment]:  # fmt: skip
    """The run and its new OIDs: an interrupted one's (``--resume``), or a new one's,
    chosen and reserved (not yet entered)."""
    key = top.manifest_sum or archive
    earlier = store.unfinished(conn, key) if store.exists(conn) else []
    if req.resume:
        if not earlier:
            raise UsageError(
                f"nothing to resume: no interrupted --remap restore of {archive} into this"
                " database (run it without --resume)"
            )
        run = earlier[-1]
        if run.mode != remap.mode.value:
            raise UsageError(
                f"the interrupted run {run.run} was --remap {run.mode}; resume it with that"
            )
        return run, Assignment.from_plan(run.mode, run.plan)
    if earlier:
        left, _ = store.counts(conn, earlier[-1].run)
        raise DatabaseError(
            f"an interrupted --remap restore of {archive} into this database (run"
            f" {earlier[-1].run}) left {plural(left, 'LO')}; add --resume to finish it"
        )
    taken = taken_of(conn, top.index) if remap.mode is Mode.TAKEN else None
    a = choose(conn, remap.mode, ranks, taken, remap.oid_range)
    name = time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    run = store.Run(name, archive, key, remap.mode.value, a.to_plan())
    return run, a


def _note_plan(reporter: Reporter, a: Assignment, total: int) -> None:
    if not a.count:
        reporter.note(f"no OID of the archive's {plural(total, 'LO')} is taken: all keep theirs")
    else:
        reporter.note(
            f"{plural(a.count, 'LO')} of {total:,} get new OIDs {a.first}..{a.last}"
            + (" (their OIDs are taken)" if a.mode is Mode.TAKEN else "")
        )


def _restore(
    conninfo: str, conn: psycopg.Connection, archive: str, chain: Chain, req: RestoreRequest,
    run: store.Run, a: Assignment, cols: list[rewrite.RewriteColumn], reporter: Reporter,
) -> RestoreResult:  # fmt: skip
    """Steps 2 to 5 of the module's docstring."""
    top = chain.top
    done = store.done_olds(conn, run.run) if req.resume else []
    remapper = Remapper(run.run, a, done)
    rreq = dataclasses.replace(req, resume=False)  # the mapping says what is done

    tables: set[int] = {int(t) for t in run.plan.get("tables", ())}
    before = discover.user_tables(conn) if req.full and not req.resume else set()

    def restored(section: str) -> None:
        if section == "data":
            tables.update(discover.user_tables(conn) - before)
            store.set_tables(conn, run.run, tables)
            store.set_phase(conn, run.run, "los")

    def los() -> RestoreResult:
        if run.phase in ("los", "begun"):
            result = _los(conninfo, archive, chain, rreq, reporter, remapper)
            store.set_phase(conn, run.run, "rewrite")
        else:
            result = RestoreResult(0, 0, 0, 0.0)
        if remapper.left_out:
            reporter.note(f"resumed: {plural(remapper.left_out, 'LO')} restored already, kept")
        named = {(c.relid, c.column) for c in cols}
        found = [c for c in discover.columns(conn, tables, run.run, reporter)
                 if (c.relid, c.column) not in named]  # fmt: skip
        columns.rewrite_all(conn, run.run, cols + found, reporter)
        store.set_phase(conn, run.run, "post-data" if req.full else "done")
        return result

    if req.full:
        if req.resume and run.phase == "begun":
            raise DatabaseError(
                f"the interrupted run {run.run} stopped inside pg_restore's pre-data or data"
                " section, which cannot be resumed: drop the database and start again"
            )
        if not req.resume:
            store.set_phase(conn, run.run, "begun")
        skip: tuple[str, ...] = () if not req.resume else ("pre-data", "data")
        skip += ("post-data",) if run.phase == "done" else ()
        result = restore_full(
            conninfo, top, req, req.jobs, reporter, los, skip=skip,
            after=restored,
        )  # fmt: skip
    else:
        result = los()
    store.finish(conn, run.run)
    return result


def _los(
    conninfo: str, archive: str, chain: Chain, req: RestoreRequest, reporter: Reporter,
    remapper: Remapper,
) -> RestoreResult:  # fmt: skip
    top = chain.top
    announce(reporter, top)
    metas = top.index.metas.values
    if req.jobs == 1:
        items: Iterator[Item] = chain.items() if chain.incremental else top.items()
        return restore(conninfo, remapper.items(items, Ranks(top.index)), req, reporter,
                       top.index, metas, remapping=remapper)  # fmt: skip
    ranges = job_shares(top, None, req.jobs)
    shares = []
    for lo, hi in ranges:
        if chain.incremental:
            c = chain.reopened()
            shares.append(remapper.items(c.items(lo, hi), Ranks(c.top.index)))
        else:
            d = source.directory(archive)
            shares.append(remapper.items(share_items(d, lo, hi), Ranks(d.index)))
    return restore_jobs(conninfo, shares, req, reporter, top.index, metas, None, remapper)


def _drop_if_empty(conninfo: str, run: str) -> None:
    """After a failure whose clean-up removed what the run made: forget the run, so the
    next attempt starts afresh (its LOs and map rows went in the same transactions)."""
    try:
        with connect(conninfo, autocommit=True, doing="restore") as conn:
            store.drop_if_empty(conn, run)
    except (PgBlobDumpError, psycopg.Error):
        pass  # the run stays: --resume finishes it
