"""``pgblobdump dump | restore | verify | ls | cat``: the packed LO archive."""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pgblobdump import storage as places
from pgblobdump.cli.completion import complete_major
from pgblobdump.cli.options import F, connection_options, output_options
from pgblobdump.cli.output import Format, emit, write_listing
from pgblobdump.cli.pipes import silence_stdout, text_for_terminal
from pgblobdump.cli.types import COLUMN, OID, OIDS, PART, SIZE
from pgblobdump.errors import (
    CorruptArchive,
    DamagedData,
    FileError,
    LosSkipped,
    NotAnArchive,
    PgBlobDumpError,
    UsageError,
)
from pgblobdump.fileio import refuse_input, write_atomically
from pgblobdump.packed.format import DEFAULT_VOLUME_SIZE, ZSTD_LEVEL
from pgblobdump.packed.request import OnConflict, RestoreRequest
from pgblobdump.pg.target import ConnectionTarget, split_password
from pgblobdump.report import Table, stream
from pgblobdump.report.summary import summary_table
from pgblobdump.report.table import record_table
from pgblobdump.storage import Storage
from pgblobdump.units import format_bytes, plural

if TYPE_CHECKING:  # the core is imported by a run, not by --help
    from pgblobdump.packed.verify import ArchiveCheck

ARCHIVE = click.argument("archive", metavar="ARCHIVE")
VOLUME_SIZE = click.option(
    "--volume-size",
    type=SIZE,
    default=format_bytes(DEFAULT_VOLUME_SIZE).replace(" ", ""),
    show_default=True,
    help="Start a new data volume past this size.",
)
LEVEL = click.option(
    "--level", type=int, default=ZSTD_LEVEL, show_default=True,
    help="zstd level, 0 to store uncompressed.",
)  # fmt: skip


def jobs_option(text: str) -> Callable[[F], F]:
    """``-j/--jobs N`` (default 1); the request checks its range and what it goes with."""
    return click.option("-j", "--jobs", type=int, default=1, show_default=True, help=text)


def pg_dump_major_option(text: str) -> Callable[[F], F]:
    """``--pg-dump-major MAJOR``: which pg_dump's archive (dump --full, unpack)."""
    return click.option("--pg-dump-major", type=int, metavar="MAJOR", help=text,
                        shell_complete=complete_major)  # fmt: skip


BASES = click.option(
    "--base",
    "bases",
    multiple=True,
    metavar="PATH",
    help="An incremental archive's base, where its manifest does not say (repeatable;"
    " matched by checksum).",
)
OUTPUT_FILE = click.option(
    "-o", "--output", type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    metavar="FILE|-", help="Write to FILE instead of stdout (- is stdout too).",
)  # fmt: skip
STDOUT = Path(places.STREAM)
"""What ``-o -`` parses to: standard output."""

ONLY_OIDS = click.option(
    "--oids", type=OIDS, default="", help="Only LOs with OIDs in this range (1000-5000)."
)


@contextlib.contextmanager
def _pg_dump_hint(archive: str, command: str) -> Iterator[None]:
    """NotAnArchive for a pg_dump archive (custom, directory or tar) says so and names
    ``command``, which reads it; any other error goes through unchanged."""
    try:
        yield
    except NotAnArchive as e:
        path = places.local_path(archive)
        if path is None or archive == places.STREAM:
            raise
        from pgblobdump.toc.reader import open_archive

        try:
            with open_archive(path) as a:  # its header only
                kind = a.kind
        except PgBlobDumpError:
            raise e from None
        raise NotAnArchive(f"{e}; it is a pg_dump {kind} archive: {command} reads it") from e


def new_directory(output: str) -> contextlib.AbstractContextManager[Storage]:
    """storage.create_new for this command: the claim names the command; a claim left
    behind after a run that succeeded is a warning on stderr."""
    ctx = click.get_current_context(silent=True)
    what = f"pgblobdump {ctx.info_name}" if ctx is not None and ctx.info_name else "pgblobdump"
    return places.create_new(output, what, lambda m: click.echo(f"Warning: {m}", err=True))


def _result_table(title: str, record: dict[str, Any]) -> Table:
    return summary_table(title, record)


