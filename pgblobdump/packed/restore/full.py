"""``restore --full``: a whole-database packed archive restored around its LOs.

pg_restore's pre-data and data sections run first (tables exist before the LOs, nothing
references them yet), then the LOs, then post-data, so triggers such as ``lo_manage`` are
created after the LOs and restoring fires none of them. pg_dump and pg_restore themselves
are driven by packed/pgdump/database.py."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection

from pgblobdump.errors import PgBlobDumpError
from pgblobdump.packed.format.spec import DATABASE_FILE
from pgblobdump.packed.pgdump.database import (
    PgRestore,
    dumped_by,
    local_file,
    major_of,
    server_major,
)
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.restore.request import RestoreRequest, RestoreResult
from pgblobdump.packed.restore.restorer import restore
from pgblobdump.pg.connect import connect
from pgblobdump.pg.failure import as_error, with_more
from pgblobdump.report.reporter import QUIET, Reporter


def restore_full(
    conninfo: str,
    archive: PackedDirectory,
    req: RestoreRequest,
    jobs: int = 1,
    reporter: Reporter = QUIET,
    restore_los: Callable[[], RestoreResult] | None = None,
    skip: Collection[str] = (),
    after: Callable[[str], None] | None = None,
) -> RestoreResult:
    """pg_restore's pre-data and data sections, the LOs, then post-data. The target
    should be an empty database: on a failure the LOs this run made are removed (as in
    any restore), and what pg_restore restored is named as left in place. ``restore_los``
    restores the LOs in place of one connection's ``restore`` (``--jobs N``). ``skip``:
    sections done already (a resumed ``--remap``); ``after``: told of each section done."""
    dumped = major_of(dumped_by(archive))
    with connect(conninfo, autocommit=True, doing="restore") as conn:
        target = server_major(conn)
    options = [flag for flag, on in (("--no-owner", req.no_owner), ("--no-acl", req.no_acl),
                                     ("--no-comments", req.no_comments)) if on]  # fmt: skip
    done: list[str] = []
    t0 = time.perf_counter()
    try:
        with local_file(archive.storage, DATABASE_FILE) as path:
            pg_restore = PgRestore(conninfo, path, target, dumped, options, jobs)
            for section in ("pre-data", "data"):
                if section in skip:
                    continue
                reporter.note(f"pg_restore {pg_restore.tc.version}: {section}")
                pg_restore.section(section)
                done.append(section)
                if after is not None:
                    after(section)
            if restore_los is not None:  # --jobs N: the LOs over N connections too
                result = restore_los()
            else:  # its messages name no command to resume it, as they never did
                los_req = dataclasses.replace(req, resume_command="")
                result = restore(conninfo, archive.items(req.skip_damaged), los_req, reporter,
                                 archive.index, archive.index.metas.values)  # fmt: skip
            if "post-data" not in skip:
                reporter.note(f"pg_restore {pg_restore.tc.version}: post-data")
                pg_restore.section("post-data")
    except (PgBlobDumpError, KeyboardInterrupt) as e:
        if not done:
            raise
        err = e if isinstance(e, PgBlobDumpError) else as_error(e, "restore", str)
        raise with_more(
            err,
            f"pg_restore's {' and '.join(done)} sections are left in the target (restore"
            " --full into an empty database; drop it to start again)",
        ) from e
    return dataclasses.replace(result, seconds=time.perf_counter() - t0)
