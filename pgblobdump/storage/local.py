"""A local directory as archive storage."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from pgblobdump.errors import FileError, NotFound, from_os_error
from pgblobdump.storage.base import CLAIM_NAME, NameTaken, claim_body, describe_claim


class LocalDirectory:
    """Files in ``path``. ``create`` writes ``.NAME.part`` and renames it to NAME when
    done (after an fsync, so a finished name is never a torn file); failures leave no
    part behind and become our errors (a full disk is InsufficientResources)."""

    def __init__(self, path: Path, create: bool = False) -> None:
        self.path = path
        self.description = str(path)
        self._claimed = False
        if create:
            # As pg_dump -Fd: no parents (a mistyped path fails, not grows a tree), and
            # readable by its owner only: it holds LO bytes other users may not read.
            try:
                path.mkdir(mode=0o700, exist_ok=True)
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
        try:
            (self.path / name).unlink(missing_ok=True)
        except OSError as e:
            raise from_os_error(e, "remove") from e

    def write_new(self, name: str, data: bytes) -> None:
        final = self.path / name
        part = self.path / f".{name}.part"
        try:
            with part.open("xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(part, final)  # unlike a rename, fails when the name is taken
            except FileExistsError:
                raise NameTaken(f"{final} already exists: another run wrote it") from None
            except OSError as e:
                # No hard links on this file system: the next best, a check then a rename.
                if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                    raise
                if final.exists():
                    raise NameTaken(f"{final} already exists: another run wrote it") from None
                part.replace(final)
        except OSError as e:
            raise from_os_error(e, "write") from e
        finally:
            with contextlib.suppress(OSError):
                part.unlink(missing_ok=True)

    def claim(self, what: str) -> None:
        path = self.path / CLAIM_NAME
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            holder = b""
            with contextlib.suppress(OSError):
                holder = path.read_bytes()
            raise FileError(
                f"{self.path}: {describe_claim(holder)} is writing here; choose a new name"
                f" (if that run was killed, remove {self.path} first)"
            ) from None
        except OSError as e:
            raise from_os_error(e, "create") from e
        self._claimed = True
        try:
            with open(fd, "wb") as f:
                f.write(claim_body(what))
            others = sorted(p.name for p in self.path.iterdir() if p.name != CLAIM_NAME)
        except BaseException as e:
            with contextlib.suppress(Exception):
                self.release()
            if isinstance(e, OSError):
                raise from_os_error(e, "write the claim in") from e
            raise
        if others:
            self.release()
            raise FileError(f"{self.path} exists and is not an empty directory; choose a new name")

    def release(self) -> None:
        if self._claimed:
            self.remove(CLAIM_NAME)
            self._claimed = False

    def sync(self) -> None:
        """Make the renames durable: fsync the directory itself."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