@click.command()
@connection_options
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="DIR|-",
    help="A new directory for the archive, or - for one stream on stdout.",
)
@ONLY_OIDS
@click.option(
    "--referenced-by",
    type=COLUMN,
    multiple=True,
    metavar="TABLE.COLUMN",
    help="Only LOs this column references (repeatable): an oid, an integer or numeric, or"
    " a text holding an OID's digits or <oid>.<ext>.",
)
@jobs_option("Workers (connections) sharing one snapshot.")
@VOLUME_SIZE
@LEVEL
@click.option(
    "--full",
    is_flag=True,
    help="Also the rest of the database: pg_dump under the same snapshot, kept in the archive.",
)
@pg_dump_major_option("With --full: the pg_dump to use (default: the server's major).")
@click.option(
    "--since",
    metavar="PREV",
    help="An incremental dump: only the bytes of LOs new or changed since the archive PREV"
    " (full or incremental, local or s3://); restore reads the chain.",
)
@output_options
def dump(target: ConnectionTarget, output: str, oids: tuple[int, int],
         referenced_by: tuple[tuple[str, str], ...], jobs: int, volume_size: int, level: int,
         full: bool, pg_dump_major: int | None, since: str | None,
         fmt: Format) -> None:  # fmt: skip
    """Dump large objects into a packed archive: a few files whatever the count.

    Owners, ACLs and comments come along; every worker reads under one snapshot, with
    set-based COPYs (never a round trip per LO). The manifest is written last: an
    interrupted dump leaves no archive behind.

    Example: pgblobdump dump -d mydb -o lobs.pbd --jobs 2
    """
    from pgblobdump.cli.progress import note, reporter
    from pgblobdump.packed.dump import DumpRequest
    from pgblobdump.packed.dump import dump as run_dump
    from pgblobdump.pg.lostream import Selection

    req = DumpRequest(Selection(*oids, referenced_by), jobs, volume_size,
                      level, full, pg_dump_major, since)  # fmt: skip
    conninfo = target.conninfo()
    if output == places.STREAM:
        if fmt is not Format.TABLE:
            raise UsageError(
                f"--{fmt.value} prints to stdout, which -o - fills with the archive: drop it"
                " (the summary goes to stderr) or give -o DIR"
            )
        if sys.stdout.isatty():
            raise UsageError("-o - writes binary data: redirect stdout to a file or a pipe")
        try:
            with reporter("dumping LOs", 0) as rep:
                result = run_dump(conninfo, req, stream=sys.stdout.buffer, reporter=rep)
        except BrokenPipeError as e:
            silence_stdout()
            # Not `| head`: what the reader got is not an archive, and it must not pass.
            raise FileError(
                "the reader of the stream (-o -) went away: what it got is incomplete"
            ) from e
    else:
        with new_directory(output) as storage, reporter("dumping LOs", 0) as rep:
            result = run_dump(conninfo, req, storage=storage, reporter=rep)
    record = {"los": result.los, "bytes": result.bytes, "seconds": round(result.seconds, 3),
              "files": len(result.files), "archive_bytes": result.archive_bytes,
              "snapshot": result.snapshot}  # fmt: skip
    if result.incremental is not None:
        inc = result.incremental
        record.update({"los_at_snapshot": inc["los"], "bytes_at_snapshot": inc["bytes"],
                       "new": inc["new"], "changed": inc["changed"],
                       "carried": inc["carried"], "gone": inc["gone"],
                       "metadata_only": inc.get("metadata_only", 0),
                       "base": inc["chain"][-1]["where"],
                       "chain_length": len(inc["chain"]) + 1})  # fmt: skip
    if output == places.STREAM:
        note(f"dumped {plural(result.los, 'LO')} ({format_bytes(result.bytes)})")
        return
    emit(_result_table("dumped", record), fmt, record)


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
@output_options
def restore(archive: str, target: ConnectionTarget, no_owner: bool, no_acl: bool,
            no_comments: bool, on_conflict: str, resume: bool, skip_damaged: bool,
            full: bool, part: tuple[int, int] | None, jobs: int, bases: tuple[str, ...],
            fmt: Format) -> None:  # fmt: skip
    """Restore a packed archive's LOs: same OIDs, owners, ACLs and comments.

    ARCHIVE is a directory, a stream file, or - for standard input. Batches are sized
    from the server's lock table, so default settings never run out of shared memory.
    On failure or interrupt the LOs this run created are removed; after a kill -9,
    --resume finishes the job.

    Example: pgblobdump dump -d src -o - | pgblobdump restore - -d dst
    """
    from pgblobdump.cli.progress import reporter
    from pgblobdump.packed.restoring import restore_archive

    req = RestoreRequest(no_owner, no_acl, no_comments, OnConflict(on_conflict), resume,
                         skip_damaged, full, part, jobs, bases)  # fmt: skip
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


def resume_command(archive: str, target: ConnectionTarget, req: RestoreRequest) -> str:
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
    if req.jobs > 1 and not req.full:
        args += ["--jobs", str(req.jobs)]
    for base in req.bases:
        args += ["--base", base]
    return shlex.join([*args, "--resume"])


