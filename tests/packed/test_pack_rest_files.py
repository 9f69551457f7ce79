"""pack's choice of a directory archive's files to keep (everything but LO data files),
with no server: the one-regex cut gives _is_lo_data's answer for every name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pgblobdump.packed.pgdump.pack import _is_lo_data, _other_files

NAMES = [
    "toc.dat", "3345.dat.gz", "blobs_3346.toc", "blob_1.dat.gz", "blob_22.dat",
    "blob_.dat.gz", "blob_1a.dat.gz", "blob_1.dat.gz.bak", "xblob_1.dat.gz", "blob_\u0661.dat.gz",
    "blob_2.dat.lz4", "blob_3.DAT.gz", "blob_4.dat\nblob_5.dat.gz", "blob_6.dat.gz\n",
]  # fmt: skip


@pytest.mark.parametrize("suffix", [".gz", "", ".lz4"])
@pytest.mark.parametrize("newlines", [False, True])
def test_other_files_are_what_is_lo_data_leaves(
    tmp_path: Path, suffix: str, newlines: bool
) -> None:
    for name in NAMES:
        if "\n" not in name or newlines:
            (tmp_path / name).write_bytes(b"x")
    (tmp_path / "blob_7.dat.gz").mkdir()  # a directory under an LO file's name: not a file
    (tmp_path / "subdir").mkdir()
    os.symlink(tmp_path / "toc.dat", tmp_path / "link.dat")
    for n in range(300):
        (tmp_path / f"blob_{n + 100}.dat{suffix}").write_bytes(b"")
    want = sorted(
        e.name for e in os.scandir(tmp_path) if e.is_file() and not _is_lo_data(e.name, suffix)
    )
    got = _other_files(str(tmp_path), suffix)
    assert got == want
    assert "toc.dat" in got and "link.dat" in got and "subdir" not in got
    assert ("blob_\u0661.dat.gz" in got) == (suffix != ".gz")  # isdigit() takes it
