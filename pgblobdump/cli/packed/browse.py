"""``pgblobdump ls | cat | merge``: a packed archive read or folded with no database."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from pgblobdump import storage as places
from pgblobdump.cli.options import ONLY_OIDS, jobs_option, output_options
from pgblobdump.cli.output import Format, emit, write_listing
from pgblobdump.cli.packed.common import (
    ARCHIVE,
    BASES,
    LEVEL,
    OUTPUT_FILE,
    STDOUT,
    VOLUME_SIZE,
    new_directory,
    pg_dump_hint,
    result_table,
)
from pgblobdump.cli.pipes import text_for_terminal
from pgblobdump.cli.types import OID
from pgblobdump.fileio import refuse_input, write_atomically


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
    from pgblobdump.packed.chain.archives import Chain

    with pg_dump_hint(archive, f"pgblobdump toc los {shlex.quote(archive)}"):
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
    from pgblobdump.packed.chain.archives import Chain

    with pg_dump_hint(archive, f"pgblobdump toc extract {shlex.quote(archive)} {oid}"):
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
    """Fold an incremental archive and its bases into one standalone archive, with no
    database: the LOs of the incremental's snapshot, each from the archive that holds
    it, with that snapshot's owners, ACLs and comments. Keeps chains short; the result is
    a base for the next `dump --since`.

    Example: pgblobdump merge monday.pbd -o full-monday.pbd
    """
    from pgblobdump.cli.progress import reporter
    from pgblobdump.packed.chain.archives import Chain
    from pgblobdump.packed.chain.merge import merge
    from pgblobdump.packed.write.writer import check_settings

    check_settings(volume_size, level)
    chain = Chain.open(archive, bases)
    with new_directory(output) as storage, reporter("merging LOs", 0) as rep:
        result = merge(chain, storage, volume_size, level, rep, jobs)
    record = {"los": result.los, "bytes": result.bytes, "archives_merged": result.links,
              "seconds": round(result.seconds, 3), "files": len(result.files),
              "archive_bytes": sum(f.size for f in result.files)}  # fmt: skip
    emit(result_table("merged", record), fmt, record)
