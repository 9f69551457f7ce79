"""Open what a user names as a packed archive: a directory, a stream file, or ``-``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pgblobdump import storage
from pgblobdump.errors import FileError, NotAnArchive, NotFound, UsageError, from_os_error
from pgblobdump.packed.format.index import Index, Meta
from pgblobdump.packed.format.spec import STREAM_MAGIC
from pgblobdump.packed.read.items import Item
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.read.stream import stream_items


@dataclass
class Source:
    """LOs to restore (``items``: runs of whole LOs and pieces of large ones); ``index``
    and ``metas`` known up front for a directory (so conflicts and missing roles are
    found before anything is written), None for a stream."""

    items: Iterator[Item]
    index: Index | None
    metas: Iterable[Meta] | None
    directory: PackedDirectory | None


@contextlib.contextmanager
def open_source(
    path: str, skip_damaged: bool = False, opened: PackedDirectory | None = None
) -> Iterator[Source]:
    """``skip_damaged``: a directory archive's damaged frames become Damaged items (only
    a directory has the index that names what a damaged frame held). ``opened``: the
    directory archive at ``path``, opened already."""
    if path != storage.STREAM and storage.is_directory(path):
        archive = opened or PackedDirectory(storage.open(path))
        items = archive.items(skip_damaged)
        yield Source(items, archive.index, archive.index.metas.values, archive)
        return
    if skip_damaged and path != storage.STREAM and Path(path).is_file():
        directory(path)  # raises: says what the file is and what to do with it
    if skip_damaged and path == storage.STREAM:
        raise UsageError(
            "--skip-damaged needs a directory archive: only its index can name the LOs a"
            " damaged part held (a stream has none)"
        )
    if path == storage.STREAM:
        yield Source(stream_items(sys.stdin.buffer, "standard input"), None, None, None)
        return
    p = Path(path)
    if not p.exists():
        raise NotFound(f"{p}: no such archive")
    if not p.is_file():
        raise FileError(f"{p}: not a packed archive directory or stream file")
    try:
        f = p.open("rb")
    except OSError as e:
        raise from_os_error(e, "read") from e
    with f:
        yield Source(stream_items(f, str(p)), None, None, None)


def directory(path: str) -> PackedDirectory:
    """A directory archive (``ls``, ``cat``, ``verify``, ``unpack``, ``restore --part``
    and ``--full`` need its index), or one on S3. A stream file is the wrong kind of
    archive (NotAnArchive, exit 7, as for any other file): the message names the fix."""
    if path == storage.STREAM:  # not a file named "-": the same "-" restore reads as stdin
        raise UsageError(
            "- (standard input) is read as a stream: only `pgblobdump restore -` reads one;"
            " this needs a directory archive"
        )
    p = storage.local_path(path)
    if p is not None and p.is_file():
        try:
            with p.open("rb") as f:
                head = f.read(len(STREAM_MAGIC))
        except OSError as e:
            raise from_os_error(e, "read") from e
        if head == STREAM_MAGIC:
            raise NotAnArchive(
                f"{p} is a packed stream, not a directory archive: restore it with"
                f" `pgblobdump restore {p} -d DB`; for ls, cat, verify, unpack and restore"
                " --part/--full, dump again with -o DIR"
            )
        raise NotAnArchive(f"{p}: not a packed archive (a directory with a manifest.json)")
    return PackedDirectory(storage.open(path))
