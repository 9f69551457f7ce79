"""A directory archive's data files read ahead by threads (toc.lo.directory): every LO's
bytes in list order across many read batches, errors at the LO they belong to (the LOs
before it are given first, as a walk reading each file in turn gives them), and a walk
left early stops its threads. No server: the archive is built by toc.build."""

from __future__ import annotations

import contextlib
import gzip
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pytest

from pgblobdump.errors import CorruptArchive, PgBlobDumpError
from pgblobdump.toc import lo as los
from pgblobdump.toc.build import write_directory
from pgblobdump.toc.lo import directory
from pgblobdump.toc.reader import open_archive

COUNT = 5 * directory.READ_BATCH + 7


@dataclass(frozen=True)
class _Meta:
    owner: str | None
    acl: tuple[str, ...] | None = None
    comment: str | None = None


class _Source:
    database = "db"
    server_version = "17.10"

    def __init__(self, oids: list[int]) -> None:
        self.oids = oids

    def los(self) -> Iterable[tuple[int, _Meta]]:
        # owners change every 100 LOs: pg_dump 17's layout then has several list files
        return ((o, _Meta("alice" if (o // 100) % 2 else "bob")) for o in self.oids)

    def pieces(self) -> Iterable[object]:
        return ()

    def read_lo(self, oid: int) -> Iterable[bytes]:
        return ()


def _content(oid: int) -> bytes:
    if oid % 3 == 0:
        return b""  # empty: learnt once, then no decompressor
    if oid == 250:
        return bytes(range(256)) * 400  # over SMALL_FILE stored: read when asked for
    return f"lo {oid} ".encode() * (oid % 7)


def _build(root: Path, layout: int) -> dict[int, bytes]:
    root.mkdir()
    oids = list(range(1, COUNT + 1))

    @contextlib.contextmanager
    def lists(name: str) -> Iterator[BinaryIO]:
        with open(root / name, "wb") as f:
            yield f

    with open(root / "toc.dat", "wb") as toc:
        write_directory(_Source(oids), toc, lists, "gzip", layout)
    want = {}
    for oid in oids:
        data = _content(oid)
        if oid == 77:  # an uncompressed data file where a .gz is expected: read as is
            (root / f"blob_{oid}.dat").write_bytes(data)
        else:
            (root / f"blob_{oid}.dat.gz").write_bytes(gzip.compress(data, mtime=0))
        want[oid] = data
    return want


def _walk(root: Path, stop: int | None = None) -> tuple[dict[int, bytes], BaseException | None]:
    got: dict[int, bytes] = {}
    try:
        with open_archive(root) as a:
            for lo, pieces in los.iter_data(a):
                got[lo.oid] = b"".join(pieces)
                if stop is not None and len(got) == stop:
                    break
    except PgBlobDumpError as e:
        return got, e
    return got, None


@pytest.mark.parametrize("layout", [16, 17])
def test_every_lo_in_order_across_batches(tmp_path: Path, layout: int) -> None:
    want = _build(tmp_path / "a", layout)
    assert max(len(gzip.compress(_content(250))), len(_content(250))) > directory.SMALL_FILE
    got, err = _walk(tmp_path / "a")
    assert err is None
    assert got == want and list(got) == sorted(want)  # list order is OID order here


@pytest.mark.parametrize("bad", [1, directory.READ_BATCH, 3 * directory.READ_BATCH + 5, COUNT])
@pytest.mark.parametrize("how", ["missing", "directory"])
def test_an_error_comes_at_its_lo(tmp_path: Path, bad: int, how: str) -> None:
    root = tmp_path / "a"
    _build(root, 17)
    (root / f"blob_{bad}.dat.gz").unlink()
    if how == "directory":  # os.read fails (EISDIR): the error of a file there but unreadable
        (root / f"blob_{bad}.dat.gz").mkdir()
    got, err = _walk(root)
    assert list(got) == list(range(1, bad))
    if how == "missing":
        assert isinstance(err, CorruptArchive) and f"large object {bad} has no data" in str(err)
    else:
        assert err is not None and f"blob_{bad}.dat.gz" in str(err)


def test_a_bad_list_line_comes_at_its_place(tmp_path: Path) -> None:
    root = tmp_path / "a"
    _build(root, 16)
    lines = (root / "blobs.toc").read_bytes().splitlines(keepends=True)
    lines[150] = b"not a line\n"
    (root / "blobs.toc").write_bytes(b"".join(lines))
    got, err = _walk(root)
    assert list(got) == list(range(1, 151))
    assert isinstance(err, CorruptArchive) and "blobs.toc line 151" in str(err)


def test_a_walk_left_early_stops_its_readers(tmp_path: Path) -> None:
    _build(tmp_path / "a", 17)
    before = {t for t in threading.enumerate() if t.name.startswith("pgbd-lo-read")}
    got, err = _walk(tmp_path / "a", stop=10)
    assert err is None and len(got) == 10
    after = {t for t in threading.enumerate() if t.name.startswith("pgbd-lo-read")}
    assert after <= before
