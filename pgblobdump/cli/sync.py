"""``pgblobdump copy`` and ``sync``: LOs from one live database into another, no archive
between; sync again and again for the weeks before a cut-over."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pgblobdump.cli.options import (
    ONLY_OIDS,
    REFERENCED_BY,
    F,
    connection_options,
    detect_option,
    jobs_option,
    output_options,
)
from pgblobdump.cli.output import Format, emit, write_listing
from pgblobdump.cli.progress import reporter
from pgblobdump.cli.remapping import refuse_without, remap_options
from pgblobdump.cli.types import PART
from pgblobdump.errors import SyncConflict, UsageError
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report import Table
from pgblobdump.report.summary import summary_table
from pgblobdump.units import plural

if TYPE_CHECKING:
    from pgblobdump.sync.copy import CopyRequest


def target_of(src: ConnectionTarget, to: ConnectionTarget) -> ConnectionTarget:
    """The target: ``--target-*`` as given, its host, port and user the source's where
    left out (one server, two databases: ``--target-dbname`` alone)."""
    if not to.given:
        raise UsageError("name the target database: --target-dbname DBNAME|CONNSTR")
    full = to.dbname is not None and ("=" in to.dbname or "://" in to.dbname)
    if full:
        return to
    from psycopg import conninfo as pgconninfo

    # The source as libpq will read it (from -d's string as much as from -h/-p/-U): a
    # bare --target-dbname is a database on that same server, never on libpq's default.
    params = {k: str(v) for k, v in pgconninfo.conninfo_to_dict(src.conninfo()).items()
              if v is not None and k != "dbname"}  # fmt: skip
    if to.host is not None or to.port is not None:
        params.pop("password", None)  # another server: the source's password stays home
    for key, value in (("host", to.host), ("port", to.port), ("user", to.user)):
        if value is not None:
            params[key] = value
    return ConnectionTarget(pgconninfo.make_conninfo(dbname=to.dbname, **params))


def result_table(title: str, record: dict[str, Any]) -> Table:
    return summary_table(title, record)


TARGET: Callable[[F], F] = connection_options(prefix="target", dest="to")
"""``--target-dbname --target-host --target-port --target-username``: the second server."""


def source_changed_option(verb: str, why: str) -> Callable[[F], F]:
    """``--source-changed``, worded alike for copy and sync."""
    return click.option(
        "--source-changed",
        is_flag=True,
        help="-d is not the database the last copy or sync read, on purpose (an upgraded or"
        f" restored source): {verb} from it all the same (else refused, since {why}).",
    )


@click.command("copy")
@connection_options
@TARGET
@ONLY_OIDS
@REFERENCED_BY
@jobs_option("Connections per side, each a contiguous OID range of one source snapshot.")
@click.option(
    "--on-conflict",
    type=click.Choice(["error", "skip"]),  # packed.request.OnConflict's values
    default="error",
    show_default=True,
    help="An OID that exists on the target and that no copy made: refuse, or keep it.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Finish an interrupted copy (running it again does the same: the LOs an earlier"
    " copy made are kept).",
)
@click.option(
    "--part",
    type=PART,
    metavar="K/N",
    help="Copy share K of N of the LOs (OID ranges of equal counts): N copies at once.",
)
@source_changed_option(
    "copy", "a sync from either would remove and overwrite what was copied from the other"
)
@remap_options("Copy", "the selection", "--rewrite", "rows you loaded before the copy;"
               " --referenced-by selects LOs on the source")  # fmt: skip
@output_options
def copy_cmd(target: ConnectionTarget, to: ConnectionTarget, oids: tuple[int, int],
             referenced_by: tuple[tuple[str, str], ...], jobs: int, on_conflict: str,
             resume: bool, part: tuple[int, int] | None, source_changed: bool,
             remap: str | None, oid_range: tuple[int, int] | None,
             rewrite: tuple[tuple[str, str], ...], map_out: Path | None,
             fmt: Format) -> None:  # fmt: skip
    """Copy large objects from the database -d into the one --target-dbname names:
    same OIDs, owners, ACLs and comments, from one snapshot of the source, streamed
    over --jobs connections per side, nothing written to disk.

    The target's --target-host, --target-port and --target-username default to the
    source's. An OID that exists on the target is refused before anything is written
    (--on-conflict skip keeps it). On failure or interrupt the LOs this run made are
    removed; after a kill -9, running the copy again finishes it: which LOs a copy made
    is kept in the target, in schema pgblobdump_sync (sync --forget drops it). A source
    other than the database earlier copies and syncs into the target read (a typo in -d,
    the wrong port) is refused before anything is written, unless --source-changed says
    it is on purpose.

    --remap copies the LOs whose OID the target has (or all of them) at new OIDs, one
    block reserved just above every LO (or --oid-range), and rewrites the references in
    the target's columns named by --rewrite TABLE.COLUMN (--referenced-by selects LOs on
    the source, as without --remap). Each LO's mapping commits with it, in schema
    pgblobdump_remap; after a kill -9, --resume finishes the run, provided the
    selection is unchanged. A remapped copy enters nothing in the sync state: a later
    sync cannot follow LOs at other OIDs than the source's.

    Example: pgblobdump copy -d olddb --target-dbname newdb --target-port 5433 --jobs 2
    """
    from pgblobdump.packed.restore.request import OnConflict
    from pgblobdump.pg.lostream import Selection
    from pgblobdump.sync.copy import CopyRequest
    from pgblobdump.sync.copy import copy as run_copy

    req = CopyRequest(Selection(*oids, referenced_by), jobs, OnConflict(on_conflict), resume,
                      part, source_changed)  # fmt: skip
    dst = target_of(target, to)
    refuse_without(remap, (("--oid-range", oid_range), ("--rewrite", rewrite),
                           ("--map-out", map_out)))  # fmt: skip
    if remap is not None:
        _copy_remapped(target.conninfo(), dst.conninfo(), req, remap, oid_range, rewrite,
                       map_out, fmt)  # fmt: skip
        return
    with reporter("copying LOs", 0) as rep:
        result = run_copy(target.conninfo(), dst.conninfo(), req, rep)
    record: dict[str, Any] = dataclasses.asdict(result)
    record["seconds"] = round(result.seconds, 3)
    emit(result_table("copied", record), fmt, record)


def _copy_remapped(src: str, dst: str, req: CopyRequest, remap: str,
                   oid_range: tuple[int, int] | None, rewrite: tuple[tuple[str, str], ...],
                   map_out: Path | None, fmt: Format) -> None:  # fmt: skip
    from pgblobdump.cli.remapping import show_remapped
    from pgblobdump.remap.common import RemapRequest
    from pgblobdump.remap.copy import copy_remapped
    from pgblobdump.remap.plan import Mode

    remapping = RemapRequest(Mode(remap), oid_range, rewrite, map_out)
    with reporter("copying LOs", 0) as rep:
        result = copy_remapped(src, dst, req, remapping, rep)
    show_remapped("copied (remapped)", result, map_out, fmt)


@click.command("sync")
@connection_options
@TARGET
@ONLY_OIDS
@REFERENCED_BY
@jobs_option("Connections per side copying what changed.")
@click.option(
    "--delete",
    is_flag=True,
    help="Remove LOs gone from the source (only those a copy or sync made).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Overwrite LOs whose bytes or comment changed on the target since a copy or sync"
    " made them, and copy again those unlinked there (never one given another owner or ACL"
    " there, or made again there).",
)
@source_changed_option("sync", "it would remove and overwrite what was copied from the other")
@click.option("--dry-run", is_flag=True, help="List what would be done; change nothing.")
@detect_option("From transaction ids")
@click.option(
    "--watch",
    type=click.IntRange(min=1),
    metavar="SECONDS",
    help="Sync again every SECONDS until interrupted.",
)
@click.option(
    "--forget", is_flag=True, help="Drop the target's sync state (schema pgblobdump_sync) and stop."
)
@output_options
def sync_cmd(target: ConnectionTarget, to: ConnectionTarget, oids: tuple[int, int],
             referenced_by: tuple[tuple[str, str], ...], jobs: int, delete: bool, force: bool,
             source_changed: bool, dry_run: bool, detect: str, watch: int | None,
             forget: bool, fmt: Format) -> None:  # fmt: skip
    """Bring the LOs of --target-dbname to equal those of -d as of one source snapshot,
    with work in proportion to what changed: new LOs copied; LOs written, appended,
    truncated, unlinked and made again, or given another owner, ACL or comment since
    the last copy or sync, copied again; LOs gone from the source listed (--delete
    removes those a copy or sync made). An LO changed on the target since it was
    copied is a conflict: kept, unless --force overwrites it (only one whose bytes or
    comment changed: one given another owner or ACL on the target, or unlinked and made
    again there, is always kept); so is one unlinked on the target ("deleted on the
    target": not made again unless --force) (exit 4 when any is left).

    Changes are found from the source's transaction ids since the snapshot the last
    copy or sync read (kept in the target, schema pgblobdump_sync); when that cannot be
    exact (no state, a role that may not read pg_largeobject), per-LO digests are
    computed on each server instead, and the run says so. A source other than the
    database the last copy or sync read (a typo in -d, the wrong port) is refused before
    anything is written, unless --source-changed says it is on purpose. With
    --referenced-by they always are (an LO newly referenced leaves no trace in the
    LOs' transaction ids), and an LO of ours that is no longer referenced is gone
    (listed, deleted with --delete) only when the source has no LO of that OID at all.

    Example: pgblobdump sync -d olddb --target-dbname newdb --target-port 5433 --watch 60
    """
    from pgblobdump.pg.lostream import Selection
    from pgblobdump.sync.run import SyncRequest, sync
    from pgblobdump.sync.state import forget as drop_state

    dst = target_of(target, to)
    if forget:
        from pgblobdump.pg.connect import connect

        with connect(dst.conninfo(), doing="sync --forget") as conn:
            dropped = drop_state(conn)
        click.echo("dropped schema pgblobdump_sync" if dropped else "no sync state to drop",
                   err=True)  # fmt: skip
        return
    if watch is not None and dry_run:
        raise UsageError("--watch and --dry-run do not go together")
    req = SyncRequest(Selection(*oids, referenced_by), jobs, delete, force, dry_run,
                      source_changed, detect)  # fmt: skip
    runs = 0
    while True:
        with reporter("syncing LOs", 0) as rep:
            result = sync(target.conninfo(), dst.conninfo(), req, rep)
        runs += 1
        conflicts = len(result.plan.conflicts)
        if dry_run:
            rows = result.plan.rows(delete)
            # aligned on a terminal, as every listing; tab-separated into a pipe or file
            write_listing(fmt, ["oid", "action", "detail"], rows, numeric=["oid"])
            click.echo(f"sync would {sentence(result.record(), True, delete)}", err=True)
            return
        if watch is None:
            record = result.record()
            emit(result_table("synced", record), fmt, record)
            if conflicts:
                raise SyncConflict(
                    f"{conflicts:,} LOs in conflict left as they are (the first: LO"
                    f" {result.plan.conflicts[0].oid}, {result.plan.conflicts[0].why});"
                    " sync --dry-run lists them, --force overwrites those whose bytes or"
                    " comment changed there and copies again those deleted there"
                )
            return
        click.echo(f"sync {runs}: {sentence(result.record(), False, delete)}", err=True)
        time.sleep(watch)


def sentence(record: dict[str, Any], would: bool, delete: bool) -> str:
    """A sync's counts as one sentence after ``sync would`` (``would``) or ``sync 3:``:
    ``copy 1 new LO and 10 changed; 1 LO gone from the source, deleted; 8,000 equal
    already (0.26 s; changes found by transaction ids since 759:759)``."""
    new, rewrite, gone = record["new"], record["rewrite"], record["gone"]
    copies = [plural(new, "new LO")] if new else []
    copies += [f"{rewrite:,} changed"] if rewrite else []
    copied = " and ".join(copies) if copies else "nothing"
    parts = [f"copy {copied}" if would else f"copied {copied}"]
    if record["deleted_on_target"]:
        parts.append(f"{plural(record['deleted_on_target'], 'LO')} deleted on the target")
    if gone:
        fate = ("deleted" if would else f"{record['deleted']:,} deleted") if delete else (
            f"kept (--delete removes {'it' if gone == 1 else 'them'})")  # fmt: skip
        parts.append(f"{plural(gone, 'LO')} gone from the source, {fate}")
    if record["conflicts"]:
        parts.append(f"{plural(record['conflicts'], 'LO')} in conflict, left as they are")
    parts.append(f"{record['equal']:,} equal already")
    return "; ".join(parts) + (f" ({record['seconds']:,.2f} s;"
                               f" changes found by {record['method']})")  # fmt: skip
