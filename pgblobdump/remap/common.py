"""What ``restore --remap`` (remap/run.py) and ``copy --remap`` (remap/copy.py) share:
the request and the result, and the steps around the LOs themselves. Before anything is
written: the columns to rewrite resolved and checked, the run found (``--resume``) or its
new OIDs chosen and reserved, the state's schema made, the run entered (``prepare``).
After the LOs: the columns rewritten, each once (``los_then_rewrite``), and what the run
did read back from the mapping (``conclude``); after a failure, an empty run forgotten
(``drop_if_empty``)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from pgblobdump.errors import DatabaseError, PgBlobDumpError, UsageError
from pgblobdump.fileio import check_writable, refuse_input
from pgblobdump.packed.restore.request import OnConflict, RestoreResult
from pgblobdump.pg.connect import connect
from pgblobdump.pg.failure import as_error, with_more
from pgblobdump.refs import rewrite
from pgblobdump.remap import columns, store
from pgblobdump.remap.plan import Assignment, Mode, Ranking, choose, claim
from pgblobdump.remap.translate import Remapper
from pgblobdump.report.reporter import Reporter
from pgblobdump.units import plural


@dataclass(frozen=True)
class RemapRequest:
    """``mode``: which LOs get new OIDs; ``oid_range``: where the new OIDs come from
    (None: just above every LO); ``referenced_by``: (table, column) of the target whose
    rows the user loaded and whose references are rewritten (restore's --referenced-by,
    copy's --rewrite); ``map_out``: where to write the mapping as CSV."""

    mode: Mode = Mode.TAKEN
    oid_range: tuple[int, int] | None = None
    referenced_by: tuple[tuple[str, str], ...] = ()
    map_out: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode(self.mode))


def refuse_companions(part: object, on_conflict: OnConflict, whole: str, verb: str) -> None:
    """What --remap does not go with, for restore and copy alike: ``--part`` (one run
    chooses the new OIDs of the ``whole`` archive or selection; ``verb``: restores,
    copies) and ``--on-conflict skip``."""
    if part is not None:
        raise UsageError(
            f"--remap chooses the new OIDs of the whole {whole} in one run; --part {verb} a"
            " share of it (use --jobs N for N connections)"
        )
    if on_conflict is OnConflict.SKIP:
        raise UsageError(
            "--remap gives the LOs whose OID is taken new OIDs; --on-conflict skip would keep"
            " the target's instead: give one of them"
        )


def check_map_out(remap: RemapRequest, *inputs: Path) -> None:
    """``--map-out`` refused before anything is written when it lies in one of ``inputs``
    (the archive) or cannot be written: it is written once the run is finished."""
    if remap.map_out is not None:
        if str(remap.map_out) == "-":
            raise UsageError("--map-out - would mix the mapping into the summary: give a file")
        refuse_input(remap.map_out, *inputs, option="--map-out")
        check_writable(remap.map_out)


@dataclass(frozen=True)
class RemapResult:
    """What a remapped restore or copy did: the LOs (``restored``), the run kept in the
    target, its mapping as ``[old_first, old_last, new_first]`` runs, and each column
    rewritten."""

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


@dataclass(frozen=True)
class Subject:
    """What a run remaps, for the run's row and messages: ``label`` as the user named it
    (an archive's path, a source database), ``key`` what tells it apart across runs (an
    archive's manifest checksum; a source and its selection), ``what`` the command
    (``restore``, ``copy``), ``whose`` the LOs' owner in messages (``the archive``),
    ``option`` the option naming the columns to rewrite."""

    label: str
    key: str
    what: str
    whose: str
    option: str
    direction: str = "of"  # "restore of ARCHIVE", "copy from SOURCE"

    @property
    def named(self) -> str:
        return f"--remap {self.what} {self.direction} {self.label}"


def prepare(
    conn: psycopg.Connection, subject: Subject, remap: RemapRequest, resume: bool,
    ranks: Ranking, taken: Callable[[], Any], reporter: Reporter,
    extra: dict[str, Any] | None = None,
) -> tuple[store.Run, Assignment, list[rewrite.RewriteColumn]]:  # fmt: skip
    """Everything before the first LO is written (the module's docstring), every refusal
    first, the state's schema included. ``taken``: the subject's OIDs the target has
    (called for ``--remap taken`` only); ``extra``: what the plan also keeps and a
    resumed run must find the same (else refused)."""
    cols = [rewrite.resolve(conn, t, c, f"{subject.option} {t}.{c}")
            for t, c in remap.referenced_by]  # fmt: skip
    named = sorted(c.qualified for c in cols)
    run, a = _begin(conn, subject, remap, resume, ranks, taken, extra or {}, named)
    if a.count:
        for col in cols:
            rewrite.check_fits(conn, col, a.last)
    store.ensure(conn)
    if resume:
        claim(conn, a)
    else:
        store.start(conn, run)
        _note_plan(reporter, a, ranks.count, subject.whose)
    return run, a, cols


