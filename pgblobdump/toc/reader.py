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
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

from pgblobdump.errors import CorruptArchive, NotAnArchive, NotFound
from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.entry import TocEntry
from pgblobdump.toc.header import ArchiveHeader, describe, read_header
from pgblobdump.toc.primitives import Reader
from pgblobdump.toc.tocread import RawEntry, read_items

TOC_FILE = "toc.dat"


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
        if self.path.is_dir():
            self.toc_path = self.path / TOC_FILE
            self.root = self.path
            if not self.toc_path.is_file():
                what = "an empty directory" if not any(self.path.iterdir()) else "a directory"
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
        except OSError as e:
            raise NotAnArchive(
                f"{self.name}: cannot be read as a file ({e.strerror or e}); a special file?"
            ) from e
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
        except OSError as e:
            raise NotAnArchive(f"{self.name}: cannot open: {e.strerror}") from e
        with f:
            yield f, os.fstat(f.fileno()).st_size

    def _read_header(self) -> ArchiveHeader:
        with self._open_toc() as (f, size):
            r = Reader(f, self.name, size=size)
            if self.root is None and size >= 262:
                r.fill(262, "the start of the file")
                if r.buf[257:262] == b"ustar":
                    return self._read_tar_header()
            return read_header(r)

    def _read_tar_header(self) -> ArchiveHeader:
        try:
            self._tar = tarfile.open(self.path, "r:")  # noqa: SIM115 (closed by close())
            self._tar.getmember(TOC_FILE)
        except (tarfile.TarError, KeyError, OSError) as e:
            self.close()
            raise NotAnArchive(
                f"{self.name}: a tar archive, but not one written by pg_dump -Ft ({e})"
            ) from e
        with self._open_toc() as (f, size):
            return read_header(Reader(f, f"{self.name}:{TOC_FILE}", size=size))

    # -- entries --------------------------------------------------------------------
    def iter_raw(self) -> Iterator[RawEntry]:
        """Every TOC entry as a tuple of undecoded fields (see tocread.RawEntry)."""
        for item in self.iter_items():
            if isinstance(item, BlobRun):
                yield from item.entries()
            else:
                yield item

    def iter_items(self, runs: bool = True) -> Iterator[RawEntry | BlobRun]:
        """iter_raw with consecutive same-shape BLOB entries grouped into BlobRuns, so
        that a million per-LO entries need no million tuples (fastest)."""
        with self._open_toc() as (f, size):
            f.seek(self.header.toc_offset)
            r = Reader(f, self.name, self.header.int_size, self.header.off_size, size,
                       self.header.toc_offset)  # fmt: skip
            yield from read_items(r, self.header, self.kind == "custom", runs)
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
        except OSError as e:
            raise CorruptArchive(f"{self.name}: cannot open {name}: {e.strerror}") from e
        except ValueError as e:  # a NUL byte: a damaged blobs list, no file name
            raise CorruptArchive(f"{self.name}: bad data file name {name!r}") from e

    def member_size(self, name: str) -> int | None:
        """The size of a data file, or None when it is missing."""
        if self._tar is not None:
            try:
                return self._tar.getmember(name).size
            except KeyError:
                return None
        assert self.root is not None
        try:
            return (self.root / name).stat().st_size
        except (OSError, ValueError):  # ValueError: a NUL byte in a damaged blobs list
            return None

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


def open_archive(path: str | os.PathLike[str]) -> Archive:
    """Open ``path`` (a custom file, a directory, a toc.dat or a tar) and read its header."""
    return Archive(path)


__all__ = ["Archive", "describe", "open_archive"]
