"""``pgblobdump pack | unpack``: a pg_dump archive's LOs into a packed archive and back."""

from __future__ import annotations

from pathlib import Path

import click

from pgblobdump import storage as places
from pgblobdump.cli.options import output_options
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.packed.common import (
    ARCHIVE,
    LEVEL,
    VOLUME_SIZE,
    new_directory,
    pg_dump_major_option,
    result_table,
)
from pgblobdump.errors import (
    UsageError,
)


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
    from pgblobdump.packed.pgdump.pack import pack
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
    emit(result_table("packed", record), fmt, record)


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
    from pgblobdump.packed.format.manifest import PackSource
    from pgblobdump.packed.pgdump.unpack import unpack, unpack_custom
    from pgblobdump.packed.read import source as packed_source

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
    los, nbytes = (a.manifest.los, a.manifest.bytes) if a.manifest else (0, 0)
    if out_format is None:  # as it came: only a directory archive's pack can be a directory
        source = a.manifest.source if a.manifest else None
        packed_from = source.format if isinstance(source, PackSource) else "directory"
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
    emit(result_table("unpacked", record), fmt, record)
