"""The storage interface every backend implements."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import BinaryIO, Protocol


@dataclass(frozen=True)
class FileInfo:
    """A finished file: its name, size and xxh3-128 (hex) of its bytes."""

    name: str
    size: int
    xxh3_128: str


class Storage(Protocol):
    """Named files in one place (a directory, a bucket prefix).

    ``create`` is atomic: the file appears under its name only when the ``with`` block
    ends without an error; on an error nothing of it remains. Readers take byte ranges
    (what an object store serves best) or a whole file front to back.
    """

    description: str

    def create(self, name: str) -> contextlib.AbstractContextManager[BinaryIO]: ...

    def open(self, name: str) -> contextlib.AbstractContextManager[BinaryIO]: ...

    def read_range(self, name: str, offset: int, length: int) -> bytes: ...

    def size(self, name: str) -> int: ...

    def names(self) -> list[str]: ...

    def exists(self, name: str) -> bool: ...

    def remove(self, name: str) -> None:
        """Remove a finished file this run wrote (an aborted dump's volumes)."""
