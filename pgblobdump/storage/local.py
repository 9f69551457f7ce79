"""A local directory as archive storage."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from pgblobdump.errors import FileError, NotFound, from_os_error


class LocalDirectory:
    """Files in ``path``. ``create`` writes ``.NAME.part`` and renames it to NAME when
    done (after an fsync, so a finished name is never a torn file); failures leave no
    part behind and become our errors (a full disk is InsufficientResources)."""

    def __init__(self, path: Path, create: bool = False) -> None:
        self.path = path
        self.description = str(path)
        if create:
            try:  # no parents, as pg_dump -Fd: a mistyped path fails, not grows a tree
                path.mkdir(exist_ok=True)
            except OSError as e:
                raise from_os_error(e, "create the archive directory") from e
        elif not path.is_dir():
            if path.exists():
                raise FileError(f"{path} is not a directory (a packed archive is one)")
            raise NotFound(f"{path}: no such archive")

    @contextlib.contextmanager
    def create(self, name: str) -> Iterator[BinaryIO]:
        final = self.path / name
        part = self.path / f".{name}.part"
        try:
            f = part.open("xb")
        except OSError as e:
            raise from_os_error(e, "create") from e
        try:
            with f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            part.replace(final)
        except OSError as e:
            raise from_os_error(e, "write") from e
        finally:
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator[BinaryIO]:
        try:
            f = (self.path / name).open("rb")
        except FileNotFoundError as e:
            raise NotFound(f"{self.path / name}: missing from the archive") from e
        except OSError as e:
            raise from_os_error(e, "read") from e
        with f:
            yield f

    def read_range(self, name: str, offset: int, length: int) -> bytes:
        with self.open(name) as f:
            f.seek(offset)
            return f.read(length)

    def size(self, name: str) -> int:
        try:
            return (self.path / name).stat().st_size
        except FileNotFoundError as e:
            raise NotFound(f"{self.path / name}: missing from the archive") from e

    def names(self) -> list[str]:
        return sorted(p.name for p in self.path.iterdir() if not p.name.startswith("."))

    def exists(self, name: str) -> bool:
        return (self.path / name).is_file()

    def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / name).unlink()

    def sync(self) -> None:
        """Make the renames durable: fsync the directory itself."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
