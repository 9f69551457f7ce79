"""``dump``: LOs from a database into a packed archive, under one snapshot, by N workers.

The leader opens a REPEATABLE READ, READ ONLY transaction and exports its snapshot; each
worker imports it (``SET TRANSACTION SNAPSHOT``), so every worker sees exactly the same
LOs whatever other sessions commit meanwhile. The selection is split into N contiguous
OID ranges holding about as many LOs each; worker K packs range K into its own volumes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, BinaryIO

import psycopg

from pgblobdump import logs
from pgblobdump.errors import UsageError
from pgblobdump.packed.chain import since
from pgblobdump.packed.dump import referenced
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.indexbuild import IndexBuilder
from pgblobdump.packed.format.manifest import DumpSource, Incremental, PgDumpFile
from pgblobdump.packed.format.spec import (
    DATABASE_FILE,
    DEFAULT_VOLUME_SIZE,
    FORMAT_VERSION,
    GONE_NAME,
    STANDALONE_VERSION,
    ZSTD_LEVEL,
)
from pgblobdump.packed.write.packer import LoPacker
from pgblobdump.packed.write.writer import ArchiveWriter, check_settings
from pgblobdump.pg import catalog, changes
from pgblobdump.pg import snapshot as snap
from pgblobdump.pg.connect import connect, describe
from pgblobdump.pg.lostream import LoRun, Selection, iter_los
from pgblobdump.pg.snapshot import SideConnection
from pgblobdump.pg.target import split_password
from pgblobdump.pgconstants import OID_MAX
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.storage import FileInfo, Storage
from pgblobdump.units import plural

if TYPE_CHECKING:  # --since's and --full's modules are imported by a dump that uses them
    from pgblobdump.packed.chain.bychecksum import Comparer

log = logging.getLogger(__name__)


def _oids(first: int, last: int) -> str:
    """A worker's share for -v: ``OIDs 16384..20000``, or ``all OIDs`` for one that
    restricts nothing (not ``OIDs 0..4294967295``)."""
    return "all OIDs" if (first, last) == (0, OID_MAX) else f"OIDs {first}..{last}"


@dataclass(frozen=True)
class DumpRequest:
    """What to dump and how. ``jobs``: workers (connections) sharing one snapshot."""

    selection: Selection = field(default_factory=Selection)
    jobs: int = 1
    volume_size: int = DEFAULT_VOLUME_SIZE
    level: int = ZSTD_LEVEL
    full: bool = False  # also pg_dump of everything else, under the same snapshot
    pg_dump_major: int | None = None  # default: the server's
    since: str | None = None  # an incremental dump: only what changed since this archive
    detect: str = "auto"  # with since: how changed pages are found (changes.DETECT)

    def __post_init__(self) -> None:
        if self.pg_dump_major is not None and not self.full:
            raise UsageError("--pg-dump-major goes with --full")
        if not 1 <= self.jobs <= 64:
            raise UsageError(f"--jobs must be between 1 and 64 (got {self.jobs})")
        if self.detect != "auto" and self.since is None:
            raise UsageError("--detect goes with --since")
        check_settings(self.volume_size, self.level)


@dataclass(frozen=True)
class DumpResult:
    los: int
    bytes: int
    seconds: float
    snapshot: str
    files: list[FileInfo] = field(default_factory=list)
    incremental: Incremental | None = None
    """An incremental dump's manifest ``incremental`` (chain and counts)."""

    @property
    def archive_bytes(self) -> int:
        return sum(f.size for f in self.files)


def _has_snapshot_functions(conn: psycopg.Connection) -> bool:
    """Whether the server has pg_current_snapshot (13+): a mark for later incrementals."""
    return conn.info.server_version >= 130000


def _source(conn: psycopg.Connection, conninfo: str, snapshot: str) -> DumpSource:
    row = conn.execute(
        "SELECT current_setting('server_version'), current_database(), current_user"
    ).fetchone()
    assert row is not None
    return DumpSource(
        server_version=str(row[0]).split()[0],
        database=row[1],
        user=row[2],
        snapshot=snapshot,
        connection=describe(split_password(conninfo)[0]),
    )


STOP_WAIT = 30.0
"""Seconds a failed dump waits for its workers (their statements cancelled) to stop."""


