"""``import --follow-symlinks`` on a directory: a file reached through symbolic links
(the walk lists a link that stays inside the directory under the link's key) opened and
stat'ed at its real path, which must still be inside the directory when it is opened
(and the file opened, as the kernel names it, too: a directory swapped for a link
between the check and the open is caught).
The place itself never follows a link (files/localobjects.py)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from pgblobdump.errors import FileError, NotFound
from pgblobdump.files.objects import Entry, Place


class Readable(Protocol):
    """What import reads files through: a Place, or a Place whose links are followed."""

    def open(self, key: str) -> contextlib.AbstractContextManager[BinaryIO]: ...

    def stat(self, key: str) -> Entry | None: ...


class Followed:
    """``place`` (a local directory, ``root``) read through its links, never out of it."""

    def __init__(self, place: Place, root: Path) -> None:
        self.place = place
        self.root = root
        self.real = root.resolve()

    def _path(self, key: str) -> Path | None:
        try:
            p = (self.root / key).resolve(strict=True)
        except FileNotFoundError:
            return None
        except (OSError, RuntimeError) as e:
            raise FileError(f"cannot read {self.root / key}: {e}") from e
        if not p.is_relative_to(self.real):
            raise FileError(f"{self.root / key} now leads out of {self.root}: not read")
        return p

    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[BinaryIO]:
        p = self._path(key)
        if p is None:
            raise NotFound(f"{self.root / key}: no such file")
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise FileError(f"cannot read {self.root / key}: {e.strerror}") from e
        with os.fdopen(fd, "rb") as f:
            # a directory of the path swapped for a link between _path() and the open
            check_inside(fd, self.real, f"{self.root / key}")
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FileError(f"{self.root / key} is not a regular file")
            yield f

    def stat(self, key: str) -> Entry | None:
        p = self._path(key)
        if p is None:
            return None
        st = os.stat(p, follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise FileError(f"{self.root / key} is not a regular file")
        return Entry(key, st.st_size, st.st_mtime_ns)


def check_inside(fd: int, real: Path, name: str) -> None:
    """The file open as ``fd`` is inside ``real`` (a resolved directory) where it is
    now, as the kernel has it opened; else FileError (the caller closes ``fd``)."""
    try:
        at = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError as e:
        raise FileError(f"cannot tell where {name} is ({e.strerror}): not read") from e
    if not at.is_absolute() or not at.is_relative_to(real):
        raise FileError(f"{name} now leads out of {real}: not read")


def readable(place: Place, follow_symlinks: bool) -> Readable:
    """How import reads ``place``'s files: through its links when asked (a directory)."""
    root = getattr(place, "root", None)
    if follow_symlinks and not place.is_s3 and isinstance(root, Path):
        return Followed(place, root)
    return place
