"""A local directory as a place of objects (files under nested directories).

Every file and directory is reached from the place's root one part at a time with
``O_NOFOLLOW`` (``dir_fd`` opens), so a symbolic link on the way, placed there before or
during a run, is refused rather than followed out of the place. A file is written as a
hidden part beside its final name and hard-linked to that name, which fails when the
name is taken: nothing is ever overwritten, even racing another writer.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import BinaryIO

from pgblobdump.errors import FileError, NotFound, PgBlobDumpError, from_os_error
from pgblobdump.files.keys import (
    EXPORT_STATE,
    OWN_NAME,
    TOOL_MADE,
    TOOL_PREFIX,
    Entry,
    Pieces,
    Skipped,
    check_key,
)
from pgblobdump.storage.base import NameTaken

DIR_MODE = 0o700
FILE_MODE = 0o600
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FDS_KEPT = 512
"""Directory descriptors kept open between puts (a run writing into many directories
reopens the rest)."""
_parts = itertools.count()


class LocalObjects:
    """Files under ``root``."""

    is_s3 = False

    def __init__(self, root: Path, create: bool = False) -> None:
        self.root = root
        self.description = str(root)
        if create:
            try:
                root.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            except OSError as e:
                raise from_os_error(e, "create the directory") from e
        if not root.is_dir():
            if root.exists() or root.is_symlink():
                raise FileError(f"{root} is not a directory")
            raise NotFound(f"{root}: no such directory")
        self._local = threading.local()
        self._all: list[dict[str, int]] = []
        self._lock = threading.Lock()

    # -- directories -----------------------------------------------------------------
    def _dir(self, rel: str, make: bool) -> int:
        """A descriptor of directory ``rel`` (``""``: the root), made (0700) when ``make``.
        Kept open for this thread's next puts (each thread has its own, so none is closed
        under another's feet); ELOOP/ENOTDIR when a part is a link or a file."""
        fds: dict[str, int] | None = getattr(self._local, "fds", None)
        if fds is None:
            fds = self._local.fds = {}
            with self._lock:
                self._all.append(fds)
        fd = fds.get(rel)
        if fd is not None:
            return fd
        if rel == "":
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        else:
            parent_rel, _, name = rel.rpartition("/")
            parent = self._dir(parent_rel, make)
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                if not make:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile by another job
                    os.mkdir(name, DIR_MODE, dir_fd=parent)
                fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        if len(fds) >= _FDS_KEPT:
            _close_all(fds)
            if rel != "":  # the parents closed too: this one's path is reopened next time
                fds[rel] = fd
                return fd
        fds[rel] = fd
        return fd

    def close(self) -> None:
        """Close every thread's kept descriptors (when no put is running any more)."""
        with self._lock:
            for fds in self._all:
                _close_all(fds)

    def __enter__(self) -> LocalObjects:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _problem(self, e: OSError, key: str, doing: str) -> PgBlobDumpError:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            return FileError(
                f"cannot {doing} {self.root / key}: a part of its path is a symbolic link or a"
                " file (links are never followed)"
            )
        e.filename = str(self.root / key)
        return from_os_error(e, doing)  # a full disk is InsufficientResources

    # -- writing ---------------------------------------------------------------------
    @contextlib.contextmanager
    def putter(self, in_flight: int = 16) -> Iterator[LocalPutter]:
        """Files are written in the caller's thread (the kernel's page cache is the
        only queue); ``in_flight`` is for S3."""
        yield LocalPutter(self)

    def _put(self, key: str, pieces: Pieces, size: int,
             metadata: Mapping[str, str] | None) -> None:  # fmt: skip
        check_key(key)
        rel, _, name = key.rpartition("/")
        try:
            d = self._dir(rel, make=True)
            part = f"{TOOL_PREFIX}-part-{os.getpid()}-{next(_parts)}"
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, FILE_MODE, dir_fd=d)  # fmt: skip
        except OSError as e:
            raise self._problem(e, key, "create") from e
        try:
            try:
                end = 0
                for offset, data in pieces:
                    view = memoryview(data)
                    at = offset
                    while view:  # a short write (a signal, a quota) goes on where it ended
                        n = os.pwrite(fd, view, at)
                        view, at = view[n:], at + n
                    end = at
                if end < size:
                    os.ftruncate(fd, size)  # a hole to the end: the file's size, no blocks
                for k, v in (metadata or {}).items():
                    with contextlib.suppress(OSError):  # a file system without user xattrs
                        os.setxattr(fd, f"user.{k}", v.encode())
            finally:
                os.close(fd)
            self._link(d, part, name, key)
        except OSError as e:
            raise self._problem(e, key, "write") from e
        finally:
            with contextlib.suppress(OSError):
                os.unlink(part, dir_fd=d)

    def _link(self, d: int, part: str, name: str, key: str) -> None:
        try:
            os.link(part, name, src_dir_fd=d, dst_dir_fd=d, follow_symlinks=False)
        except FileExistsError:
            raise NameTaken(f"{self.root / key} already exists") from None
        except OSError as e:
            # no hard links on this file system: the next best, a check then a rename
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            try:
                os.stat(name, dir_fd=d, follow_symlinks=False)
            except FileNotFoundError:
                os.rename(part, name, src_dir_fd=d, dst_dir_fd=d)
                return
            raise NameTaken(f"{self.root / key} already exists") from None

    def replace(self, key: str, data: bytes) -> None:
        """The tool's own small file (a manifest, a journal): written whole, synced and
        renamed over the old one."""
        check_key(key, own=True)
        rel, _, name = key.rpartition("/")
        part = f"{TOOL_PREFIX}-part-{os.getpid()}-{next(_parts)}"
        d = -1
        try:
            d = self._dir(rel, make=True)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, FILE_MODE, dir_fd=d)  # fmt: skip
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(part, name, src_dir_fd=d, dst_dir_fd=d)
        except OSError as e:
            raise self._problem(e, key, "write") from e
        finally:
            if d >= 0:
                with contextlib.suppress(OSError):
                    os.unlink(part, dir_fd=d)

    def check_writable(self) -> None:
        """A probe file made and removed in the root (``os.access`` says yes to root)."""
        probe = f"{TOOL_PREFIX}-probe-{os.getpid()}-{next(_parts)}"
        try:
            d = self._dir("", make=False)
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         FILE_MODE, dir_fd=d)  # fmt: skip
            os.close(fd)
            os.unlink(probe, dir_fd=d)
        except OSError as e:
            raise from_os_error(e, "write in", str(self.root)) from e

    def flush(self) -> None:
        """Every file written so far on disk (one sync of the whole system: cheaper than
        an fsync per file of a million)."""
        os.sync()

    def remove(self, key: str) -> None:
        rel, _, name = check_key(key).rpartition("/")
        try:
            os.unlink(name, dir_fd=self._dir(rel, make=False))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise self._problem(e, key, "remove") from e

    # -- reading ---------------------------------------------------------------------
    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[BinaryIO]:
        rel, _, name = key.rpartition("/")
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=self._dir(rel, make=False))  # fmt: skip
        except FileNotFoundError as e:
            raise NotFound(f"{self.root / key}: no such file") from e
        except OSError as e:
            raise self._problem(e, key, "read") from e
        with os.fdopen(fd, "rb") as f:
            yield f

    def stat(self, key: str) -> Entry | None:
        rel, _, name = key.rpartition("/")
        try:
            st = os.stat(name, dir_fd=self._dir(rel, make=False), follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ENOTDIR:
                return None
            raise self._problem(e, key, "read") from e
        if not stat.S_ISREG(st.st_mode):
            raise FileError(f"{self.root / key} is not a regular file")
        return Entry(key, st.st_size, st.st_mtime_ns)

    def metadata(self, key: str) -> dict[str, str]:
        """The file's user.* extended attributes, without ``user.``."""
        with self.open(key) as f:
            try:
                names = os.listxattr(f.fileno())
            except OSError:
                return {}
            return {n[5:]: os.getxattr(f.fileno(), n).decode(errors="replace")
                    for n in names if n.startswith("user.")}  # fmt: skip

    def walk(self, follow_symlinks: bool = False) -> Iterator[Entry | Skipped]:
        """Every regular file in key order (a directory's entries sorted as their keys
        sort). A symbolic link is skipped, or with ``follow_symlinks`` followed when it
        stays inside the root (a link out of it, or a loop, is skipped). The tool's own
        files are left out; another name starting ``.pgblobdump`` is skipped (OWN_NAME)."""
        real = self.root.resolve()
        yield from self._walk(self.root, "", follow_symlinks, real, set())

    def _walk(self, path: Path, rel: str, follow: bool, real: Path,
              seen: set[tuple[int, int]]) -> Iterator[Entry | Skipped]:  # fmt: skip
        try:
            st = path.stat()
            if (st.st_dev, st.st_ino) in seen:
                yield Skipped(rel, "a directory seen already (a loop of links)")
                return
            seen.add((st.st_dev, st.st_ino))
            with os.scandir(path) as it:
                found = list(it)
        except OSError as e:
            yield Skipped(rel or ".", f"cannot list it: {e.strerror}")
            return
        keyed: list[tuple[str, str, os.DirEntry[str], bool | None]] = []
        for d in found:
            key = f"{rel}/{d.name}" if rel else d.name
            if d.name.startswith(TOOL_PREFIX):
                if not _tool_made(d):  # a user's file named like the tool's: said
                    keyed.append((key, key, d, None))
                continue
            try:
                is_dir = d.is_dir(follow_symlinks=follow)
            except OSError:
                is_dir = False
            keyed.append((key + "/" if is_dir else key, key, d, is_dir))
        keyed.sort(key=lambda t: t[0])
        for _, key, d, kind in keyed:
            if kind is None:
                yield Skipped(key, OWN_NAME)
            else:
                yield from self._entry(d, key, kind, follow, real, seen)

    def _entry(self, d: os.DirEntry[str], key: str, is_dir: bool, follow: bool, real: Path,
               seen: set[tuple[int, int]]) -> Iterator[Entry | Skipped]:  # fmt: skip
        if d.is_symlink():
            if not follow:
                yield Skipped(key, "a symbolic link (not followed without --follow-symlinks)")
                return
            try:
                target = Path(d.path).resolve(strict=True)
            except (OSError, RuntimeError):
                yield Skipped(key, "a symbolic link to nothing (or a loop)")
                return
            if not target.is_relative_to(real):
                yield Skipped(key, f"a symbolic link out of {self.root}")
                return
        if is_dir:
            yield from self._walk(Path(d.path), key, follow, real, seen)
            return
        try:
            st = d.stat(follow_symlinks=follow)
        except OSError as e:
            yield Skipped(key, f"cannot read it: {e.strerror}")
            return
        if not stat.S_ISREG(st.st_mode):
            yield Skipped(key, "not a regular file")
            return
        yield Entry(key, st.st_size, st.st_mtime_ns)


def _tool_made(d: os.DirEntry[str]) -> bool:
    """A name the tool gives its own files: a part being written, a probe, an export's
    state directory (with its ``export.json``)."""
    if d.name.startswith(TOOL_MADE):
        return True
    return d.name == EXPORT_STATE and os.path.isfile(os.path.join(d.path, "export.json"))


def _close_all(fds: dict[str, int]) -> None:
    for fd in fds.values():
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


class LocalPutter:
    def __init__(self, place: LocalObjects) -> None:
        self.place = place

    def put(
        self,
        key: str,
        pieces: Pieces,
        size: int,
        metadata: Mapping[str, str] | None = None,
        done: Callable[[str], None] | None = None,
    ) -> None:
        self.place._put(key, pieces, size, metadata)
        if done is not None:
            done(key)
