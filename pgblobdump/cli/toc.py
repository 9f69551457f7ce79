"""``pgblobdump toc``: read pg_dump archives natively (no server, no pg_restore)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from pgblobdump.cli.options import output_options
from pgblobdump.cli.output import Format, emit, write_listing
from pgblobdump.cli.pipes import text_for_terminal
from pgblobdump.cli.types import OID
from pgblobdump.errors import UsageError
from pgblobdump.fileio import write_atomically
from pgblobdump.report import Column, Table, stream
from pgblobdump.report.table import record_table
from pgblobdump.toc import acl as toc_acl
from pgblobdump.toc import diff as toc_diff
from pgblobdump.toc import listing, summary
from pgblobdump.toc import lo as los
from pgblobdump.toc import show as toc_show
from pgblobdump.toc.reader import Archive, open_archive
from pgblobdump.units import format_bytes, plural

ARCHIVE = click.argument("archive", type=click.Path(path_type=Path))


@click.group()
def toc() -> None:
    """Read pg_dump custom and directory archives without a server or pg_restore.

    ARCHIVE is a custom-format file (pg_dump -Fc), a directory (pg_dump -Fd) or its
    toc.dat, or a tar archive (pg_dump -Ft). Archive versions 1.12 to 1.16
    (PostgreSQL 9.0 to 18), compressed with none, gzip, lz4 or zstd.

    Example: pgblobdump toc summary db.dump
    """


@toc.command()
@ARCHIVE
@click.option("--all", "show_all", is_flag=True, help="Also entries pg_restore -l hides.")
@click.option("--no-header", is_flag=True, help="Omit the ';' comment header.")
@output_options
def show(archive: Path, show_all: bool, no_header: bool, fmt: Format) -> None:
    """List the TOC entries like `pg_restore -l` (same entry lines, same header).

    Without --all, prints exactly the entries pg_restore -l prints (ENCODING,
    STDSTRINGS, SEARCHPATH and DATABASE entries are hidden, as there). With --json,
    one object per entry with its section and dependencies.

    Example: pgblobdump toc show db.dump > db.list
    """
    with open_archive(archive) as a:
        if fmt is Format.TABLE:
            blocks = stream.started(toc_show.chunks(a, show_all)) or iter(())
            out = sys.stdout
            if not no_header:
                out.write("\n".join(listing.format_header(a.header, a.kind)) + "\n")
            for block in blocks:
                out.write(block)
            return
        entries = a.iter_entries()
        flags = listing.listed((e.desc, e.tag, e.defn, e.had_dumper, e.section) for e in entries)
        pairs = zip(a.iter_entries(), flags, strict=False)
        chosen = stream.started(e for e, keep in pairs if keep or show_all) or iter(())
        cols = ["dump_id", "tableoid", "oid", "desc", "namespace", "tag", "owner", "section",
                "dependencies"]  # fmt: skip
        stream.write_rows(
            sys.stdout,
            fmt,
            cols,
            (
                {
                    "dump_id": e.dump_id,
                    "tableoid": e.tableoid,
                    "oid": e.oid,
                    "desc": e.desc,
                    "namespace": e.namespace,
                    "tag": e.tag,
                    "owner": e.owner,
                    "section": e.section_name,
                    "dependencies": list(e.dependencies),
                }
                for e in chosen
            ),
        )


def _summary_table(s: summary.Summary) -> Table:
    owners = ", ".join(f"{k or '-'} {v:,}" for k, v in s.lo_owners.items())
    rows: list[dict[str, Any]] = [
        {"field": "archive", "value": s.path},
        {"field": "format", "value": s.format},
        {"field": "archive version", "value": s.version},
        {"field": "compression", "value": s.compression},
        {"field": "created", "value": s.created},
        {"field": "database", "value": s.dbname},
        {"field": "server version", "value": s.server_version},
        {"field": "pg_dump version", "value": s.pg_dump_version},
        {"field": "TOC entries", "value": f"{s.toc_entries:,} ({s.listed:,} in pg_restore -l)"},
        # the entries by type, under their count (they sat under "archive size")
        *({"field": f"  {k}", "value": f"{v:,}"} for k, v in s.entries_by_type.items()),
        {"field": "large objects", "value": f"{s.lo_count:,} in {plural(s.lo_groups, 'group')}"},
        {"field": "LO owners", "value": owners},
        {"field": "LOs with ACL/comment", "value": f"{s.los_with_acl:,}/{s.los_with_comment:,}"},
        {"field": "LO data stored", "value": "not measured" if s.lo_data_bytes is None
         else f"{format_bytes(s.lo_data_bytes)} for {plural(s.los_with_data or 0, 'LO')}"},
        {"field": "archive size", "value": format_bytes(s.archive_bytes)},
    ]  # fmt: skip
    return Table([Column("field"), Column("value")], rows, title="Archive summary")


@toc.command(name="summary")
@ARCHIVE
@click.option("--no-data", is_flag=True, help="Skip the walk over LO data (no sizes).")
@output_options
def summary_cmd(archive: Path, no_data: bool, fmt: Format) -> None:
    """Archive version, format, compression, versions, entry counts, LOs and sizes.

    Reads the TOC once, keeping counters only, then walks the LO data blocks (or
    the blobs list files of a directory archive) to total the stored LO bytes.

    Example: pgblobdump toc summary db.dump --json
    """
    with open_archive(archive) as a:
        s = summary.summarize(a, with_data=not no_data)
    emit(record_table(s) if fmt is Format.CSV else _summary_table(s), fmt, json_value=s)


@toc.command(name="los")
@ARCHIVE
@click.option("--no-sizes", is_flag=True, help="Do not read LO data (stored left empty).")
@output_options
def los_cmd(archive: Path, no_sizes: bool, fmt: Format) -> None:
    """The large objects in an archive: OID, owner, stored size, ACL, comment.

    OIDs come from BLOB entries (up to 1.15) or the BLOB METADATA OID lists (1.16).
    The "stored" column (key "size" in JSON and CSV) is the bytes the archive stores
    for the LO: compressed when the archive is (toc extract gives the LO's own size),
    the LO's size when it is not. Rows stream; use --json or --csv for a million LOs.

    Example: pgblobdump toc los db.dump --csv > los.csv
    """
    with open_archive(archive) as a:
        rows = los.iter_rows(a, with_sizes=not no_sizes)
        if fmt is Format.JSON:
            _write_los_json(rows)
            return
        records = (
            {"oid": oid, "owner": owner, "size": size, "acl": list(acl), "comment": comment}
            for oid, owner, acl, comment, size, _group in rows
        )
        write_listing(
            fmt,
            ["oid", "owner", "size", "acl", "comment"],
            records,
            numeric=["oid", "size"],
            show={"size": lambda v: "" if v is None else f"{v:,}"},
            titles={"size": "stored"},  # not the LO's size when the archive is compressed
        )


CACHE_MAX = 1024
"""Distinct owners and ACLs whose JSON is kept: an archive of per-LO ACLs (each naming
its own OID) has a million distinct ones, and memory must not grow with them."""


def _write_los_json(rows: Iterable[los.LoRow]) -> None:
    """The JSON array of `toc los`, encoded by hand: owners, ACLs and comments repeat, so
    a value is encoded once while it repeats (a few distinct ones kept); rows go out in
    batches. ``grants`` is the ACL the LO's commands give (toc/acl.py), null for default
    privileges (no commands) or for commands that are not GRANT/REVOKE."""
    enc: dict[Any, str] = {}
    dumps = json.dumps

    def js(value: Any) -> str:
        key = (type(value), value)
        text = enc.get(key)
        if text is None:
            text = dumps(list(value) if isinstance(value, tuple) else value, ensure_ascii=False)
            if len(enc) < CACHE_MAX:
                enc[key] = text
        return text

    started = stream.started(rows)
    out = sys.stdout
    if started is None:
        out.write("[]\n")
        return
    out.write("[")
    batch: list[str] = []
    sep = "\n  "
    last_owner: object = object()
    last_acl: object = object()
    owner_js = acl_js = ""
    grants_js = "null"
    last_grants: object = object()
    for oid, owner, acl, comment, size, _group in started:
        if owner is not last_owner:  # rows of one group share these objects
            last_owner, owner_js = owner, js(owner)
        if acl is not last_acl:
            last_acl, acl_js = acl, js(acl)
            # lo_grants gives one tuple for every LO whose commands differ in the OID only
            grants = toc_acl.lo_grants(acl, owner, oid) if acl else None
            if grants is not last_grants:
                last_grants = grants
                grants_js = dumps(toc_acl.grants_json(grants), ensure_ascii=False)
        batch.append(
            f'{sep}{{"oid": {oid}, "owner": {owner_js}, "size": {"null" if size is None else size}'
            f', "acl": {acl_js}, "grants": {grants_js}, "comment": '
            f"{'null' if comment is None else dumps(comment, ensure_ascii=False)}}}"
        )
        sep = ",\n  "
        if len(batch) >= 10_000:
            out.write("".join(batch))
            batch.clear()
    out.write("".join(batch) + "\n]\n")


@toc.command()
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@output_options
def diff(a: Path, b: Path, fmt: Format) -> None:
    """Entry-level differences from archive A to archive B.

    Entries match by type, schema and name; per-LO entries are grouped by type and
    owner into OID ranges, so archives of a million LOs differ in a few lines. Lines
    start with '-' (only in A), '+' (only in B), '~' (changed) or '=' (LO verdict).

    Example: pgblobdump toc diff pg16.dump pg17.dump
    """
    with open_archive(a) as arch_a, open_archive(b) as arch_b:
        lines = toc_diff.diff(arch_a, arch_b)
    if fmt is Format.TABLE:
        for line in lines:
            sys.stdout.write(line.format() + "\n")
        return
    table = Table(
        [Column("change"), Column("desc"), Column("what"), Column("detail")],
        [{"change": x.change, "desc": x.desc, "what": x.what, "detail": x.detail} for x in lines],
    )
    emit(table, fmt)


@toc.command()
@ARCHIVE
@click.argument("oid", type=OID)
@click.option("-o", "--output", metavar="FILE|-",
              type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
              help="Write to FILE instead of stdout (- is stdout too).")  # fmt: skip
def extract(archive: Path, oid: int, output: Path | None) -> None:
    """Write one large object's bytes, decompressed, to stdout or FILE.

    The bytes are those pg_dump read from the server (lo_get), found by OID in the
    custom-format data blocks or the directory's blob_<oid>.dat[.gz|.lz4|.zst] file.
    On a terminal, with no -o, a binary LO (a NUL byte in its first 8 KiB) is refused:
    -o - prints it anyway.

    Example: pgblobdump toc extract db.dump 16401 -o picture.png
    """
    forced = output == Path("-")  # stdout, a terminal or not
    if forced:
        output = None
    with open_archive(archive) as a:
        _refuse_writing_into(a, output)
        pieces = los.extract(a, oid)
        if output is None:
            out = sys.stdout.buffer
            for piece in pieces if forced else text_for_terminal(oid, pieces):
                out.write(piece)
            out.flush()
            return
        write_atomically(output, pieces)


def _refuse_writing_into(a: Archive, output: Path | None) -> None:
    """A UsageError, before anything is read or written, when the LO would go into the
    archive itself: ``-o`` naming it (or a file inside a directory archive) under any
    path or link, or stdout appending to it (``>>``). Exit 2, not 11 (FileError): the
    file could be written; the option value is what is wrong."""
    if output is not None:
        if a.holds(output):
            what = (
                f"would write into the directory archive {a.name}"
                if a.kind == "directory"
                else f"is the archive {a.name} itself"
            )
            raise UsageError(f"-o {output} {what}; name a file outside the archive")
        return
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return  # not a real file (a test runner's buffer)
    if a.holds(f"/dev/fd/{fd}"):
        raise UsageError(
            f"stdout is the archive {a.name} itself; redirect it elsewhere or use -o FILE"
        )
