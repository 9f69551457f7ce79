"""Whole-database dumps: ``dump --full`` and ``restore --full``.

pg_dump writes everything but the LOs (``--no-large-objects``) under the snapshot the LO
workers read (``--snapshot``), as a custom archive streamed into the packed archive as
one more file, ``database.dump``, listed in the manifest with its checksum like any
other. Restore runs pg_restore's pre-data and data sections, then the LOs, then
post-data: tables exist before the LOs (nothing references them yet), and triggers such
as ``lo_manage`` are created after the LOs, so restoring fires none of them.

pg_dump must be at least the server's major (the toolchain's matching major by default,
or ``--pg-dump-major``); pg_restore is the newer of the target's major and the archive's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

import psycopg
import xxhash

from pgblobdump.errors import (
    CorruptArchive,
    ExternalCommandFailed,
    PgBlobDumpError,
    ToolchainError,
    UsageError,
    scrub,
)
from pgblobdump.packed.reader import PackedDirectory
from pgblobdump.packed.request import RestoreRequest, RestoreResult
from pgblobdump.packed.restore import restore
from pgblobdump.pg.connect import connect
from pgblobdump.pg.failure import as_error, with_more
from pgblobdump.pg.target import child_connection
from pgblobdump.proc import Child, run
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.servers import toolchain
from pgblobdump.storage import FileInfo, LocalDirectory, Storage
from pgblobdump.storage.base import why, widened

DATABASE_FILE = "database.dump"
"""The pg_dump custom archive of everything but the LOs, in a --full packed archive."""

_MAJOR = re.compile(r"(\d+)")


def server_major(conn: psycopg.Connection) -> int:
    return conn.info.server_version // 10000


def major_of(version: str) -> int:
    """16 of "16.14", of "17devel"."""
    m = _MAJOR.match(version)
    if m is None:
        raise ValueError(f"not a PostgreSQL version: {version!r}")
    return int(m.group(1))


def pg_dump_for(server: int, major: int | None) -> toolchain.Toolchain:
    """The pg_dump to dump a ``server`` major with (``major`` when given)."""
    chosen = major or server
    if chosen < server:
        raise ToolchainError(
            f"pg_dump {chosen} cannot dump a PostgreSQL {server} server (pg_dump must be at"
            f" least the server's major); use --pg-dump-major {server} or leave it out"
        )
    return toolchain.find(chosen, ("pg_dump",))


class PgDump:
    """pg_dump running beside the LO workers, its archive streamed into ``storage`` as
    DATABASE_FILE. ``finish`` waits for it; leaving the ``with`` block with an error stops
    it and leaves no file behind."""

    def __init__(self, tc: toolchain.Toolchain, conninfo: str, snapshot: str, storage: Storage):
        self.tc = tc
        self.storage = storage
        bare, self.env = child_connection(conninfo)
        self.argv = [str(tc.tool("pg_dump")), "-Fc", "--no-large-objects",
                     f"--snapshot={snapshot}", "-d", bare]  # fmt: skip
        self.info: FileInfo | None = None
        self._error: BaseException | None = None
        self._abort = False
        self._child: Child | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PgDump:
        self._child = Child(self.argv, what="pg_dump", env=self.env, pipe=True).start()
        self._thread = threading.Thread(target=self._copy, name="pgblobdump-pg_dump", daemon=True)
        self._thread.start()
        return self

    def _copy(self) -> None:
        proc = self._child
        assert proc is not None
        try:
            with self.storage.create(DATABASE_FILE) as f:
                h = xxhash.xxh3_128()
                size = 0
                while chunk := proc.stdout.read(1 << 20):
                    f.write(chunk)
                    h.update(chunk)
                    size += len(chunk)
                if proc.wait() != 0 or self._abort:
                    raise _Stopped  # the file is not kept
            self.info = FileInfo(DATABASE_FILE, size, h.hexdigest())
        except BaseException as e:
            self._error = e

    def finish(self) -> FileInfo:
        """Wait for pg_dump; its file's FileInfo, or ExternalCommandFailed with its words."""
        assert self._thread is not None and self._child is not None
        while self._thread.is_alive():
            self._thread.join(0.2)  # stays responsive to Ctrl-C
        if self._child.returncode:
            raise ExternalCommandFailed(
                f"pg_dump {self.tc.version} failed (exit {self._child.returncode}): {self._tail()}"
            )
        if self._error is not None:
            raise self._error
        assert self.info is not None
        return self.info

    def _tail(self) -> str:
        assert self._child is not None
        return scrub(self._child.said())

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        left = None
        if exc is not None and self._child is not None:
            self._abort = True
            if self._child.poll() is None:
                self._child.stop()
            if self._thread is not None:
                self._thread.join(30)
            if self.info is not None:  # it had finished: the LOs failed after it
                try:
                    self.storage.remove(DATABASE_FILE)
                except Exception as failure:  # the server went away: name it
                    left = f"{self.storage.description}/{DATABASE_FILE} ({why(failure)})"
        if self._child is not None:
            self._child.close()
        if left is not None and exc is not None:
            wider = widened(exc, f"could not remove {left}: delete it")
            if wider is not exc:
                raise wider from exc


