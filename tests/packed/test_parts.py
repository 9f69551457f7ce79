"""The one cut of an archive (or of its ``--part K/N``) into ``--jobs`` OID ranges, with
no server: exact ranges from a small archive's index, and the N parts' jobs tiling it
as one run of N x jobs would."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.manifest import DumpSource
from pgblobdump.packed.read.parts import job_shares, share
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.write.writer import ArchiveWriter
from pgblobdump.pg.snapshot import job_tiles
from pgblobdump.pgconstants import OID_MAX
from pgblobdump.storage import LocalDirectory

OIDS = [*range(100, 110), 5000, 5001]


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> PackedDirectory:
    storage = LocalDirectory(Path(tmp_path_factory.mktemp("parts")), create=True)
    with ArchiveWriter(storage=storage) as w:
        packer = w.worker()
        for oid in OIDS:
            packer.add(oid, Meta(None, None, None), b"x")
        w.finish(DumpSource(extra={"test": True}))
    return PackedDirectory(storage)


def test_job_tiles() -> None:
    assert job_tiles(None, 1) == (range(1, 2), 1)
    assert job_tiles(None, 3) == (range(1, 4), 3)
    assert job_tiles((1, 2), 2) == (range(1, 3), 4)
    assert job_tiles((2, 3), 4) == (range(5, 9), 12)
    assert job_tiles((3, 3), 1) == (range(3, 4), 3)


@pytest.mark.parametrize(
    ("part", "jobs", "ranges"),
    [
        (None, 1, [(0, OID_MAX)]),
        (None, 3, [(0, 103), (104, 107), (108, OID_MAX)]),
        ((1, 2), 2, [(0, 102), (103, 105)]),
        ((2, 2), 3, [(106, 107), (108, 109), (110, OID_MAX)]),
        ((3, 3), 3, [(108, 108), (109, 109), (110, OID_MAX)]),
    ],
)
def test_job_shares(
    archive: PackedDirectory,
    part: tuple[int, int] | None,
    jobs: int,
    ranges: list[tuple[int, int]],
) -> None:
    assert job_shares(archive, part, jobs) == ranges


@pytest.mark.parametrize(("n", "jobs"), [(1, 2), (2, 2), (3, 2), (2, 3), (5, 1)])
def test_the_parts_jobs_tile_the_archive_as_one_run_would(
    archive: PackedDirectory, n: int, jobs: int
) -> None:
    every = [r for k in range(1, n + 1) for r in job_shares(archive, (k, n), jobs)]
    assert every == job_shares(archive, None, n * jobs)
    assert every[0][0] == 0 and every[-1][1] == OID_MAX
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(every))
    for k in range(1, n + 1):  # each part's jobs cover exactly the part
        mine = job_shares(archive, (k, n), jobs)
        assert (mine[0][0], mine[-1][1]) == share(archive, k, n)