def _begin(
    conn: psycopg.Connection, subject: Subject, remap: RemapRequest, resume: bool,
    ranks: Ranking, taken: Callable[[], Any], extra: dict[str, Any], named: list[str],
) -> tuple[store.Run, Assignment]:  # fmt: skip
    """The run and its new OIDs: an interrupted one's (``--resume``), or a new one's,
    chosen and reserved (not yet entered). ``named``: the columns the run rewrites, kept
    in its plan: a resumed run rewrites the first one's, no other (else refused)."""
    earlier = store.unfinished(conn, subject.key) if store.exists(conn) else []
    if resume:
        if not earlier:
            raise UsageError(
                f"nothing to resume: no interrupted {subject.named} into this database"
                " (run it without --resume)"
            )
        run = earlier[-1]
        if not store.hold(conn, run.run):
            raise _going(subject, run.run)
        if run.mode != remap.mode.value:
            raise UsageError(
                f"the interrupted run {run.run} was --remap {run.mode}; resume it with that"
            )
        then = run.plan.get("columns", named)
        if then != named:
            raise UsageError(
                f"the interrupted run {run.run} rewrites {', '.join(then) or 'no column'};"
                f" resume it with the same {subject.option} (given: {', '.join(named) or 'none'})"
            )
        for k, now in extra.items():
            if run.plan.get(k) != now:
                raise DatabaseError(
                    f"{subject.whose} changed since the interrupted run {run.run} ({k}:"
                    f" {run.plan.get(k)} then, {now} now): its new OIDs were chosen for"
                    f" what {subject.whose} held then, so it cannot be finished"
                )
        return run, Assignment.from_plan(run.mode, run.plan)
    if earlier:
        if store.in_progress(conn, earlier[-1].run):
            raise _going(subject, earlier[-1].run)
        left, _ = store.counts(conn, earlier[-1].run)
        raise DatabaseError(
            f"an interrupted {subject.named} into this database (run"
            f" {earlier[-1].run}) left {plural(left, 'LO')}; add --resume to finish it"
        )
    a = choose(conn, remap.mode, ranks, taken() if remap.mode is Mode.TAKEN else None,
               remap.oid_range)  # fmt: skip
    name = time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    plan = a.to_plan() | extra | {"columns": named}
    run = store.Run(name, subject.label, subject.key, remap.mode.value, plan)
    store.hold(conn, run.run)
    return run, a


def _going(subject: Subject, run: str) -> DatabaseError:
    return DatabaseError(
        f"a {subject.named} into this database is in progress (run {run}): let it finish"
        " (or stop it) first"
    )


def _note_plan(reporter: Reporter, a: Assignment, total: int, whose: str) -> None:
    if not a.count:
        reporter.note(f"no OID of {whose}'s {plural(total, 'LO')} is taken: all keep theirs")
    else:
        reporter.note(
            f"{plural(a.count, 'LO')} of {total:,} get new OIDs {a.first}..{a.last}"
            + (" (their OIDs are taken)" if a.mode is Mode.TAKEN else "")
        )


def los_then_rewrite(
    conn: psycopg.Connection, run: store.Run, remapper: Remapper,
    cols: list[rewrite.RewriteColumn], reporter: Reporter, los: Callable[[], RestoreResult],
    then: str = "done", found: Callable[[], list[rewrite.RewriteColumn]] | None = None,
) -> RestoreResult:  # fmt: skip
    """The LOs (``los``, unless a resumed run is past them), then the columns (``cols``,
    and those ``found`` once the LOs are in: restore --full's); the run's phase set to
    ``then``."""
    if run.phase in ("los", "begun"):
        result = los()
        store.set_phase(conn, run.run, "rewrite")
    else:
        result = RestoreResult(0, 0, 0, 0.0)
    if remapper.left_out:
        reporter.note(f"resumed: {plural(remapper.left_out, 'LO')} written already, kept")
    more = found() if found is not None else []
    columns.rewrite_all(conn, run.run, cols + more, reporter)
    store.set_phase(conn, run.run, then)
    return result


def conclude(
    conn: psycopg.Connection, run: store.Run, a: Assignment, remap: RemapRequest,
    result: RestoreResult, resumed: bool,
) -> RemapResult:  # fmt: skip
    """A finished run's mapping read back (and written to ``--map-out``)."""
    if remap.map_out is not None:
        store.write_csv(conn, run.run, remap.map_out)
    segments = store.segments(conn, run.run)  # every pair once: the counts too
    los = sum(b - a + 1 for a, b, _ in segments)
    remapped = sum(b - a + 1 for a, b, n in segments if n != a)
    rewrites = list(store.rewritten(conn, run.run).values())
    block = (a.first, a.last) if a.count else None
    return RemapResult(result, run.run, a.mode.value, los, remapped, block, segments,
                       rewrites, resumed)  # fmt: skip


def drop_if_empty(conninfo: str, run: str, what: str) -> str:
    """After a failure whose clean-up removed what the run made: forget the run, so the
    next attempt starts afresh (its LOs and map rows went in the same transactions).
    Returns what is left when the run stays (its LOs committed, or columns rewritten:
    a failure after the LOs), for the error to name; empty when nothing is."""
    resume = "run the same command with --resume to finish it"
    try:
        with connect(conninfo, autocommit=True, doing=what) as conn:
            if store.drop_if_empty(conn, run):
                return ""
            los, _ = store.counts(conn, run)
            cols = len(store.rewritten(conn, run))
    except (PgBlobDumpError, psycopg.Error):
        return f"run {run} may be left in the target (schema {store.SCHEMA}): {resume}"
    return (
        f"run {run} is left in the target with {plural(los, 'LO')} at their new OIDs and"
        f" {plural(cols, 'column')} rewritten (schema {store.SCHEMA}): {resume}"
    )


def failed(e: BaseException, conninfo: str, run: str, what: str) -> BaseException:
    """What a failed run raises: ``e``, with the run it left named (``drop_if_empty``)."""
    left = drop_if_empty(conninfo, run, what)
    if not left:
        return e
    return with_more(as_error(e, what, lambda oid: f"LO {oid} exists in the target"), left)
