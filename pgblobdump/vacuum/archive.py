"""``vacuum --archive-to``: the candidates go into a packed archive first, and only the
LOs that archive holds, once verified, stay candidates.

The packed dump reads LOs under its own snapshot on its own connections, so it cannot
see our temporary candidates table: the candidates are copied into a table of the state
schema for the dump's ``--referenced-by`` selection (``int8``, so that no discovery
takes it for references), and dropped again whatever happens. A dump that fails, an
archive whose check finds a problem, or a full disk leaves every candidate in place.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import psycopg
from psycopg import sql

from pgblobdump.errors import CorruptArchive, FileError, UsageError
from pgblobdump.packed.dump.run import DumpRequest, dump
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.verify import check_archive
from pgblobdump.pg.lostream import Selection
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.storage import places
from pgblobdump.vacuum.orphans import CANDIDATES

VERIFIED = "pgbd_vacuum_verified"


def check_place(url: str) -> None:
    """FileError before anything runs when ``url`` is a local path that is taken (a file,
    or a directory with files in it), and UsageError for ``-``: the same refusals
    ``create_new`` makes later."""
    if url == places.STREAM:
        raise UsageError(
            "--archive-to -: - is standard output, which cannot hold the archive (a"
            " directory): name a new directory"
        )
    p = places.local_path(url)
    if p is not None and p.exists() and (not p.is_dir() or any(p.iterdir())):
        raise FileError(f"{p} exists and is not an empty directory; choose a new name")


def archive_candidates(
    conn: psycopg.Connection,
    conninfo: str,
    url: str,
    schema: str,
    reporter: Reporter = QUIET,
    warn: Callable[[str], None] | None = None,
) -> tuple[int, int]:
    """Dump the candidates to the new archive ``url``, verify it, and keep as candidates
    only the LOs it holds. Returns how many it holds, and the snapshot xmin (64-bit) taken
    before the dump began: a page written by that xid or a later one may hold bytes the
    archive has not (``AgeRule.bytes_before`` keeps such an LO)."""
    row = conn.execute(
        "SELECT pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text::int8"
    ).fetchone()
    assert row is not None
    before = int(row[0])
    table = f"vacuum_archive_{secrets.token_hex(6)}"
    ident = sql.Identifier(schema, table)
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {} (o int8 PRIMARY KEY)").format(ident))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT o::int8 FROM pg_temp.{}").format(
                ident, sql.Identifier(CANDIDATES)
            )
        )
    try:
        req = DumpRequest(Selection(referenced_by=((f"{schema}.{table}", "o"),)))
        with places.create_new(url, "pgblobdump vacuum --archive-to", warn) as storage:
            reporter.note(f"archiving the candidates to {url}")
            dump(conninfo, req, storage, reporter=reporter)
    finally:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(ident))
    archive = PackedDirectory(places.open(url))
    check = check_archive(archive)
    if not check.ok:
        raise CorruptArchive(f"{url}: {check.problems[0]}; nothing removed")
    v = sql.Identifier(VERIFIED)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(v))
    conn.execute(sql.SQL("CREATE TEMP TABLE {} (o oid PRIMARY KEY)").format(v))
    with conn.cursor().copy(sql.SQL("COPY pg_temp.{} (o) FROM STDIN").format(v)) as cp:
        for r in archive.index:
            cp.write_row((r.oid,))
    conn.execute(
        sql.SQL(
            "DELETE FROM pg_temp.{c} c WHERE NOT EXISTS (SELECT 1 FROM pg_temp.{v} v"
            " WHERE v.o = c.o)"
        ).format(c=sql.Identifier(CANDIDATES), v=v)
    )
    return check.los, before
