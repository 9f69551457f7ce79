"""Open a pg_dump archive (custom file, directory, its toc.dat, or tar) and stream its TOC.

with open_archive("db.dump") as archive:
    print(archive.header.version_text)
    for entry in archive.iter_entries():
        ...
"""

from __future__ import annotations

import contextlib
import os
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

from pgblobdump.errors import CorruptArchive, NotAnArchive, NotFound, from_os_error
from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.entry import TocEntry
from pgblobdump.toc.fields import RawEntry
from pgblobdump.toc.header import ArchiveHeader, describe, read_header
from pgblobdump.toc.primitives import Reader
from pgblobdump.toc.streamend import WINDOW, PRead
from pgblobdump.toc.tocread import read_items

TOC_FILE = "toc.dat"

MemberCheck = Callable[[bytes, int, PRead], "str | None"]
"""``check(head, size, pread)`` of Archive.check_member: what is wrong with a file."""

TAR_BLOCK = 512
"""A tar header's size; ``ustar`` is at byte 257 of it."""
TAR_FIRST_NAME = TOC_FILE.encode() + b"\0"
"""How pg_dump -Ft's first header starts: the name of its first member, toc.dat."""


class Archive:
    """An open archive: ``kind`` is ``custom``, ``directory`` or ``tar``; ``header`` is read.

    ``path`` is what the user named; ``toc_path`` the file holding the header and TOC;
    ``root`` the directory holding data files (directory format). Each iteration opens its
    own handle, so several passes (and nested ones) over the TOC are independent.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.root: Path | None = None
        self._tar: tarfile.TarFile | None = None
        self.kind = "custom"
        self._data_start: int | None = None
        self._root_text: str | None = None  # see _root_prefix
        if self.path.is_dir():
            self.toc_path = self.path / TOC_FILE
            self.root = self.path
            if not self.toc_path.is_file():
                what = "an empty directory" if not any(self.path.iterdir()) else "a directory"
                if (self.path / "manifest.json").is_file():  # packed.format.MANIFEST_NAME
                    what = "a pgblobdump packed archive (ls, cat, restore and unpack read it),"
                raise NotAnArchive(
                    f"{self.name}: not a pg_dump directory archive; it is {what} without {TOC_FILE}"
                )
        elif self.path.is_file():
            self.toc_path = self.path
            self._check_readable()
        elif self.path.exists():
            raise NotAnArchive(f"{self.name}: not a regular file or directory")
        else:
            raise NotFound(f"{self.name}: no such file or directory")
        try:
            self.header = self._read_header()
        except BaseException:
            self.close()
            raise
        if self.is_tar:
            self.kind = "tar"
        elif self.header.format_code == 1:
            self.kind = "custom"
        else:
            # pg_dump writes the tar format code into a directory archive's toc.dat.
            self.kind = "directory"
            if self.root is None:
                self.root = self.toc_path.parent

    def _check_readable(self) -> None:
        """A file that says it is empty may be a special one (/proc/self/mem, /proc/*/
        status): say so, rather than call it an empty file."""
        try:
            if self.path.stat().st_size:
                return
            with self.path.open("rb") as f:
                first = f.read(1)
        except OSError as e:  # the OS would not read it (/proc/self/mem: EIO): 11, not 7
            raise from_os_error(e, what=f"{self.name}: cannot be read as a file") from e
        if first:
            raise NotAnArchive(
                f"{self.name}: a special file that reports no size (like those in /proc);"
                " copy it to a regular file first"
            )

    @property
    def is_tar(self) -> bool:
        return self._tar is not None

    # -- opening --------------------------------------------------------------------
    @contextlib.contextmanager
    def _open_toc(self) -> Iterator[tuple[IO[bytes], int]]:
        if self._tar is not None:
            member = self._tar.getmember(TOC_FILE)
            handle = self._tar.extractfile(member)
            if handle is None:
                raise NotAnArchive(f"{self.name}: tar archive whose {TOC_FILE} is not a file")
            with handle:
                yield handle, member.size
            return
        try:
            f = self.toc_path.open("rb")
        except OSError as e:  # EACCES, EIO...: the file cannot be read, which says nothing of it
            raise from_os_error(e, "read") from e
        with f:
            yield f, os.fstat(f.fileno()).st_size

    def _read_header(self) -> ArchiveHeader:
        with self._open_toc() as (f, size):
            r = Reader(f, self.name, size=size)
            if self.root is None and size:
                r.fill(min(size, TAR_BLOCK), "the start of the file")
                head = r.buf[:TAR_BLOCK]
                if head[257:262] == b"ustar" or (
                    size < TAR_BLOCK and head.startswith(TAR_FIRST_NAME)
                ):  # a tar archive (the second test: one cut inside its first header)
                    return self._read_tar_header()
            return read_header(r)

    def _read_tar_header(self) -> ArchiveHeader:
        try:
            self._tar = tarfile.open(self.path, "r:")  # noqa: SIM115 (closed by close())
            self._tar.getmembers()  # reads every header: a file cut short ends in one
        except (tarfile.TarError, OSError) as e:
            if isinstance(e, OSError) and e.errno is not None:  # reading failed, not its bytes
                self.close()
                what = None if e.filename else f"cannot read {self.name}"
                raise from_os_error(e, "read", what) from e
            cut = _tar_cut(self.name, self.path, self._tar)
            self.close()
            if cut is not None:
                raise CorruptArchive(cut) from e
            raise NotAnArchive(
                f"{self.name}: a tar archive, but not one written by pg_dump -Ft ({e})"
            ) from e
        cut = _tar_cut(self.name, self.path, self._tar)
        if cut is not None:
            self.close()
            raise CorruptArchive(cut)
        try:
            self._tar.getmember(TOC_FILE)
        except KeyError as e:
            self.close()
            raise NotAnArchive(
                f"{self.name}: a tar archive, but not one written by pg_dump -Ft"
                f" (no member {TOC_FILE})"
            ) from e
        with self._open_toc() as (f, size):
            return read_header(Reader(f, f"{self.name}:{TOC_FILE}", size=size))

    # -- entries --------------------------------------------------------------------
    def iter_raw(self) -> Iterator[RawEntry]:
        """Every TOC entry as a tuple of undecoded fields (see fields.RawEntry)."""
        for item in self.iter_items():
            if isinstance(item, BlobRun):
                yield from item.entries()
            else:
                yield item

    def iter_items(self) -> Iterator[RawEntry | BlobRun]:
        """iter_raw with consecutive same-shape BLOB entries grouped into BlobRuns, so
        that a million per-LO entries need no million tuples (fastest)."""
        with self._open_toc() as (f, size):
            f.seek(self.header.toc_offset)
            r = Reader(f, self.name, self.header.int_size, self.header.off_size, size,
                       self.header.toc_offset)  # fmt: skip
            yield from read_items(r, self.header, self.kind == "custom")
            self._data_start = r.offset  # a full pass found where the TOC ends

    def iter_entries(self) -> Iterator[TocEntry]:
        """Every TOC entry, in archive order, decoded one at a time (ReadToc)."""
        from_raw = TocEntry.from_raw
        for raw in self.iter_raw():
            yield from_raw(raw)

    def data_start(self) -> int:
        """Custom format: the file offset just after the TOC, where data blocks begin."""
        if self._data_start is None:
            for _ in self.iter_items():
                pass
        assert self._data_start is not None
        return self._data_start

    def open_member(self, name: str) -> IO[bytes]:
        """A data file of a directory or tar archive, opened for reading."""
        if self._tar is not None:
            try:
                handle = self._tar.extractfile(name)
            except KeyError:
                handle = None
            if handle is None:
                raise CorruptArchive(f"{self.name}: tar archive has no member {name}")
            return handle
        assert self.root is not None
        try:
            return (self.root / name).open("rb")
        except FileNotFoundError as e:  # a file the TOC names is not there: a damaged archive
            raise CorruptArchive(f"{self.name}: cannot open {name}: {e.strerror}") from e
        except OSError as e:  # there but unreadable (EACCES, EISDIR, EIO): 11, not damage
            raise from_os_error(e, "read") from e
        except ValueError as e:  # a NUL byte: a damaged blobs list, no file name
            raise CorruptArchive(f"{self.name}: bad data file name {name!r}") from e

    def check_member(self, name: str, check: MemberCheck) -> tuple[int, str | None] | None:
        """The size of data file ``name`` and what ``check(head, size, pread)`` says of
        its bytes (None: nothing wrong); None when the file is missing. ``head`` is the
        file's first min(size, streamend.WINDOW) bytes; ``pread(offset, n)`` reads more.
        A directory's file is read through a bare descriptor, its first bytes before its
        size: at a few microseconds a file, a file object or an fstat would add half."""
        if self._tar is not None:
            try:
                member = self._tar.getmember(name)
            except KeyError:
                return None
            with self.open_member(name) as f:

                def pread_member(at: int, n: int) -> bytes:
                    f.seek(at)
                    return f.read(n)

                head = pread_member(0, min(member.size, WINDOW))
                return member.size, check(head, member.size, pread_member)
        try:
            fd = os.open(self._root_prefix() + name, os.O_RDONLY)
        except FileNotFoundError:  # only ENOENT is missing; EACCES and the like are 11
            return None
        except OSError as e:
            raise from_os_error(e, "read") from e
        except ValueError:  # a NUL byte in a damaged blobs list: no such file
            return None
        try:
            head = os.pread(fd, WINDOW, 0)
            size = len(head) if len(head) < WINDOW else os.fstat(fd).st_size
            return size, check(head, size, lambda at, n: os.pread(fd, n, at))
        except OSError as e:  # EISDIR, EIO: no filename on a pread error, so name it
            raise from_os_error(e, what=f"cannot read {self._root_prefix() + name}") from e
        finally:
            os.close(fd)

    def member_size(self, name: str) -> int | None:
        """The size of a data file, or None when it is missing."""
        if self._tar is not None:
            try:
                return self._tar.getmember(name).size
            except KeyError:
                return None
        try:
            return os.stat(self._root_prefix() + name).st_size
        except (FileNotFoundError, ValueError):  # ValueError: a NUL byte in a damaged list
            return None
        except OSError as e:  # only ENOENT is missing: EACCES on the directory is 11
            raise from_os_error(e, "read") from e

    def member_path(self, name: str) -> str:
        """The path of a directory archive's file ``name`` (a directory archive only)."""
        assert self.kind == "directory"
        return self._root_prefix() + name

    def _root_prefix(self) -> str:
        """The directory's path and a separator: a data file's path is one concatenation
        away (a Path join costs as much as the stat, a million times over)."""
        if self._root_text is None:
            assert self.root is not None
            self._root_text = os.path.join(self.root, "")
        return self._root_text

    # -- what it is made of -----------------------------------------------------------
    def holds(self, target: str | os.PathLike[str]) -> bool:
        """Whether writing ``target`` would write into this archive: it is the archive
        file or its toc.dat under any name (same device and inode: a hard link, a symlink,
        another spelling), or, for a directory archive, a path inside the directory or a
        hard link to one of its files."""
        try:
            st = os.stat(target)
        except (OSError, ValueError):
            st = None
        own = {_file_id(p) for p in (self.path, self.toc_path)} - {None}
        if st is not None and (st.st_dev, st.st_ino) in own:
            return True
        if self.root is None or self._tar is not None:
            return False
        root = _file_id(self.root)
        for parent in Path(os.path.realpath(target)).parents:
            if _file_id(parent) == root:
                return True
        if st is not None and st.st_nlink > 1 and root is not None and st.st_dev == root[0]:
            with os.scandir(self.root) as entries:  # a hard link made outside the archive
                return any(e.inode() == st.st_ino for e in entries)
        return False

    # -- lifetime -------------------------------------------------------------------
    def close(self) -> None:
        if self._tar is not None:
            self._tar.close()
            self._tar = None

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _file_id(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(device, inode) of ``path``, or None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _tar_cut(name: str, path: Path, tar: tarfile.TarFile | None) -> str | None:
    """Why a tar archive whose headers were read (``tar``, None if its first one could
    not be) is cut short, or None. pg_dump -Ft ends the archive with two zero blocks
    (_CloseArchive), so a complete one has a zero block after its last member; tarfile
    takes a header cut short after the first one for the end of the archive."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    ends = f"{name}: file ends early (truncated?) at byte {size}"
    members: list[tarfile.TarInfo] = getattr(tar, "members", [])  # those read so far
    if not members:
        if size < TAR_BLOCK:
            return f"{ends}, inside the first header of a tar archive written by pg_dump -Ft"
        return None
    last = members[-1]
    if last.offset_data + last.size > size:
        return (
            f"{ends}, inside tar member {last.name} ({last.size:,} bytes from byte"
            f" {last.offset_data})"
        )
    assert tar is not None
    with path.open("rb") as f:
        f.seek(tar.offset)
        rest = f.read(TAR_BLOCK)
    if not rest or rest.count(0) != len(rest):
        return f"{ends}, after tar member {last.name}: no end-of-archive marker"
    return None


def open_archive(path: str | os.PathLike[str]) -> Archive:
    """Open ``path`` (a custom file, a directory, a toc.dat or a tar) and read its header."""
    return Archive(path)


__all__ = ["Archive", "describe", "open_archive"]
