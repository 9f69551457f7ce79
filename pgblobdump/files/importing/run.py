"""``import``: every regular file under a directory (or object under an S3 prefix) made
an LO, through restore's writer (lock-budgeted batches, each one transaction entered in
a ledger; ``--jobs N`` connections), at OIDs of one block chosen free above every LO
and reserved (pg/oidspace, as ``restore --remap`` does).

Order of work: every refusal first (the table and its columns, the roles, the journal's
schema, an unfinished run), then the files counted (a walk), the block reserved, and N
jobs each importing a contiguous share of the files in key order (a second walk each).
Each batch's transaction verifies its LOs' sha256 against their files', writes their
``--table`` rows and enters them in the journal (files/importing/hooks.py). A failure or an
interrupt removes exactly what the run made (the ledgers), rows put back; after a kill -9
``--resume`` imports the files the journal does not hold as they are now."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgblobdump import aclitem
from pgblobdump.errors import DatabaseError, PgBlobDumpError, UsageError
from pgblobdump.files.exporting.names import reserved
from pgblobdump.files.importing import ingest
from pgblobdump.files.importing import rows as importrows
from pgblobdump.files.importing import state as importstate
from pgblobdump.files.importing.deal import DEAL, Dealer, Listing
from pgblobdump.files.importing.hooks import ImportHooks
from pgblobdump.files.importing.reading import reader
from pgblobdump.files.keys import EXPORT_SETTINGS
from pgblobdump.files.objects import Place, Skipped, open_place
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.restore.crew import Crew
from pgblobdump.packed.restore.hooks import taken_meanwhile
from pgblobdump.packed.restore.request import RestoreRequest
from pgblobdump.packed.restore.restorer import Restorer
from pgblobdump.pg import oidspace
from pgblobdump.pg.connect import connect
from pgblobdump.pg.ledger import Ledger
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.units import plural

PRIVILEGES = ("SELECT", "UPDATE")
NOT_UTF8 = "its name is not UTF-8: the journal and --table keep paths as text"
SKIPPED_LISTED = 1000
"""Skipped files named in the result at most (all are counted)."""


@dataclass(frozen=True)
class ImportRequest:
    """What to import and how. ``grants``: (role, privileges) each; ``rows``: the row
    per file (``--table``); ``resume``: finish the interrupted run of the same place."""

    where: str
    jobs: int = 1
    follow_symlinks: bool = False
    resume: bool = False
    rows: importrows.RowTarget | None = None
    owner: str | None = None
    grants: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.jobs <= 64:
            raise UsageError(f"--jobs must be between 1 and 64 (got {self.jobs})")
        for role, privs in self.grants:
            if role.upper() == "PUBLIC":
                raise UsageError("--grant PUBLIC would make the LOs readable by every role")
            bad = [p for p in privs if p not in PRIVILEGES]
            if bad or not privs:
                raise UsageError(
                    f"--grant {role}: privileges must be SELECT and/or UPDATE (got"
                    f" {','.join(privs) or 'none'})"
                )


def parse_grant(text: str) -> tuple[str, tuple[str, ...]]:
    """``ROLE`` (SELECT) or ``ROLE:SELECT,UPDATE``."""
    role, _, privs = text.rpartition(":") if ":" in text else (text, "", "SELECT")
    words = tuple(p.strip().upper() for p in privs.split(",") if p.strip())
    if not role:
        raise UsageError(f"--grant {text!r}: give ROLE or ROLE:SELECT,UPDATE")
    return role, words


@dataclass(frozen=True)
class ImportResult:
    """``files``: imported by this run; ``kept``: imported by the interrupted run this
    one resumed (unchanged since); ``skipped``: (key, why) of those not imported, the
    first SKIPPED_LISTED of ``skipped_count``; ``unreferenced``: LOs that rows this run
    updated named before (not unlinked)."""

    run: str
    files: int
    los: int
    bytes: int
    kept: int
    skipped: list[tuple[str, str]]
    skipped_count: int
    oids: tuple[int, int] | None
    rows_inserted: int
    rows_updated: int
    unreferenced: list[int]
    seconds: float
    resumed: bool = False
    retried: int = 0

    def record(self) -> dict[str, Any]:
        return {
            "run": self.run, "files": self.files, "los": self.los, "bytes": self.bytes,
            "kept": self.kept,
            "skipped": [{"path": k, "why": w} for k, w in self.skipped],
            "skipped_count": self.skipped_count,
            "oids": list(self.oids) if self.oids else None,
            "rows_inserted": self.rows_inserted, "rows_updated": self.rows_updated,
            "unreferenced": self.unreferenced, "seconds": round(self.seconds, 3),
            "resumed": self.resumed, "retried": self.retried,
        }  # fmt: skip


@dataclass
class _Walked:
    """The walk: the files to import (``listing``), what is skipped and why, and how
    many a resumed run keeps."""

    listing: Listing
    skipped: list[tuple[str, str]] = field(default_factory=list)
    kept: int = 0


def _utf8(key: str) -> bool:
    try:
        key.encode()
    except UnicodeEncodeError:  # a name's bytes that are not UTF-8 (surrogate escapes)
        return False
    return True


def _walk(place: Place, req: ImportRequest, done: dict[str, importstate.Done]) -> _Walked:
    w = _Walked(Listing())
    # an export's target: its manifests are the export's own files, not LOs
    exported = place.stat(EXPORT_SETTINGS) is not None
    for e in place.walk(req.follow_symlinks):
        if isinstance(e, Skipped):
            w.skipped.append((e.key, e.why))
        elif exported and reserved(e.key):
            w.skipped.append((e.key, "the manifest of the export made here"))
        elif not e.key.isascii() and not _utf8(e.key):
            w.skipped.append((e.key.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
                              NOT_UTF8))  # fmt: skip
        elif (d := done.get(e.key)) is not None and (d.size, d.mtime_ns, d.etag) == (
            e.size, e.mtime_ns, e.etag,
        ):  # fmt: skip
            w.kept += 1
        else:
            w.listing.add(e)
    return w


def _check_roles(conn: psycopg.Connection, req: ImportRequest) -> tuple[Meta, bool]:
    """The LOs' Meta (owner and ACL), every role checked: ``--owner`` one this role may
    SET ROLE to (or a superuser runs), each ``--grant`` role existing."""
    row = conn.execute(
        "SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone()
    assert row is not None
    me, superuser = str(row[0]), bool(row[1])
    named = [r for r in [req.owner, *(g for g, _ in req.grants)] if r is not None]
    have = {
        r[0] for r in conn.execute("SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (named,))
    }
    missing = sorted(set(named) - have)
    if missing:
        raise DatabaseError(f"no such role: {', '.join(missing)}")
    if req.owner is not None and not superuser and req.owner != me:
        option = "SET" if conn.info.server_version >= 160000 else "MEMBER"
        ok = conn.execute("SELECT pg_has_role(%s, %s)", (req.owner, option)).fetchone()
        if not (ok and ok[0]):
            raise DatabaseError(
                f"--owner {req.owner}: role {me} may not SET ROLE {req.owner} (grant it"
                " membership, or run as a superuser)"
            )
    owner = req.owner or me
    acl = None
    if req.grants:
        items = [aclitem.AclItem(owner, PRIVILEGES, (), owner)]
        items += [aclitem.AclItem(r, p, (), owner) for r, p in req.grants if r != owner]
        acl = tuple(aclitem.format_item(i) for i in items)
    return Meta(req.owner, acl, None), superuser


def run_import(
    conninfo: str, req: ImportRequest, reporter: Reporter = QUIET,
    after_read: ingest.AfterRead | None = None,
) -> ImportResult:  # fmt: skip
    """Import the files ``req`` names into the database at ``conninfo`` (the module's
    docstring). ``after_read``: called with each file's key once read (tests)."""
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        place = stack.enter_context(open_place(req.where))
        main = stack.enter_context(connect(conninfo, autocommit=True, doing="import"))
        meta, _ = _check_roles(main, req)
        rows = importrows.resolve(main, req.rows) if req.rows is not None else None
        spec = req.rows.spec if req.rows is not None else ""
        importstate.ensure(main)
        # the run is found again by its place: a directory by its absolute path
        named = place.description if place.is_s3 else os.path.abspath(req.where)
        run, done = _begin(main, named, spec, req.resume, reporter)
        try:
            result = _run(conninfo, stack, main, place, req, run, done, meta, rows,
                          reporter, after_read)  # fmt: skip
        except BaseException:
            with contextlib.suppress(PgBlobDumpError, psycopg.Error):
                importstate.drop_if_empty(main, run)
            raise
        importstate.finish(main, run)
    return dataclasses.replace(result, seconds=time.perf_counter() - t0)