class _Stopped(Exception):
    """pg_dump failed or was stopped: its half-written file is dropped."""


@contextlib.contextmanager
def local_file(storage: Storage, name: str) -> Iterator[Path]:
    """A path pg_restore can read ``name`` from: the file itself in a local directory,
    else a temporary copy."""
    if isinstance(storage, LocalDirectory):
        yield storage.path / name
        return
    with tempfile.NamedTemporaryFile(suffix=f"-{name}") as tmp:
        with storage.open(name) as f:
            while chunk := f.read(1 << 20):
                tmp.write(chunk)
        tmp.flush()
        yield Path(tmp.name)


class PgRestore:
    """pg_restore of a --full archive's DATABASE_FILE into ``conninfo``, section by
    section; ``options`` pass through (--no-owner, --no-acl, --no-comments)."""

    def __init__(
        self, conninfo: str, path: Path, target: int, dumped: int, options: Sequence[str], jobs: int
    ) -> None:
        self.tc = toolchain.find(max(target, dumped), ("pg_restore",))
        bare, self.env = child_connection(conninfo)
        self.path = path
        self.base = [str(self.tc.tool("pg_restore")), "--exit-on-error", "-d", bare, *options]
        self.jobs = jobs

    def section(self, name: str) -> None:
        """Restore one section (pre-data, data, post-data); ExternalCommandFailed quoting
        pg_restore if it fails."""
        jobs = ["-j", str(self.jobs)] if self.jobs > 1 and name != "pre-data" else []
        run(
            [*self.base, f"--section={name}", *jobs, str(self.path)],
            env=self.env,
            what=f"pg_restore {self.tc.version} --section={name}",
        )


def dumped_by(archive: PackedDirectory) -> str:
    """The version of the pg_dump that wrote a --full archive's DATABASE_FILE, from the
    manifest's ``source.pg_dump`` (what ``dump --full`` writes), checked: a manifest
    edited by hand or damaged is a CorruptArchive naming the field, not a traceback."""
    where = f"{archive.where}/manifest.json"
    manifest = archive.manifest or {}
    if "source" not in manifest:
        raise CorruptArchive(f"{where}: the manifest has no 'source'")
    source = manifest["source"]
    if not isinstance(source, dict):
        raise CorruptArchive(f"{where}: 'source' is {_shown(source)}, not an object")
    if source.get("pg_dump") is None:
        raise UsageError(
            f"{archive.where} holds LOs only (dumped without --full): restore it without --full"
        )
    info = source["pg_dump"]
    if not isinstance(info, dict):
        raise CorruptArchive(f"{where}: 'source.pg_dump' is {_shown(info)}, not an object")
    version, file = info.get("version"), info.get("file")
    if not isinstance(version, str) or not _MAJOR.match(version):
        raise CorruptArchive(
            f"{where}: 'source.pg_dump.version' is {_shown(version)}, not a PostgreSQL"
            ' version such as "17.2"'
        )
    if file != DATABASE_FILE:
        raise CorruptArchive(
            f"{where}: 'source.pg_dump.file' is {_shown(file)}, not \"{DATABASE_FILE}\""
        )
    files = manifest.get("files")
    if not isinstance(files, list) or not any(
        isinstance(f, dict) and f.get("name") == DATABASE_FILE for f in files
    ):
        raise CorruptArchive(f"{where}: 'files' does not list {DATABASE_FILE}")
    return version


def _shown(value: object) -> str:
    """A manifest value as a message shows it: ``"16.x"``, ``42``, ``null``, ``an array``."""
    if value is None:
        return "missing (or null)"
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "an array"
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def restore_full(
    conninfo: str,
    archive: PackedDirectory,
    req: RestoreRequest,
    jobs: int = 1,
    reporter: Reporter = QUIET,
    restore_los: Callable[[], RestoreResult] | None = None,
) -> RestoreResult:
    """pg_restore's pre-data and data sections, the LOs, then post-data. The target
    should be an empty database: on a failure the LOs this run made are removed (as in
    any restore), and what pg_restore restored is named as left in place. ``restore_los``
    restores the LOs in place of one connection's ``restore`` (``--jobs N``)."""
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
                reporter.note(f"pg_restore {pg_restore.tc.version}: {section}")
                pg_restore.section(section)
                done.append(section)
            if restore_los is not None:  # --jobs N: the LOs over N connections too
                result = restore_los()
            else:  # its messages name no command to resume it, as they never did
                los_req = dataclasses.replace(req, resume_command="")
                result = restore(conninfo, archive.items(req.skip_damaged), los_req, reporter,
                                 archive.index, archive.index.metas.values)  # fmt: skip
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
