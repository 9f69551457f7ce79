"""Open what a user names as a packed archive: a directory, a stream file, or ``-``."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pgblobdump.errors import FileError, NotAnArchive, NotFound, UsageError, from_os_error
from pgblobdump.packed.format import STREAM_MAGIC
from pgblobdump.packed.index import Index, Meta
from pgblobdump.packed.reader import Item, PackedDirectory, stream_items
from pgblobdump.storage import LocalDirectory
from pgblobdump.storage.s3 import S3Prefix, is_s3


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
def open_source(path: str, skip_damaged: bool = False) -> Iterator[Source]:
    """``skip_damaged``: a directory archive's damaged frames become Damaged items (only
    a directory has the index that names what a damaged frame held)."""
    if is_s3(path):
        archive = PackedDirectory(S3Prefix(path))
        items = archive.items(skip_damaged)
        yield Source(items, archive.index, archive.index.metas.values, archive)
        return
    if skip_damaged and not Path(path).is_dir():
        raise UsageError(
            "--skip-damaged needs a directory archive: only its index can name the LOs a"
            " damaged part held (a stream has none)"
        )
    if path == "-":
        yield Source(stream_items(sys.stdin.buffer, "standard input"), None, None, None)
        return
    p = Path(path)
    if p.is_dir():
        archive = PackedDirectory(LocalDirectory(p))
        items = archive.items(skip_damaged)
        yield Source(items, archive.index, archive.index.metas.values, archive)
        return
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
    """A directory archive (``ls``, ``cat``, ``verify`` need its index), or one on S3."""
    if is_s3(path):
        return PackedDirectory(S3Prefix(path))
    p = Path(path)
    if p.is_file():
        with contextlib.suppress(OSError), p.open("rb") as f:
            if f.read(len(STREAM_MAGIC)) == STREAM_MAGIC:
                raise FileError(
                    f"{p} is a packed stream; ls, cat and verify read directory archives"
                    " (restore reads streams)"
                )
        raise NotAnArchive(f"{p}: not a packed archive (a directory with a manifest.json)")
    return PackedDirectory(LocalDirectory(p))