def _begin(conn: psycopg.Connection, place: str, spec: str, resume: bool, reporter: Reporter
           ) -> tuple[str, dict[str, importstate.Done]]:  # fmt: skip
    """The run: the interrupted one of ``place`` (--resume), or a new one; an
    unfinished one without --resume is refused."""
    earlier = importstate.unfinished(conn, place)
    if resume:
        if not earlier:
            raise UsageError(
                f"nothing to resume: no interrupted import of {place} into this database"
                " (run it without --resume)"
            )
        run = earlier[-1]
        if not importstate.hold(conn, run.run):
            raise DatabaseError(f"an import of {place} is in progress (run {run.run})")
        if run.rows_into != spec:
            raise UsageError(
                f"the interrupted run {run.run} wrote rows into {run.rows_into or 'no table'};"
                " resume it with the same --table, --path-column and --lo-column"
            )
        done = importstate.done(conn, run.run)
        reporter.note(f"resuming run {run.run}: {plural(len(done), 'file')} imported already")
        return run.run, done
    if earlier:
        left = importstate.counts(conn, earlier[-1].run)
        raise DatabaseError(
            f"an interrupted import of {place} into this database (run {earlier[-1].run})"
            f" left {plural(left, 'file')} imported; add --resume to finish it"
        )
    return importstate.new_run(conn, place, spec).run, {}


