"""``pgblobdump restore``: a packed archive's LOs into a database, and the command that
resumes one."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click

from pgblobdump.cli.options import connection_options, jobs_option, output_options
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.packed.common import ARCHIVE, BASES
from pgblobdump.cli.remapping import refuse_without, remap_options
from pgblobdump.cli.types import PART
from pgblobdump.errors import DamagedData, LosSkipped
from pgblobdump.packed.restore.request import OnConflict, RestoreRequest
from pgblobdump.pg.target import ConnectionTarget, split_password
from pgblobdump.report.summary import summary_table

if TYPE_CHECKING:
    from pgblobdump.remap.run import RemapRequest


@click.command()
@ARCHIVE
@connection_options
@click.option("--no-owner", is_flag=True, help="Create LOs as the connecting role.")
@click.option("--no-acl", is_flag=True, help="Restore no GRANTs.")
@click.option("--no-comments", is_flag=True, help="Restore no comments.")
@click.option(
    "--on-conflict",
    type=click.Choice([c.value for c in OnConflict]),
    default="error",
    show_default=True,
    help="An OID that exists on the target: refuse, or keep it.",
)
@click.option(
    "--resume", is_flag=True, help="Finish an interrupted restore: skip the LOs that exist."
)
@click.option(
    "--skip-damaged",
    is_flag=True,
    help="Restore what is intact of a damaged directory archive; name the LOs skipped"
    " (then exit 14, after the report).",
)
@click.option(
    "--full",
    is_flag=True,
    help="A --full archive: pg_restore's pre-data and data, the LOs, then post-data.",
)
@click.option(
    "--part",
    type=PART,
    metavar="K/N",
    help="Restore share K of N (OID ranges of equal LO counts): N restores at once, one"
    " archive, one database.",
)
@jobs_option(
    "Connections restoring the LOs at once, each a contiguous OID range of a directory"
    " archive (or of its --part); with --full, also pg_restore's jobs for data and post-data."
)
@BASES
@remap_options("Restore", "the archive", "--referenced-by",
               "rows you loaded before the restore")  # fmt: skip
@output_options
def restore(archive: str, target: ConnectionTarget, no_owner: bool, no_acl: bool,
            no_comments: bool, on_conflict: str, resume: bool, skip_damaged: bool,
            full: bool, part: tuple[int, int] | None, jobs: int, bases: tuple[str, ...],
            remap: str | None, oid_range: tuple[int, int] | None,
            referenced_by: tuple[tuple[str, str], ...], map_out: Path | None,
            fmt: Format) -> None:  # fmt: skip
    """Restore a packed archive's LOs: same OIDs, owners, ACLs and comments.

    ARCHIVE is a directory, a stream file, or - for standard input. Batches are sized
    from the server's lock table, so default settings never run out of shared memory.
    On failure or interrupt the LOs this run created are removed; after a kill -9,
    --resume finishes the job.

    Example: pgblobdump dump -d src -o - | pgblobdump restore - -d dst
    """
    from pgblobdump.cli.progress import reporter
    from pgblobdump.packed.restore.archive import restore_archive

    req = RestoreRequest(no_owner, no_acl, no_comments, OnConflict(on_conflict), resume,
                         skip_damaged, full, part, jobs, bases)  # fmt: skip
    refuse_without(remap, (("--oid-range", oid_range), ("--referenced-by", referenced_by),
                           ("--map-out", map_out)))  # fmt: skip
    if remap is not None:
        from pgblobdump.remap.plan import Mode
        from pgblobdump.remap.run import RemapRequest

        remapping = RemapRequest(Mode(remap), oid_range, referenced_by, map_out)
        extra = _remap_args(remapping)
        req = dataclasses.replace(req, resume_command=resume_command(archive, target, req, extra))
        _restore_remapped(archive, target, req, remapping, fmt)
        return
    req = dataclasses.replace(req, resume_command=resume_command(archive, target, req))
    try:
        with reporter("restoring LOs", 0) as rep:
            result = restore_archive(target.conninfo(), archive, req, rep)
    except DamagedData as e:
        raise DamagedData(
            f"{e}; restore --skip-damaged restores the LOs the damage spares and names"
            " those it skips (exit 14)"
        ) from e
    record = dataclasses.asdict(result)
    record["seconds"] = round(result.seconds, 3)
    notes = [result.resumed()] if resume else []
    shown = record | {"damaged_oids": result.damaged_ranges}  # JSON: a list of integers
    emit(summary_table("restored", shown, notes, unless_zero=("redone",)), fmt, record)
    if result.damaged:
        raise LosSkipped(
            f"restored {result.los:,} LOs and skipped {result.damaged:,} of the damaged"
            f" archive (OIDs {_first_ranges(result.damaged_ranges)}); restore those from"
            " another copy"
        )


def _first_ranges(ranges: str, keep: int = 3) -> str:
    """The first ``keep`` of OID ranges ``1..5, 9, 12..20``, and how many more."""
    parts = ranges.split(", ")
    more = len(parts) - keep
    return ", ".join(parts[:keep]) + (f" and {more:,} more ranges" if more > 0 else "")


def _restore_remapped(archive: str, target: ConnectionTarget, req: RestoreRequest,
                      remapping: RemapRequest, fmt: Format) -> None:  # fmt: skip
    from pgblobdump.cli.progress import reporter
    from pgblobdump.remap.run import restore_remapped

    with reporter("restoring LOs", 0) as rep:
        result = restore_remapped(target.conninfo(), archive, req, remapping, rep)
    from pgblobdump.cli.remapping import show_remapped

    show_remapped("restored (remapped)", result, remapping.map_out, fmt)


def _remap_args(r: RemapRequest) -> list[str]:
    """The --remap options of a command that resumes this restore."""
    args = ["--remap", r.mode.value]
    if r.oid_range is not None:
        args += ["--oid-range", f"{r.oid_range[0]}-{r.oid_range[1]}"]
    for table, col in r.referenced_by:
        args += ["--referenced-by", f"{table}.{col}"]
    if r.map_out is not None:
        args += ["--map-out", str(r.map_out)]
    return args


def resume_command(
    archive: str, target: ConnectionTarget, req: RestoreRequest, extra: list[str] | None = None
) -> str:
    """The command that finishes this restore once interrupted: the same archive, target
    and options, with --resume (a password in -d left out: give it as before)."""
    args = ["pgblobdump", "restore", archive]
    for flag, value in (("-d", target.dbname), ("-h", target.host), ("-p", target.port),
                        ("-U", target.user)):  # fmt: skip
        if value is not None:
            if flag == "-d" and ("=" in value or "://" in value):
                value = split_password(value)[0]
            args += [flag, value]
    flags = (("--no-owner", req.no_owner), ("--no-acl", req.no_acl),
             ("--no-comments", req.no_comments), ("--skip-damaged", req.skip_damaged))  # fmt: skip
    args += [flag for flag, on in flags if on]
    if req.part is not None:
        args += ["--part", "/".join(map(str, req.part))]
    if req.jobs > 1 and (not req.full or extra):
        args += ["--jobs", str(req.jobs)]
    if extra:  # --remap: --full is resumed too
        args += ["--full"] if req.full else []
        args += extra
    for base in req.bases:
        args += ["--base", base]
    return shlex.join([*args, "--resume"])
