"""Refuse, before starting, a dump that would fill the disk or a folder we cannot write.

A directory archive of N LOs is N files of at least one block each: 1M empty LOs take
~4.1 GB allocated (90 MB apparent) and a million inodes. We estimate generously and
compare with ``statvfs`` of the work directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pgblobdump.compare.matrix import Contender
from pgblobdump.errors import InsufficientResources, from_os_error
from pgblobdump.units import format_bytes

CUSTOM_BYTES_PER_LO = 400
"""pg_dump 16 -Fc writes ~223 bytes of TOC per empty LO; 400 leaves room."""
EXTRA_FILES = 2_000
"""toc.dat, blobs.toc or one blobs_N.toc per 1000 LOs (17+), table data files."""
MARGIN = 1.10
SLACK_BYTES = 64 * 1024**2
"""Room for the rest of the system while the dump runs."""


@dataclass(frozen=True)
class Need:
    """What one archive is expected to take: ``bytes`` allocated and ``inodes``."""

    bytes: int
    inodes: int


def estimate(contender: Contender, count: int, data_bytes: int, block: int) -> Need:
    """An upper estimate of an archive of ``count`` LOs holding ``data_bytes`` of LO data."""
    if contender.file_per_lo:
        files = count + count // 1000 + EXTRA_FILES
        # Every file takes whole blocks; data is counted uncompressed (gzip only shrinks it).
        per_file = max(block, 4096)
        size = files * per_file + data_bytes
        return Need(int(size * MARGIN) + SLACK_BYTES, files)
    size = count * CUSTOM_BYTES_PER_LO + data_bytes
    return Need(int(size * MARGIN) + SLACK_BYTES, 4)


def check_space(workdir: Path, contender: Contender, count: int, data_bytes: int) -> Need:
    """Raise InsufficientResources naming the numbers when ``workdir`` cannot hold it."""
    st = os.statvfs(workdir)
    need = estimate(contender, count, data_bytes, st.f_frsize)
    free = st.f_bavail * st.f_frsize
    what = f"{contender.label} of {count:,} LOs into {workdir}"
    if need.bytes > free:
        raise InsufficientResources(
            f"{what} needs about {format_bytes(need.bytes)} but only {format_bytes(free)} is"
            f" free; {_remedy(contender)}"
        )
    # Some file systems (btrfs) report no inode limit at all: f_files == 0.
    if st.f_files and need.inodes > st.f_favail:
        per_lo = " (one file per LO)" if contender.file_per_lo else ""
        raise InsufficientResources(
            f"{what} needs about {need.inodes:,} inodes{per_lo} but only"
            f" {st.f_favail:,} are free; {_remedy(contender)}"
        )
    return need


def _remedy(contender: Contender) -> str:
    """What to change: a directory archive can become a custom one (one file, far
    smaller); a custom archive is already the small one, so only the place or the count."""
    if contender.file_per_lo:
        return "choose another --workdir, fewer --los, or --formats custom (one file per dump)"
    return "choose another --workdir or fewer --los"


def writable_folder(folder: Path, option: str) -> Path:
    """Create ``folder`` (and its parents) and prove a file can be written there, before
    any work starts; FileError (InsufficientResources for a full disk) naming it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".pgblobdump-probe-{os.getpid()}"
        try:
            with probe.open("xb") as f:
                f.write(b"probe")
        finally:
            probe.unlink(missing_ok=True)
    except OSError as e:
        raise from_os_error(e, what=f"{option} {folder}: cannot create or write there") from e
    return folder
