"""What the places of objects (files/objects) share: an object's key and the checks
that keep it inside its place, what a walk finds, an object's bytes as pieces."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pgblobdump.errors import FileError

Pieces = Iterable[tuple[int, bytes | memoryview]]
"""An object's bytes as (offset, data) in ascending offsets; a gap between two is zeros."""

TOOL_PREFIX = ".pgblobdump"
"""Names the tool keeps for itself in a place (temporary parts, journals, probes):
``walk`` never lists them."""

OWN_NAME = f"named {TOOL_PREFIX}*, as the tool's own files are (not read)"
"""Why a walk skips a file or directory named like the tool's own but not one."""

TOOL_MADE = (f"{TOOL_PREFIX}-part-", f"{TOOL_PREFIX}-probe-")
"""How the names of the files the tool writes for itself in a place begin: a part being
written, a probe of write access."""
EXPORT_STATE = f"{TOOL_PREFIX}-export"
"""An export's own directory (prefix) in its target: its settings and journal."""
EXPORT_SETTINGS = f"{EXPORT_STATE}/export.json"
"""An export's settings: their presence says the target is an export's (the walks then
leave its state out, and import its manifests)."""

PART_MAX = 255
"""Bytes of one part of a key (NAME_MAX of Linux file systems)."""
KEY_MAX = 1024
"""Bytes of a whole key: S3's limit, under PATH_MAX locally."""


@dataclass(frozen=True)
class Entry:
    """An object: its key (relative, ``/``-separated), size, modification time and, on
    S3, its ETag (what tells a changed object apart)."""

    key: str
    size: int
    mtime_ns: int
    etag: str | None = None


@dataclass(frozen=True)
class Skipped:
    """An entry ``walk`` did not list as an object, and why."""

    key: str
    why: str


class UnsafeKey(FileError):
    """A key that would reach outside the place, or that no file system could hold."""


def check_key(key: str, own: bool = False) -> str:
    """``key`` if it names an object inside a place, else UnsafeKey saying why; ``own``:
    the tool's own file (its name may start with TOOL_PREFIX)."""
    why = key_problem(key, own)
    if why:
        raise UnsafeKey(f"{key!r} is not a safe object name: {why}")
    return key


def key_problem(key: str, own: bool = False) -> str | None:
    """Why ``key`` is no safe object name, or None."""
    if not key:
        return "it is empty"
    if "\0" in key:
        return "it holds a NUL byte"
    if key.startswith("/"):
        return "it is absolute"
    try:
        size = len(key.encode())
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    if size > KEY_MAX:
        return f"it is over {KEY_MAX} bytes"
    for part in key.split("/"):
        if part in ("", ".", ".."):
            return f"it has a {part!r} part" if part else "it has an empty part"
        if len(part.encode()) > PART_MAX:
            return f"a part of it is over {PART_MAX} bytes"
    if not own and key.split("/")[-1].startswith(TOOL_PREFIX):
        return f"names starting {TOOL_PREFIX} are the tool's own"
    return None


def filled(pieces: Pieces, size: int, chunk: int = 1 << 20) -> Iterator[bytes | memoryview]:
    """The bytes of ``pieces`` front to back, gaps as zeros, in chunks of at most
    ``chunk`` zeros (what an object store is sent: it keeps no holes)."""
    at = 0
    for offset, data in pieces:
        if offset < at:
            raise ValueError(f"pieces out of order: {offset} after {at}")
        while at < offset:
            n = min(chunk, offset - at)
            yield bytes(n)
            at += n
        if len(data):
            yield data
            at += len(data)
    if at > size:
        raise ValueError(f"pieces end at {at}, past the size {size}")
    while at < size:
        n = min(chunk, size - at)
        yield bytes(n)
        at += n
