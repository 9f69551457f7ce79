"""A place of many named objects: a local directory or an S3 prefix, as export writes
them (one per LO) and import and ``migrate --to lo`` read them.

Unlike ``storage/`` (an archive's few files), a place holds up to millions of objects
under nested keys, so it offers what that needs:

- **Keys** are ``/``-separated and relative (``check_key`` refuses ``..``, absolute
  names, NUL, empty or over-long parts): no key reaches outside the place.
- **Writing** (``Putter.put``) is atomic and never overwrites: an object appears under
  its key only complete, and a key that exists is ``NameTaken``. A local file is made
  0600 in directories made 0700 (they hold bytes other roles may not read), and no
  symbolic link on its path is followed; gaps between the pieces given are holes of a
  sparse file. On S3 small objects go several at once (a thread pool), big ones as a
  streamed multipart upload; no ACL is ever set.
- **Reading** streams (``open``); ``walk`` lists every object in key order, saying which
  entries it skipped and why (a symbolic link not followed, a special file).

The two kinds are in ``localobjects`` and ``s3objects``; ``open_place`` picks one from
the user's name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import BinaryIO, Protocol

from pgblobdump.files.keys import (
    KEY_MAX,
    PART_MAX,
    TOOL_PREFIX,
    Entry,
    Pieces,
    Skipped,
    UnsafeKey,
    check_key,
    filled,
    key_problem,
)
from pgblobdump.storage.s3config import is_s3

__all__ = ["KEY_MAX", "PART_MAX", "TOOL_PREFIX", "Entry", "Pieces", "Place", "Putter", "Skipped",
           "UnsafeKey", "check_key", "filled", "key_problem", "open_place"]  # fmt: skip


class Putter(Protocol):
    """Writes many objects, some in flight at once; leaving its ``with`` block waits for
    each, and raises the first error (an error of an object in flight is raised by a
    later ``put`` or there)."""

    def put(
        self,
        key: str,
        pieces: Pieces,
        size: int,
        metadata: Mapping[str, str] | None = None,
        done: Callable[[str], None] | None = None,
    ) -> None:
        """Object ``key`` of ``size`` bytes from ``pieces``; ``metadata``: S3 user
        metadata (x-amz-meta-*), user.* extended attributes of a local file where the
        file system keeps them; ``done(key)`` once it is stored (on S3 from one of the
        putter's threads). NameTaken if ``key`` exists."""


class Place(Protocol):
    """Use it in a ``with`` block (or ``close`` it): a directory keeps descriptors of the
    directories it wrote in."""

    description: str
    is_s3: bool

    def __enter__(self) -> Place: ...

    def __exit__(self, *exc: object) -> None: ...

    def close(self) -> None: ...

    def check_writable(self) -> None:
        """Before any work: the place exists and takes a new object (a probe written and
        removed), else one line naming it."""

    def putter(self, in_flight: int = 16) -> contextlib.AbstractContextManager[Putter]: ...

    def open(self, key: str) -> contextlib.AbstractContextManager[BinaryIO]: ...

    def stat(self, key: str) -> Entry | None: ...

    def metadata(self, key: str) -> dict[str, str]: ...

    def walk(self, follow_symlinks: bool = False) -> Iterator[Entry | Skipped]: ...

    def remove(self, key: str) -> None: ...

    def replace(self, key: str, data: bytes) -> None: ...

    def flush(self) -> None:
        """Make what was written durable (a local file system's sync; S3: nothing)."""


def open_place(where: str, create: bool = False) -> Place:
    """The place ``where`` names: ``s3://bucket/prefix`` or a local directory.
    ``create``: to write in it (a directory is made, with its parents, 0700; the place's
    ``check_writable`` is called)."""
    place: Place
    if is_s3(where):
        from pgblobdump.files.s3objects import S3Objects

        place = S3Objects(where)
    else:
        from pathlib import Path

        from pgblobdump.files.localobjects import LocalObjects

        place = LocalObjects(Path(where), create=create)
    if create:
        place.check_writable()
    return place
