"""Export's jobs: N threads, each reading one OID range with the dump's reader
(pg/lostream) under the one exported snapshot (a second connection sharing it for an LO
over 1 MiB on the lo_get path) and putting each LO as an object (files/objects): its
sha256 computed on the way, its holes left as gaps (a sparse file locally), each stored
object entered in the job's journal segment. The first failure, or Ctrl-C, stops them
all; the objects in flight are waited for and journaled, so a rerun skips them.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import psycopg

from pgblobdump.errors import FileError
from pgblobdump.files.exporting import manifest
from pgblobdump.files.exporting.journal import Found, Segments
from pgblobdump.files.exporting.plan import Names
from pgblobdump.files.objects import Place
from pgblobdump.packed.format.holes import runs
from pgblobdump.pg import snapshot as snap
from pgblobdump.pg.connect import connect
from pgblobdump.pg.lostream import LoRow, LoRun, MetaTuple, Selection, iter_los
from pgblobdump.pgconstants import LOBLKSIZE
from pgblobdump.report.reporter import Reporter

FLUSH_LOS = 5000
"""A job's journal segment is written once this many LOs are stored..."""
FLUSH_SECONDS = 2.0
"""... or this long after the last one: at most this much is written again after a kill."""
STOP_WAIT = 30.0


@dataclass
class Tally:
    """What the jobs did, summed (thread-safe): LOs and bytes written, LOs found stored
    already (adopted: an interrupted run's objects, verified by sha256), names changed."""

    los: int = 0
    bytes: int = 0
    adopted: int = 0
    renamed: list[tuple[int, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Job:
    """One job's share of the work and where its results go."""

    sels: list[Selection]
    segments: Segments


def _pieces(data: memoryview, size: int) -> list[tuple[int, memoryview]]:
    """An LO's bytes as (offset, data) pieces with its runs of whole zero pages left out
    (holes: a sparse file locally)."""
    if size > LOBLKSIZE and 0 in data[::LOBLKSIZE].tobytes():
        keep = runs(data.tobytes(), 0, size, 1)
        return [(b, data[b:e]) for b, e in keep]
    return [(0, data)] if size else []


class _Hashing:
    """A big LO's chunks as pieces, hashed as they pass, holes left out."""

    def __init__(self, chunks: Iterable[bytes], size: int) -> None:
        self.chunks = chunks
        self.size = size
        self.sha = hashlib.sha256()
        self.read = 0

    def __iter__(self) -> Iterator[tuple[int, bytes | memoryview]]:
        for chunk in self.chunks:
            start = self.read
            self.read += len(chunk)
            self.sha.update(chunk)
            final = self.read == self.size
            for b, e in runs(chunk, start, self.size if final else None, 1):
                yield start + b, memoryview(chunk)[b:e]


class Worker:
    """One job: its LOs read and put (see the module docstring)."""

    def __init__(self, place: Place, names: Names, found: Found, tally: Tally,
                 reporter: Reporter, stop: threading.Event) -> None:  # fmt: skip
        self.place, self.names, self.found = place, names, found
        self.tally, self.reporter, self.stop = tally, reporter, stop
        self.pending: dict[str, manifest.Row] = {}
        self.stored: list[manifest.Row | list[manifest.Row]] = []
        """Rows stored, not journaled yet (a big LO's in a cell completed after its put)."""
        self.lock = threading.Lock()

    def run(self, conn: psycopg.Connection, side: snap.SideConnection, job: Job) -> None:
        last = time.monotonic()
        try:
            with self.place.putter() as putter:
                self.putter = putter
                for sel in job.sels:
                    with contextlib.closing(iter_los(conn, sel, side)) as rows:
                        for item in rows:
                            if self.stop.is_set():
                                return
                            if isinstance(item, LoRun):
                                self._run(item)
                            else:
                                self._big(item)
                            now = time.monotonic()
                            if len(self.stored) >= FLUSH_LOS or now - last > FLUSH_SECONDS:
                                self._flush(job.segments)
                                last = now
        finally:
            self._flush(job.segments, final=True)

    def _flush(self, segments: Segments, final: bool = False) -> None:
        """Journal the rows stored so far; while objects are in flight (S3), only those
        below the lowest OID still in flight, so that a job's segments follow one another
        in OID order (the manifest merges them as sorted streams) and the rest wait for
        the next flush. ``final``: every row stored (the putter has ended)."""
        with self.lock:
            cells, self.stored = self.stored, []
            floor = min((r.oid for r in self.pending.values()), default=None)
            if floor is not None and not final:
                self.stored = [c for c in cells if _oid(c) > floor]
                cells = [c for c in cells if _oid(c) < floor]
        rows = [c[0] if isinstance(c, list) else c for c in cells]
        for r in rows:
            segments.add(r)
        segments.flush()
        if rows:
            with self.tally.lock:
                self.tally.los += len(rows)
                self.tally.bytes += sum(r.size for r in rows)
                los, nbytes = self.tally.los, self.tally.bytes
            self.reporter.progress(los, nbytes)

    def _done(self, key: str) -> None:
        with self.lock:
            self.stored.append(self.pending.pop(key))

    def _row(self, oid: int, meta: MetaTuple, size: int, sha: str) -> manifest.Row:
        named = self.names(oid)
        src = self.names.source(oid)
        owner, acl, comment = meta
        if named.why:
            with self.tally.lock:
                self.tally.renamed.append((oid, named.path, named.why))
        return manifest.Row(oid, named.path, size, sha, owner or "", manifest.acl_text(acl),
                            comment or "", src.row, src.rows, named.why)  # fmt: skip

    def _run(self, run: LoRun) -> None:
        view = memoryview(run.data)
        at = 0
        done = self.found.done
        for oid, meta, size in zip(run.oids, run.metas, run.sizes, strict=True):
            data = view[at : at + size]
            at += size
            if oid in done:
                continue
            row = self._row(oid, meta, size, "")
            if row.path in self.found.others:
                self._adopt(row, hashlib.sha256(data).hexdigest())
            else:
                self._hash_put(row, data)

    def _hash_put(self, row: manifest.Row, data: memoryview) -> None:
        row = row._replace(sha256=hashlib.sha256(data).hexdigest())
        with self.lock:
            self.pending[row.path] = row
        self.putter.put(row.path, _pieces(data, row.size), row.size, self._meta(row),
                        done=self._done)  # fmt: skip

    def _meta(self, row: manifest.Row) -> dict[str, str] | None:
        """An S3 object's user metadata; none locally (an extended attribute per file
        costs a system call, and the manifest says it all)."""
        return {"pgblobdump-oid": str(row.oid)} if self.place.is_s3 else None

    def _big(self, item: LoRow) -> None:
        if item.oid in self.found.done:
            return  # the reader drains the chunks
        row = self._row(item.oid, (item.owner, item.acl, item.comment), item.size, "")
        hashing = _Hashing(item.chunks, item.size)
        if row.path in self.found.others:
            for _ in hashing:
                pass
            self._adopt(row, hashing.sha.hexdigest())
            return
        # the sha256 is known once the pieces are read, which the put does before it
        # returns (``done`` may come before or after): the row's cell is completed then,
        # before this thread next journals
        cell = [row]

        def done(key: str) -> None:
            with self.lock:
                self.stored.append(cell)

        self.putter.put(row.path, hashing, row.size, self._meta(row), done=done)
        if hashing.read != item.size:
            raise FileError(
                f"LO {item.oid}: the object store took {hashing.read:,} of its {item.size:,} bytes"
            )
        cell[0] = _with_sha(row, hashing.sha.hexdigest())

    def _adopt(self, row: manifest.Row, sha: str) -> None:
        """An object at this LO's name that no segment lists (an interrupted run stored it
        before journaling it): kept when its bytes are this LO's, else refused."""
        got = hashlib.sha256()
        with self.place.open(row.path) as f:
            while block := f.read(1 << 20):
                got.update(block)
        if got.hexdigest() != sha:
            raise FileError(
                f"{self.place.description}: {row.path} exists and is not LO {row.oid} as this"
                " export reads it (written by something else, or the LO changed since);"
                " move it away and run the export again"
            )
        with self.lock:
            self.stored.append(_with_sha(row, sha))
        with self.tally.lock:
            self.tally.adopted += 1


def _oid(cell: manifest.Row | list[manifest.Row]) -> int:
    return cell[0].oid if isinstance(cell, list) else cell.oid


def _with_sha(row: manifest.Row, sha: str) -> manifest.Row:
    return row._replace(sha256=sha)


def run_jobs(conninfo: str, snapshot: str, jobs: list[Job], worker: Callable[[], Worker],
             stop: threading.Event) -> None:  # fmt: skip
    """Each job in its own thread on its own connection (the snapshot imported); the
    first failure (or Ctrl-C in this thread) stops them all and is raised once every
    job has stopped (its objects in flight stored and journaled)."""
    errors: list[BaseException] = []
    conns: list[psycopg.Connection] = []
    # waited on instead of Thread.join: a join that Ctrl-C interrupts can leave the
    # thread taken for ended (CPython 3.11), and the command then exits under its feet
    ended = [threading.Event() for _ in jobs]

    def work(k: int) -> None:
        try:
            doing = f"export job {k + 1}"
            with (
                connect(conninfo, autocommit=True, doing=doing) as conn,
                snap.SideConnection(conninfo, snapshot, f"{doing} (its second connection)",
                                    conns) as side,
            ):  # fmt: skip
                conns.append(conn)
                snap.begin(conn, snapshot)
                w = worker()
                w.run(conn, side, jobs[k])
                if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
                    conn.execute("COMMIT")
        except BaseException as e:
            errors.append(e)
            stop.set()
        finally:
            ended[k].set()

    for k in range(len(jobs)):
        threading.Thread(target=work, args=(k,), daemon=True).start()
    try:
        for e in ended:
            while not e.wait(0.2) and not errors:
                pass
            if errors:
                break
    except BaseException:
        _stop_all(ended, stop, conns)
        raise
    if errors:
        _stop_all(ended, stop, conns)
        raise errors[0]


def _stop_all(ended: list[threading.Event], stop: threading.Event,
              conns: list[psycopg.Connection]) -> None:  # fmt: skip
    """Every job told to stop and its statement cancelled; each then waits for its
    objects in flight and journals them (STOP_WAIT at most)."""
    stop.set()
    for c in list(conns):
        with contextlib.suppress(Exception):
            c.cancel_safe(timeout=5)
    deadline = time.monotonic() + STOP_WAIT
    for e in ended:
        e.wait(max(0.0, deadline - time.monotonic()))