class _Progress:
    """Totals over every worker, told to the reporter now and then (thread-safe)."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.los = 0
        self.bytes = 0
        self._lock = threading.Lock()
        self._last = 0.0

    def add(self, los: int, nbytes: int) -> None:
        with self._lock:
            self.los += los
            self.bytes += nbytes
            now = time.monotonic()
            if now - self._last > 0.1:
                self._last = now
                self.reporter.progress(self.los, self.bytes)


def _pack(conn: psycopg.Connection, sels: Iterable[Selection], packer: LoPacker,
          stop: threading.Event, progress: _Progress, side: SideConnection | None = None,
          compare: Comparer | None = None) -> None:  # fmt: skip
    los = nbytes = 0
    for sel in sels:
        # closed on any way out: a COPY left unread would hang the rollback that follows
        with contextlib.closing(iter_los(conn, sel, side)) as rows:
            for row in rows:
                if stop.is_set():
                    return
                if isinstance(row, LoRun):
                    if compare is not None:
                        compare.run(row, packer)
                    else:
                        packer.add_run(row.oids, row.metas, row.sizes, row.data)
                    los += len(row.oids)
                    nbytes += len(row.data)
                else:
                    if compare is not None:
                        assert side is not None
                        compare.row(row, packer, side)
                    else:
                        meta = Meta(row.owner, row.acl, row.comment)
                        packer.add_chunks(row.oid, meta, row.size, row.chunks)
                    los += 1
                    nbytes += row.size
                if los >= 2000:
                    progress.add(los, nbytes)
                    los = nbytes = 0
    progress.add(los, nbytes)


def dump(
    conninfo: str,
    req: DumpRequest,
    storage: Storage | None = None,
    stream: BinaryIO | None = None,
    reporter: Reporter = QUIET,
) -> DumpResult:
    """Dump the selected LOs into ``storage`` (a directory of volumes) or ``stream``.

    Any failure or interrupt writes no manifest and removes the volume in progress; the
    volumes already finished are removed too, so nothing half-done stays under the name.
    """
    if req.full and storage is None:
        raise UsageError("--full writes a directory archive (pg_dump's archive is a file in it)")
    if req.since is not None and storage is None:
        raise UsageError("--since writes a directory archive (its restore reads its bases)")
    base = since.open_base(req.since) if req.since is not None else None
    t0 = time.perf_counter()
    with connect(conninfo, autocommit=True, doing="dump") as leader:
        snap.begin(leader)
        sel = referenced.resolve(leader, req.selection)
        snapshot = snap.export(leader)
        log.info("snapshot %s (REPEATABLE READ, READ ONLY): every worker imports it", snapshot)
        source = _source(leader, conninfo, snapshot)
        now = changes.mark(leader) if _has_snapshot_functions(leader) else None
        if now is not None:  # what a later dump --since compares with
            source = replace(source, mark=tuple(json.loads(now.to_json())))
        elif base is not None:
            raise UsageError("--since needs PostgreSQL 13 or later (pg_current_snapshot)")
        progress = _Progress(reporter)
        with contextlib.ExitStack() as stack:
            version = STANDALONE_VERSION if base is None else FORMAT_VERSION
            writer = stack.enter_context(
                ArchiveWriter(storage, stream, req.volume_size, req.level, version)
            )
            work: since.Plan | None = None
            comparers: list[Comparer | None] = []
            if base is not None:
                assert req.since is not None and now is not None
                since.check_source(base, now, source, req.since)
                why = changes.unusable(leader, base.mark, now, f"--since {req.since}")
                found = None
                if why is not None:
                    if req.detect == "wal-summaries":
                        raise UsageError(f"--detect wal-summaries: {why}")
                    reporter.note(f"transaction ids cannot tell what changed since"
                                  f" {req.since} ({why}): every LO it holds is read and"
                                  " compared by checksum")  # fmt: skip
                else:
                    found = changes.detect(leader, sel, base.mark, now, req.detect)
                    if found.quiet:  # no summaries kept at all: the full pass, said in -v only
                        log.info("%s", found.note())
                    else:  # once, -v or not
                        reporter.note(found.note())
                carried = IndexBuilder()
                writer.carried.append(carried)
                with logs.phase(log, f"finding what changed since {req.since}"):
                    work = since.plan(leader, sel, base, writer.metas, carried,
                                      exact=why is None, found=found)  # fmt: skip
                if why is not None:
                    work.detection = f"checksums ({why})"
                log.info("%d new, %d changed, %d carried from the chain, %d gone",
                         work.new, work.changed, work.carried, len(work.gone))  # fmt: skip
                ranges = since.selections(work.dump, sel, req.jobs)
                reporter.totals(len(work.dump), 0)
                if why is not None:
                    from pgblobdump.packed.chain.bychecksum import Comparer
                    from pgblobdump.packed.read.source import directory as source_dir

                    for r in ranges:
                        c = Comparer(source_dir(req.since), base.depth, r.first, r.last,
                                     writer.metas) if r else None  # fmt: skip
                        comparers.append(c)
                        if c is not None:
                            writer.carried.append(c.carried)
            else:
                ranges = [since.Share.of(r) for r in snap.ranges(leader, sel, req.jobs)]
                if reporter.shown:
                    reporter.totals(catalog.count_selected(leader, [sel]), 0)
            log.info("%s: %s", plural(len(ranges), "worker"),
                     ", ".join(_oids(r.first, r.last) if r else "nothing"
                               for r in ranges))  # fmt: skip
            pg_dump = None
            if req.full:
                from pgblobdump.packed.pgdump import database as full

                assert storage is not None  # refused above
                tc = full.pg_dump_for(full.server_major(leader), req.pg_dump_major)
                pg_dump = stack.enter_context(full.PgDump(tc, conninfo, snapshot, storage))
            packers = [writer.worker() for _ in ranges]
            with logs.phase(log, "reading and packing the LOs"):
                _run_workers(conninfo, leader, snapshot, ranges, packers, progress, comparers)
            if pg_dump is not None:
                reporter.note(f"waiting for pg_dump {pg_dump.tc.version}")
                writer.files.append(pg_dump.finish())
                source = replace(source, pg_dump=PgDumpFile(pg_dump.tc.version, DATABASE_FILE))
            # The snapshot's transaction ends before the manifest is written: a connection
            # lost at this COMMIT fails the run with no archive, never an exit 3 next to
            # an archive that reads as complete.
            leader.execute("COMMIT")
            incremental = None
            if work is not None:
                assert base is not None
                for c in comparers:
                    if c is not None:
                        work.absorb(c)
                writer.put_file(GONE_NAME, work.gone_file())
                totals = writer.totals
                incremental = Incremental(
                    chain=work.chain(base),
                    los=totals.los + work.carried, bytes=totals.bytes + work.carried_bytes,
                    new=work.new, changed=work.changed, carried=work.carried,
                    gone=len(work.gone), metadata_only=work.metadata,
                    detection=work.detection,
                )  # fmt: skip
            with logs.phase(log, "writing the index and the manifest"):
                manifest = writer.finish(source, incremental)
            files = list(writer.files) + [f for f in [writer.manifest_file] if f is not None]
    reporter.progress(progress.los, progress.bytes)
    return DumpResult(manifest.los, manifest.bytes, time.perf_counter() - t0, snapshot,
                      files, manifest.incremental)  # fmt: skip


def _run_workers(
    conninfo: str,
    leader: psycopg.Connection,
    snapshot: str,
    ranges: list[since.Share],
    packers: list[LoPacker],
    progress: _Progress,
    comparers: list[Comparer | None] | None = None,
) -> None:
    """Worker 1 runs on the leader's connection in this thread; the others in threads on
    their own connections. The first failure stops every worker and is raised."""
    compare = comparers or [None] * len(ranges)
    stop = threading.Event()
    errors: list[BaseException] = []
    conns: list[psycopg.Connection] = []

    def work(k: int) -> None:
        try:
            doing = f"dump worker {k + 1}"
            with (
                connect(conninfo, autocommit=True, doing=doing) as conn,
                SideConnection(conninfo, snapshot, f"{doing} (its second connection)",
                               conns) as side,
            ):  # fmt: skip
                conns.append(conn)
                snap.begin(conn, snapshot)
                _pack(conn, ranges[k], packers[k], stop, progress, side, compare[k])
                conn.execute("COMMIT")
        except BaseException as e:
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(1, len(ranges))]
    for t in threads:
        t.start()
    try:
        with SideConnection(conninfo, snapshot, "dump (its second connection)", conns) as side:
            _pack(leader, ranges[0], packers[0], stop, progress, side, compare[0])
    except BaseException:
        _stop_all(threads, stop, conns)
        raise
    for t in threads:
        _join(t, stop, conns)
    if errors:
        raise errors[0]


def _cancel(conn: psycopg.Connection) -> None:
    with contextlib.suppress(Exception):  # the worker may be between statements or gone
        conn.cancel_safe(timeout=5)


def _join(t: threading.Thread, stop: threading.Event, conns: list[psycopg.Connection]) -> None:
    """Wait for a worker, staying responsive to Ctrl-C (which then stops them all)."""
    try:
        while t.is_alive():
            t.join(0.2)
    except BaseException:
        _stop_all([t], stop, conns)
        raise


def _stop_all(
    threads: list[threading.Thread], stop: threading.Event, conns: list[psycopg.Connection]
) -> None:
    """After a failure: every worker told to stop, its statement cancelled, and waited for
    STOP_WAIT at most: a worker whose server no longer answers is left behind (a daemon
    thread), so that the clean-up (the archive's files removed) runs all the same."""
    stop.set()
    for c in list(conns):
        _cancel(c)
    deadline = time.monotonic() + STOP_WAIT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
