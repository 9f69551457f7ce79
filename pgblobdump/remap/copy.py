"""``copy --remap taken|all``: the selected LOs of a source database into a target whose
OIDs are taken, at new OIDs, and the target's references to them rewritten.

As ``restore --remap`` (remap/run.py, the steps both take in remap/common.py), the
source's selected OIDs, read once under the snapshot the jobs share, playing the
archive index's part (plan.OidRanks, 4 bytes an LO):

1. Before anything is written: the columns to rewrite (``--rewrite TABLE.COLUMN``, of
   the target: copy's own ``--referenced-by`` selects LOs on the source) resolved and
   checked; the selected OIDs the target has found (``taken``); the block of new OIDs
   chosen and reserved; the run entered in ``pgblobdump_remap.runs``, keyed by the
   source (its system identifier, else its connection string without password, and its
   database) and the selection.
2. The LOs, over ``--jobs`` connections per side (sync/jobs.py), at their new OIDs, each
   batch's mapping in its own transaction.
3. The references: each column in one transaction with its journal row.

A remapped copy enters nothing in sync's state (schema pgblobdump_sync): its LOs are
not at the source's OIDs, so a later ``sync`` cannot follow them; sync the tenant into
a database of its own instead. After a kill -9, the same command with ``--resume``
finds the run by source and selection and finishes it, provided the selected OIDs are
still the same (their count and digest are kept in the plan).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import time
from array import array
from collections.abc import Iterator

import psycopg

from pgblobdump.errors import PgBlobDumpError, UsageError
from pgblobdump.packed.read.items import Item
from pgblobdump.packed.restore.request import RestoreRequest, RestoreResult
from pgblobdump.pg import snapshot as snap
from pgblobdump.pg.connect import describe, sql_errors
from pgblobdump.pg.lostream import Selection, Side
from pgblobdump.remap import common, store
from pgblobdump.remap.common import RemapRequest, RemapResult
from pgblobdump.remap.plan import OIDS, OidRanks, taken_in
from pgblobdump.remap.translate import Remapper
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.sync import feed, source, state
from pgblobdump.sync.copy import CopyRequest
from pgblobdump.sync.jobs import Feed, run_jobs


def check(req: CopyRequest) -> None:
    """What copy --remap does not go with."""
    common.refuse_companions(req.part, req.on_conflict, "selection", "copies")
    if req.source_changed:
        raise UsageError(
            "--source-changed is about the source later syncs follow; a remapped copy enters"
            " no sync state: leave it out"
        )


def selected(conn: psycopg.Connection, sels: list[Selection]) -> array[int]:
    """The selected OIDs of the source, ascending, as 4-byte unsigned integers."""
    oids: array[int] = array(OIDS)
    for window in source.oid_windows(conn, sels):
        oids.extend(window)
    return oids


def fingerprint(oids: array[int]) -> dict[str, object]:
    """What a resumed run checks the selection by: its count and its OIDs' digest."""
    return {"count": len(oids), "sha256": hashlib.sha256(oids.tobytes()).hexdigest()}


def subject_of(conn: psycopg.Connection, src: str, sel: Selection) -> common.Subject:
    """The run's identity: the source database and the selection."""
    ident = source.identity(conn)
    where = ident.system or describe(src)
    key = json.dumps(["copy", where, ident.name, state.key_of(sel)])
    return common.Subject(describe(src), key, "copy", "the source's selection", "--rewrite",
                          direction="from")  # fmt: skip


def _items(conn: psycopg.Connection, sel: Selection, remapper: Remapper, ranks: OidRanks,
           side: Side | None = None) -> Iterator[Item]:  # fmt: skip
    return remapper.items(feed.items(conn, sel, side), ranks)


def copy_remapped(
    src: str, dst: str, req: CopyRequest, remap: RemapRequest, reporter: Reporter = QUIET
) -> RemapResult:
    """Copy the LOs ``req`` selects from the database at ``src`` into the one at ``dst``
    at new OIDs, as ``remap`` says; see the module's docstring."""
    check(req)
    common.check_map_out(remap)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        leader, main, sel = source.open_pair(stack, src, dst, "copy", req.selection)
        snapshot = snap.export(leader)
        ranges = snap.shares(leader, sel, None, req.jobs)
        oids = selected(leader, ranges)
        ranks = OidRanks(oids)
        subject = subject_of(leader, src, sel)
        reporter.task("copying LOs", len(oids))
        source.check_roles(leader, main, ranges)
        # every refusal before anything is written, the state's schema included
        run, a, cols = common.prepare(main, subject, remap, req.resume, ranks,
                                      lambda: taken_in(main, oids), reporter,
                                      {"selected": fingerprint(oids)})  # fmt: skip
        done = store.done_olds(main, run.run) if req.resume else []
        remapper = Remapper(run.run, a, done)
        rreq = RestoreRequest(jobs=len(ranges))

        def los() -> RestoreResult:
            feeds: list[Feed] = [functools.partial(_items, sel=s, remapper=remapper,
                                                   ranks=ranks) for s in ranges]  # fmt: skip
            made = run_jobs(src, dst, snapshot, feeds, rreq, reporter, stack,
                            remapping=remapper)  # fmt: skip
            return RestoreResult(made.los, made.bytes, made.skipped, 0.0)

        try:
            result = common.los_then_rewrite(main, run, remapper, cols, reporter, los)
            store.finish(main, run.run)
        except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt) as e:
            raise common.failed(e, dst, run.run, "copy") from None
        with sql_errors("copy: on the source", describe(src)):
            leader.execute("COMMIT")
        result = dataclasses.replace(result, seconds=time.perf_counter() - t0)
        return common.conclude(main, run, a, remap, result, req.resume)
