"""``migrate run``: which run a command takes up (a new one, the one under way, or a
finished one whose ``--unlink`` is still pending), with which options when it resumes,
and what it reports; ``runner.Runner`` moves the column through its phases."""

from __future__ import annotations

import dataclasses
import time

import psycopg

from pgblobdump.errors import UsageError
from pgblobdump.migrate import columns, finish, state
from pgblobdump.migrate.columns import Column
from pgblobdump.migrate.locking import LockClock
from pgblobdump.migrate.options import RunOptions, RunResult
from pgblobdump.migrate.runner import Runner
from pgblobdump.migrate.start import start
from pgblobdump.migrate.state import Migration
from pgblobdump.report.reporter import QUIET, Reporter


def under_way(conn: psycopg.Connection, spec: str, schema: str) -> tuple[Column, Migration | None]:
    """The column ``spec`` names (``[schema.]table.column``) and its migration under way,
    if any; the state schema is made first where it is missing."""
    state.ensure(conn, schema)
    col = columns.resolve(conn, spec)
    return col, state.active(conn, schema, col.relid, col.name)


def _reconcile(
    conn: psycopg.Connection, opts: RunOptions, mig: Migration, reporter: Reporter
) -> None:
    """The options of a resumed run. Before the switch nothing they govern has happened,
    so --missing, --keep-old and --allow-acl-widening take the new values (said in a
    note); from the switch on, what the run was asked to keep and unlink is settled, and
    another value is refused by name. The new column's storage is settled at the start."""
    for name, given, had in (
        ("--storage", opts.storage, mig.storage), ("--compression", opts.compression,
                                                   mig.compression),
    ):  # fmt: skip
        if given is not None and had is not None and given.upper() != had.upper():
            raise UsageError(
                f"run {mig.id} made its new column with {name} {had.lower()}: resume it"
                f" with that, or `migrate abort` it first"
            )
    keep_old = opts.keep_old or opts.missing == "skip"
    if mig.phase in ("filling", "verifying"):
        wanted = {
            "missing": opts.missing, "keep_old": keep_old,
            "allow_widening": opts.allow_acl_widening,
        }  # fmt: skip
        changed = {k: v for k, v in wanted.items() if getattr(mig, k) != v}
        if changed:
            state.update(conn, opts.schema, mig.id, **changed)
            said = ", ".join(f"{k.replace('_', ' ')} {getattr(mig, k)} -> {v}"
                             for k, v in changed.items())  # fmt: skip
            reporter.note(f"run {mig.id} goes on with new options: {said}")
            for k, v in changed.items():
                setattr(mig, k, v)
        return
    differ = []
    if keep_old != mig.keep_old:
        differ.append("--keep-old" if mig.keep_old else "no --keep-old")
    if mig.phase == "finishing" and opts.unlink != mig.unlink:
        differ.append("--unlink" if mig.unlink else "no --unlink")
    if differ:
        raise UsageError(
            f"run {mig.id} switched with {' and '.join(differ)}, and finishing goes by that:"
            f" run the same command again with {' and '.join(differ)}"
        )


def _from_objects(
    conn: psycopg.Connection, col: Column, mig: Migration | None, opts: RunOptions
) -> RunOptions:
    """``--to lo`` of a text column of object keys is ``s3lo``: from the place ``--from``
    names, or the one the run that made the column wrote to (its state says so)."""
    if opts.to != "lo" or col.form.name == "oid" or col.base_type == "bytea":
        return opts
    if mig is not None and mig.direction == "s3lo":
        return dataclasses.replace(opts, to="s3lo", store=opts.store or mig.target, url=mig.url)
    store, url = opts.store, False
    if store is None:
        # the last run that made the column (a `--to lo` run aborted since does not count)
        made = [m for m in state.every(conn, opts.schema) if m.relid == col.relid
                and m.column_name == col.name and m.phase != "aborted"]  # fmt: skip
        last = made[-1] if made else None
        if last is None or last.direction != "s3" or last.phase != "done":
            raise UsageError(
                f"{col.qualified} is {col.type} and no `migrate run --to s3://` made it: name"
                " the objects' place with --from s3://bucket/prefix to read its keys back"
            )
        store, url = last.target, last.url
    return dataclasses.replace(opts, to="s3lo", store=store, url=url)


def run(
    conn: psycopg.Connection, spec: str, opts: RunOptions, reporter: Reporter = QUIET
) -> RunResult:
    """Start, resume or finish the migration of ``spec`` (``[schema.]table.column``)."""
    t0 = time.monotonic()
    col, mig = under_way(conn, spec, opts.schema)
    opts = _from_objects(conn, col, mig, opts)
    resumed = mig is not None
    clock = LockClock()
    if mig is None:
        last = state.latest(conn, opts.schema, col.relid, col.name)
        if (
            last is not None
            and last.phase == "done"
            and opts.unlink
            and finish.pending(conn, opts.schema, last.id)
        ):
            mig = last
            state.update(conn, opts.schema, mig.id, phase="finishing")
            mig.phase = "finishing"
            resumed = True
        else:
            mig = start(conn, col, opts, reporter, clock)
    elif mig.direction != opts.to:
        shown = {"s3": mig.target, "s3lo": "lo"}.get(mig.direction, mig.direction)
        raise UsageError(
            f"a migration of {col.qualified} to {mig.direction} is under way (run {mig.id}):"
            f" resume it with --to {shown}, or `migrate abort` it"
        )
    elif mig.direction in ("s3", "s3lo") and (
        mig.target != opts.store or (mig.direction == "s3" and mig.url != opts.url)
    ):
        url = " --url" if mig.url and mig.direction == "s3" else ""
        raise UsageError(
            f"run {mig.id} of {col.qualified} moves its LOs to or from {mig.target}{url}:"
            " resume it with that, or `migrate abort` it"
        )
    else:
        reporter.note(f"resuming run {mig.id} of {col.qualified} at {mig.phase}")
        _reconcile(conn, opts, mig, reporter)
    if mig.phase in ("filling", "verifying") and col.name != mig.column_name:
        raise UsageError(f"run {mig.id} was on column {mig.column_name}")
    with state.claimed(conn, mig.id, held=not resumed):
        mig = state.load(conn, opts.schema, mig.id)  # as the last session to hold it left it
        # Before the switch this is the old column (NOT NULL, comment, grants to carry over).
        column = columns.describe(conn, col.relid, mig.column_name)
        runner = Runner(conn, column, mig, opts, reporter)
        try:
            runner.drive()
        except KeyboardInterrupt:
            reporter.note(f"interrupted: run the same command again to resume run {mig.id}")
            raise
    final = runner.mig
    return RunResult(
        run_id=final.id, column=col.qualified, direction=final.direction, phase=final.phase,
        resumed=resumed, rows=final.rows_total, recopied=runner.recopied,
        unlinked=final.unlinked, kept_referenced=runner.kept_referenced,
        lock_ms=max(final.lock_ms, runner.clock.longest_ms, clock.longest_ms),
        seconds=time.monotonic() - t0, storage=final.storage, compression=final.compression,
        notes=runner.notes,
    )  # fmt: skip
