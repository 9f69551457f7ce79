"""What an archive costs on disk: apparent and allocated bytes, files, toc.dat size.

A directory archive of a million LOs is a million small files: its apparent size (what
``ls -l`` adds up) is tiny next to what the file system allocates (``du``), which is the
number that fills a disk. Both come from one ``stat`` per file (``st_blocks`` is in
512-byte units whatever the file system's block size).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

TOC_FILE = "toc.dat"


@dataclass(frozen=True)
class ArchiveStats:
    """Sizes of one archive (a file or a directory tree).

    ``files`` counts regular files; ``dirs`` counts directories including the top one
    (so ``files + dirs`` is what ``find DIR | wc -l`` prints). ``toc_bytes`` is the size of
    a directory archive's toc.dat, None for a single-file archive.
    """

    apparent_bytes: int
    allocated_bytes: int
    files: int
    dirs: int
    toc_bytes: int | None


def _scan(top: str) -> tuple[int, int, int, int]:
    apparent = allocated = files = dirs = 0
    stack = [top]
    while stack:
        path = stack.pop()
        dirs += 1
        with os.scandir(path) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                    continue
                files += 1
                apparent += st.st_size
                allocated += st.st_blocks * 512
    return apparent, allocated, files, dirs


def archive_stats(path: Path) -> ArchiveStats:
    """Measure ``path``: a single archive file, or a directory archive walked recursively."""
    if path.is_dir():
        apparent, allocated, files, dirs = _scan(str(path))
        toc = path / TOC_FILE
        return ArchiveStats(
            apparent, allocated, files, dirs, toc.stat().st_size if toc.is_file() else None
        )
    st = path.stat()
    return ArchiveStats(st.st_size, st.st_blocks * 512, 1, 0, None)


def remove_archive(path: Path) -> None:
    """Remove an archive file or directory; a missing one is fine (nothing was written)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