def _run(
    conninfo: str, stack: contextlib.ExitStack, main: psycopg.Connection, place: Place,
    req: ImportRequest, run: str, done: dict[str, importstate.Done], meta: Meta,
    rows: importrows.Resolved | None, reporter: Reporter,
    after_read: ingest.AfterRead | None,
) -> ImportResult:  # fmt: skip
    walked = _walk(place, req, done)
    stack.callback(walked.listing.close)
    count = walked.listing.count
    for key, why in walked.skipped:
        reporter.note(f"skipped {key}: {why}")
    book = ingest.Book(skipped=list(walked.skipped))
    hooks = ImportHooks(run, book, rows)
    block: tuple[int, int] | None = None
    counts = None
    if count:
        r = oidspace.reserve(main, count, None, option="fewer files at once")
        block = (r.first, r.last)
        importstate.set_block(main, run, r.first, r.last)
        reporter.note(f"importing {plural(count, 'file')} as LOs {r.first}..{r.last}")
        reporter.task("importing files", count)
        shares = min(req.jobs, -(-count // DEAL))
        rreq = RestoreRequest(jobs=shares)
        workers: list[Restorer] = []
        for _ in range(shares):
            # not ``main``: a failure's clean-up closes the workers' connections, and
            # ``main`` holds the run and the block until the end
            conn = stack.enter_context(connect(conninfo, autocommit=True, doing="import"))
            ledger = Ledger(conninfo, "import", on_remove=hooks.forget)
            workers.append(Restorer(conn, ledger, rreq, reporter, metas=[meta],
                                    roles_checked=True, remapping=hooks))  # fmt: skip
        crew = Crew(workers, "pgblobdump-import", "import", taken_meanwhile,
                    "; run the import again with --resume to finish it")  # fmt: skip
        dealer = Dealer(iter(walked.listing), r.first, shares, crew.stop)
        feeds = []
        for j in range(shares):
            job_place = stack.enter_context(open_place(req.where))
            reading = stack.enter_context(reader(job_place, req.follow_symlinks))
            feeds.append(ingest.items(reading, dealer.dealt(j), meta, book, after_read))
        works = [functools.partial(crew.drive, w, f) for w, f in zip(workers, feeds, strict=True)]
        dealer.start()
        counts = crew.run(works, reporter)
        oidspace.release(main, r)
    skipped = book.skipped
    return ImportResult(
        run,
        hooks.files,
        counts.los if counts else 0,
        counts.bytes if counts else 0,
        walked.kept,
        skipped[:SKIPPED_LISTED],
        len(skipped),
        block,
        hooks.inserted,
        hooks.updated,
        sorted(hooks.unreferenced),
        0.0,
        req.resume,
        book.retried,
    )
