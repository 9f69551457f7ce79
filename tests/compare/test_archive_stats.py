"""Archive sizes on disk and the free-space check before a dump."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pgblobdump.compare import safety
from pgblobdump.compare.archive_stats import archive_stats, remove_archive
from pgblobdump.compare.matrix import Contender
from pgblobdump.errors import InsufficientResources


def test_directory_archive(tmp_path: Path) -> None:
    top = tmp_path / "dump.dir"
    top.mkdir()
    (top / "toc.dat").write_bytes(b"x" * 1000)
    for i in range(10):
        (top / f"blob_{i}.dat.gz").write_bytes(b"y" * 20)
    (top / "sub").mkdir()
    (top / "sub" / "more").write_bytes(b"z" * 5000)
    s = archive_stats(top)
    assert s.files == 12
    assert s.dirs == 2  # find | wc -l would print 14
    assert s.apparent_bytes == 1000 + 10 * 20 + 5000
    assert s.toc_bytes == 1000
    # Every non-empty small file takes at least one block: allocation dwarfs the bytes.
    assert s.allocated_bytes % 512 == 0
    assert s.allocated_bytes >= 12 * 512
    remove_archive(top)
    assert not top.exists()


def test_single_file_archive(tmp_path: Path) -> None:
    f = tmp_path / "a.dump"
    f.write_bytes(os.urandom(10_000))
    s = archive_stats(f)
    assert (s.files, s.dirs, s.apparent_bytes, s.toc_bytes) == (1, 0, 10_000, None)
    assert s.allocated_bytes >= 10_000
    remove_archive(f)
    remove_archive(f)  # already gone: fine
    assert not f.exists()


DIRECTORY = Contender("pg_dump", 17, "directory")
CUSTOM = Contender("pg_dump", 17, "custom")


def test_estimate_matches_the_anchor() -> None:
    # 17 -Fd of 1M empty LOs: 1,001,001 files, 4.07 GB allocated. The estimate must cover it.
    need = safety.estimate(DIRECTORY, 1_000_000, 0, 4096)
    assert need.inodes >= 1_001_001
    assert 4.07e9 <= need.bytes <= 6e9
    # 16 -Fc: 222.6 MB.
    assert 222.6e6 <= safety.estimate(CUSTOM, 1_000_000, 0, 4096).bytes <= 600e6


class _Vfs:
    def __init__(self, bavail: int, favail: int, files: int = 10**7) -> None:
        self.f_frsize = 4096
        self.f_bavail = bavail
        self.f_favail = favail
        self.f_files = files


def test_refuses_without_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.statvfs", lambda _p: _Vfs(bavail=1000, favail=10**7))
    with pytest.raises(InsufficientResources, match=r"needs about 4\.\d GiB but only 3\.9 MiB"):
        safety.check_space(tmp_path, DIRECTORY, 1_000_000, 0)


def test_refuses_without_inodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.statvfs", lambda _p: _Vfs(bavail=10**9, favail=5000))
    with pytest.raises(InsufficientResources, match=r"1,003,000 inodes .* only 5,000 are free"):
        safety.check_space(tmp_path, DIRECTORY, 1_000_000, 0)
    # A custom archive is one file: the same file system is fine for it.
    safety.check_space(tmp_path, CUSTOM, 1_000_000, 0)


def test_no_inode_limit_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system that reports no inode limit (btrfs: f_files 0, so f_favail 0 too) is
    not taken as full: the need is estimated and returned, and nothing is refused."""
    monkeypatch.setattr("os.statvfs", lambda _p: _Vfs(10**9, 0, files=0))
    need = safety.check_space(tmp_path, DIRECTORY, 1_000_000, 0)
    assert need.inodes > 1_000_000  # one file per LO: the need is real, only not comparable
    assert need.bytes <= 10**9 * 4096
    # the same zero free inodes from a file system with a limit is refused
    monkeypatch.setattr("os.statvfs", lambda _p: _Vfs(10**9, 0, files=10**7))
    with pytest.raises(InsufficientResources, match="inodes"):
        safety.check_space(tmp_path, DIRECTORY, 1_000_000, 0)


def test_real_statvfs(tmp_path: Path) -> None:
    assert safety.check_space(tmp_path, DIRECTORY, 100, 0).inodes >= 100
