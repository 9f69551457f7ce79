"""How import reads a small file whole: at a directory's, one ``openat`` from the
directory's descriptor (reached from the root one directory at a time, never through a
symbolic link, and kept while the files come from it, as they do in key order), one
``read``, one ``fstat`` of the descriptor read, one ``close``: a third of what a file
object and a second stat by path cost, which is most of import's work on small files.
Elsewhere (S3, ``--follow-symlinks``) through the place's ``open`` and ``stat``.
A directory on a file's path turned into a link (or a file) since the walk makes the
open fail with ELOOP or ENOTDIR: ``Linked``, and the file is skipped (files/importing/
ingest.py), not the run failed."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from pgblobdump.errors import FileError, from_os_error
from pgblobdump.files.importing.follow import Readable
from pgblobdump.files.objects import Entry, Place

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK


LINKED = "changed into a link while imported (a part of its path is now a link or a file)"


class Linked(FileError):
    """A directory on the file's path (or the file) became a symbolic link or a file
    after the walk (ELOOP, ENOTDIR at the open): the file is skipped, not read through."""


def _linked(e: BaseException | None) -> bool:
    """``e``, or an error it was raised from, is ELOOP or ENOTDIR."""
    while e is not None:
        if isinstance(e, OSError) and e.errno in (errno.ELOOP, errno.ENOTDIR):
            return True
        e = e.__cause__
    return False


Hook = Callable[[str], None] | None
"""Called with the key between reading a file and stat'ing it again (tests)."""


def whole(place: Readable, key: str, limit: int, hook: Hook = None) -> tuple[bytes, Entry | None]:
    """At most ``limit`` bytes of file ``key`` and its stat once read (None: gone)."""
    if isinstance(place, DirReader):
        return place.whole(key, limit, hook)
    with place.open(key) as f:
        data = _read_up_to(f, limit)
    if hook is not None:
        hook(key)
    return data, place.stat(key)


def _read_up_to(f: BinaryIO, n: int) -> bytes:
    parts = []
    got = 0
    while got < n:
        more = f.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return parts[0] if len(parts) == 1 else b"".join(parts)


class DirReader:
    """A local directory's files, for one job (its descriptors are its own)."""

    def __init__(self, place: Place, root: Path) -> None:
        self.place = place
        self.root = root
        self._rel: str | None = None
        self._fd = -1

    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[BinaryIO]:
        with contextlib.ExitStack() as stack:
            try:
                f = stack.enter_context(self.place.open(key))
            except FileError as e:
                if _linked(e):
                    raise Linked(f"{self.root / key}: {LINKED}") from e
                raise
            yield f

    def stat(self, key: str) -> Entry | None:
        return self.place.stat(key)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._rel = -1, None

    def _dir(self, rel: str) -> int:
        if rel == self._rel:
            return self._fd
        self.close()
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in rel.split("/") if rel else ():
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._rel = fd, rel
        return fd

    def whole(self, key: str, limit: int, hook: Hook = None) -> tuple[bytes, Entry | None]:
        rel, _, name = key.rpartition("/")
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=self._dir(rel))
        except FileNotFoundError:
            return b"", None
        except OSError as e:  # ELOOP, ENOTDIR: a link or a file on the way
            if _linked(e):
                raise Linked(f"{self.root / key}: {LINKED}") from e
            raise from_os_error(e, what=f"cannot read {self.root / key}") from e
        try:
            # O_NONBLOCK: a FIFO put in the file's place since the walk does not hang the
            # open (a regular file's reads ignore it); the fstat after reading refuses it
            parts = [os.read(fd, limit)]
            got = len(parts[0])
            if hook is not None:
                hook(key)
            # the file read, by its descriptor: replaced since, it is the one read that counts
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise FileError(f"{self.root / key} is not a regular file")
            while got < min(limit, st.st_size):  # a short read: the rest
                more = os.read(fd, limit - got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
                st = os.fstat(fd)
        except OSError as e:  # EAGAIN: a FIFO with a writer; EIO...
            raise from_os_error(e, what=f"cannot read {self.root / key}") from e
        finally:
            os.close(fd)
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        return data, Entry(key, st.st_size, st.st_mtime_ns)


@contextlib.contextmanager
def reader(place: Place, follow_symlinks: bool) -> Iterator[Readable]:
    """How one job reads ``place``'s files (see the module's docstring)."""
    from pgblobdump.files.importing.follow import readable

    root = getattr(place, "root", None)
    if place.is_s3 or follow_symlinks or not isinstance(root, Path):
        yield readable(place, follow_symlinks)
        return
    r = DirReader(place, root)
    try:
        yield r
    finally:
        r.close()