@click.command()
@ARCHIVE
@connection_options
@BASES
@output_options
def verify(archive: str, target: ConnectionTarget, bases: tuple[str, ...], fmt: Format) -> None:
    """Check a packed archive: every file, frame and LO checksum, the index against the
    volumes; with -d (or any connection option), also against that database: LOs
    missing, extra or different, by OID. Exits 1 when the database differs.

    Prints the archive's counts; with -d, the differences (one row per LO) and then the
    counts with the database's verdict; --json prints one object with the archive's
    counts, "differences" (a list, empty when equal) and "missing", "extra", "differs";
    --csv and --markdown print the differences under their header (only the header when
    equal). A damaged archive exits 7; with --json it first prints what is damaged
    ("damaged_files", "damaged": each frame and the OIDs it loses, "damaged_los",
    "problems"), with --csv or --markdown the same as one row.

    Example: pgblobdump verify lobs.pbd -d mydb --json
    """
    from pgblobdump.cli.progress import note, reporter
    from pgblobdump.packed.chain import Chain
    from pgblobdump.packed.verify import check_chain, compare_database

    chain = Chain.open(archive, bases)
    a = chain.top
    with reporter("checking files", 0) as rep:
        check = check_chain(chain, rep)
    if not check.ok:
        if fmt is not Format.TABLE:  # the report on stdout, the error line on stderr
            report, flat = _damage_report(check)
            emit(record_table(flat, "archive is damaged"), fmt, report)
        raise CorruptArchive(_problems(check.problems, skippable=check.data_only))
    record: dict[str, Any] = {"files": check.files, "los": check.los, "bytes": check.bytes}
    if chain.incremental:
        record["bases_checked"] = sum(k.archive is not None for k in chain.links)
        record["bases_not_needed"] = sum(k.archive is None for k in chain.links)
    if not target.given:
        emit(_result_table("archive is sound", record), fmt, record)
        return
    columns = ["oid", "what", "detail"]
    counts = {"missing": 0, "extra": 0, "differs": 0}

    def counted(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for row in rows:
            counts[row["what"]] += 1
            yield row

    with reporter("comparing with the database", 0) as rep:
        rows = counted(dataclasses.asdict(d) for d in compare_database(a, target.conninfo(), rep))
        if fmt is Format.JSON:
            stream.write_json_object(sys.stdout, record, "differences", rows, lambda: counts)
        else:
            listed = stream.started(rows)
            if listed is not None or fmt is not Format.TABLE:  # CSV/Markdown: the header too
                write_listing(fmt, columns, listed or iter(()), numeric=["oid"])
    found = sum(counts.values())
    if fmt is Format.TABLE:
        verdict = "differs from" if found else "equals"
        seen = {
            "LOs missing from the database": counts["missing"],
            "LOs extra in the database": counts["extra"],
            "LOs differing": counts["differs"],
        }
        emit(_result_table(f"archive is sound; the database {verdict} it", record | seen), fmt)
    if not found:
        note(f"the database holds the archive's {plural(check.los, 'LO')}, equal")
        return
    click.echo(f"Error: the database differs from the archive: {plural(found, 'difference')}"
               " (listed on stdout)", err=True)  # fmt: skip
    raise SystemExit(1)


def _damage_report(check: ArchiveCheck) -> tuple[dict[str, Any], dict[str, Any]]:
    """verify's report of a damaged archive: for --json (lists, OIDs as integers), and
    for --csv and --markdown (one row of raw values: OIDs as ranges, lists joined by
    ``; ``).
    ``damaged_los`` is None (null) when the damage hides which LOs it takes (the index
    or manifest damaged): only restore --skip-damaged's kind of damage names them."""
    from pgblobdump.pg.ledger import ranges_text

    lost = sorted(o for d in check.damaged for o in d.oids)
    report: dict[str, Any] = {
        "sound": False, "files": check.files, "los": check.expected_los,
        "bytes": check.expected_bytes, "damaged_files": check.damaged_files,
        "damaged_los": len(lost) if check.damaged else None,
        "damaged": [{"where": d.where, "reason": d.reason, "oids": d.oids}
                    for d in check.damaged],
        "problems": check.problems,
    }  # fmt: skip
    ranges = ranges_text(lost)
    flat = {k: v for k, v in report.items() if k not in ("sound", "damaged")}
    flat["damaged_oids"] = ranges
    return report, flat


def _problems(problems: list[str], skippable: bool, shown: int = 3) -> str:
    """verify's one line for what it found: the first ``shown`` problems, how many more,
    and, when only data volumes are damaged, the restore that reads past them."""
    line = "; ".join(problems[:shown])
    more = len(problems) - shown
    if more > 0:
        line += f"; and {more:,} more problem{'s' if more > 1 else ''}"
    if skippable:
        line += "; restore --skip-damaged restores the LOs the damage spares"
    return line


@click.command("ls")
@ARCHIVE
@ONLY_OIDS
@BASES
@output_options
def ls_cmd(archive: str, oids: tuple[int, int], bases: tuple[str, ...], fmt: Format) -> None:
    """List a packed archive's LOs: OID, size, owner, ACL, comment (from its index); for
    an incremental archive also the archive that holds each LO's bytes (its chain's
    bases are found and checked).

    Example: pgblobdump ls lobs.pbd --oids 16384-17000 --csv
    """
    from pgblobdump.packed.chain import Chain

    with _pg_dump_hint(archive, f"pgblobdump toc los {shlex.quote(archive)}"):
        chain = Chain.open(archive, bases)
    first, last = oids
    index = chain.index
    columns = ["oid", "size", "owner", "acl", "comment"]
    if chain.incremental:
        columns.append("archive")

    def rows() -> Any:
        for r in index.range(first, last):
            m = index.meta(r.meta)
            acl = list(m.acl) if m.acl is not None else None
            row = {"oid": r.oid, "size": r.size, "owner": m.owner, "acl": acl,
                   "comment": m.comment}  # fmt: skip
            if chain.incremental:
                row["archive"] = chain.holder(r)
            yield row

    write_listing(fmt, columns, rows(), numeric=["oid", "size"], show={"size": "{:,}".format})


@click.command("cat")
@ARCHIVE
@click.argument("oid", type=OID)
@OUTPUT_FILE
@BASES
def cat_cmd(archive: str, oid: int, output: Path | None, bases: tuple[str, ...]) -> None:
    """Write one LO's bytes to stdout or FILE, reading only its index block and frames
    (of an incremental archive, those of the base that holds it). On a terminal, with no
    -o, a binary LO (a NUL byte in its first 8 KiB) is refused: -o - prints it anyway.

    Example: pgblobdump cat lobs.pbd 16401 -o picture.png
    """
    from pgblobdump.packed.chain import Chain

    with _pg_dump_hint(archive, f"pgblobdump toc extract {shlex.quote(archive)} {oid}"):
        chain = Chain.open(archive, bases)
    chain.top.find(oid)  # NotFound before any output
    if output is None or output == STDOUT:
        out = sys.stdout.buffer
        pieces = chain.read_lo(oid)
        for piece in text_for_terminal(oid, pieces) if output is None else pieces:
            out.write(piece)
        out.flush()
        return
    for held in [archive, *(k.path for k in chain.links if k.path is not None)]:
        if (local := places.local_path(held)) is not None:
            refuse_input(output, local)  # no file of the chain is written over
    write_atomically(output, chain.read_lo(oid))


@click.command(name="merge")
@ARCHIVE
@click.option("-o", "--output", required=True, metavar="DIR", help="A new directory.")
@BASES
@jobs_option("Threads, each packing a contiguous OID range into its own volumes.")
@VOLUME_SIZE
@LEVEL
@output_options
def merge_cmd(archive: str, output: str, bases: tuple[str, ...], jobs: int, volume_size: int,
              level: int, fmt: Format) -> None:  # fmt: skip
    """Fold an incremental archive and its bases into one full archive, with no
    database: the LOs of the incremental's snapshot, each from the archive that holds
    it, with that snapshot's owners, ACLs and comments. Keeps chains short; the result is
    a base for the next `dump --since`.

    Example: pgblobdump merge monday.pbd -o full-monday.pbd
    """
    from pgblobdump.cli.progress import reporter
    from pgblobdump.packed.chain import Chain
    from pgblobdump.packed.merge import merge
    from pgblobdump.packed.writer import check_settings

    check_settings(volume_size, level)
    chain = Chain.open(archive, bases)
    with new_directory(output) as storage, reporter("merging LOs", 0) as rep:
        result = merge(chain, storage, volume_size, level, rep, jobs)
    record = {"los": result.los, "bytes": result.bytes, "archives_merged": result.links,
              "seconds": round(result.seconds, 3), "files": len(result.files),
              "archive_bytes": sum(f.size for f in result.files)}  # fmt: skip
    emit(_result_table("merged", record), fmt, record)


@click.command(name="pack")
@click.argument("archive", type=click.Path(path_type=Path))
@click.option("-o", "--output", required=True, metavar="DIR", help="A new directory.")
@VOLUME_SIZE
@LEVEL
@output_options
def pack_cmd(archive: Path, output: str, volume_size: int, level: int, fmt: Format) -> None:
    """Pack the LOs of a pg_dump archive into a packed archive: a few files.

    ARCHIVE is a pg_dump custom file, directory or tar archive (pg_dump 9.0 to 18, any
    compression), read once, LO by LO, with owners, ACLs and comments. What is not LO
    data is kept beside the LOs: a directory or tar archive's other files unchanged, a
    custom archive without its LO data blocks. A 1M-file pg_dump -Fd becomes a handful
    of files.

    Example: pgblobdump pack dump.dir -o lobs.pbd
    """
    from pgblobdump.cli.progress import reporter
    from pgblobdump.packed.pack import pack
    from pgblobdump.toc.reader import open_archive

    with (
        open_archive(archive) as a,
        new_directory(output) as storage,
        reporter("packing LOs", 0) as rep,
    ):
        result = pack(a, storage, volume_size, level, rep)
    record = {"los": result.los, "bytes": result.bytes, "seconds": round(result.seconds, 3),
              "files": len(result.files), "kept_pg_dump_files": result.kept,
              "archive_bytes": sum(f.size for f in result.files)}  # fmt: skip
    if result.acl_unread:
        record["acl_not_understood"] = result.acl_unread
    emit(_result_table("packed", record), fmt, record)


@click.command(name="unpack")
@ARCHIVE
@click.option("-o", "--output", required=True, metavar="DIR|FILE",
              help="A new directory (or file, for a custom archive).")  # fmt: skip
@click.option(
    "--format",
    "out_format",
    type=click.Choice(["directory", "custom"]),
    default=None,
    help="The pg_dump archive format to write [default: the one it was packed from;"
    " directory for a packed dump].",
)
@pg_dump_major_option(
    "A packed dump's archive layout: pg_dump 16's (the default; pg_restore 16-18 read"
    " it) or 17/18's (grouped BLOB METADATA; pg_restore 17+)."
)
@output_options
def unpack_cmd(archive: str, output: str, out_format: str | None, pg_dump_major: int | None,
               fmt: Format) -> None:  # fmt: skip
    """Give back the pg_dump archive a packed archive was packed from, as a directory
    archive (-o DIR) or a custom one (--format custom, -o FILE).

    Its toc.dat and table data come back unchanged and a blob_<oid>.dat file per LO
    is written with the archive's compression, so pg_restore reads it as it read the
    original; --format custom writes the same header, TOC and data as one file. An
    archive packed from a custom archive comes back as that archive (-o FILE).
    A packed dump becomes a pg_dump archive of its LOs, custom or directory, in pg_dump
    16's layout (or 17's, --pg-dump-major 17).

    Example: pgblobdump unpack lobs.pbd -o dump.dir && pg_restore -d db dump.dir
    """
    from pgblobdump.cli.progress import reporter
    from pgblobdump.packed import source as packed_source
    from pgblobdump.packed.unpack import unpack, unpack_custom

    if output == places.STREAM:
        raise UsageError(
            "- is standard output, which cannot hold a pg_dump archive (a directory, or a"
            " custom file whose offsets are written after its data): name a new one"
        )
    if places.local_path(output) is None:
        raise UsageError("unpack writes a pg_dump archive for pg_restore: give a local -o")
    a = packed_source.directory(archive)
    if a.incremental is not None:
        raise UsageError(
            f"{archive} is an incremental archive: merge its chain into one first"
            f" (pgblobdump merge {archive} -o FULL), then unpack FULL"
        )
    los, nbytes = (int(a.manifest[k]) for k in ("los", "bytes")) if a.manifest else (0, 0)
    if out_format is None:  # as it came: only a directory archive's pack can be a directory
        packed_from = ((a.manifest or {}).get("source") or {}).get("format", "directory")
        out_format = "directory" if packed_from == "directory" else "custom"
    if out_format == "custom":
        with reporter("unpacking LOs", 0) as rep:
            rep.totals(los, nbytes)
            result = unpack_custom(a, Path(output), rep, pg_dump_major)
    else:
        with new_directory(output) as storage, reporter("unpacking LOs", 0) as rep:
            rep.totals(los, nbytes)
            assert isinstance(storage, places.LocalDirectory)
            result = unpack(a, storage.path, rep, pg_dump_major)
    record = {"los": result.los, "bytes": result.bytes, "files": result.files,
              "seconds": round(result.seconds, 3)}  # fmt: skip
    emit(_result_table("unpacked", record), fmt, record)
