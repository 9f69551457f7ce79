"""Damaged LO data of real pg_dump archives is reported, never read as valid: a data file
cut short or emptied, a data file or a blobs list line missing, an LO record cut out of a
custom archive's block, a tar archive cut short. One line naming the file and the LO,
exit 7; undamaged archives still read (tests/toc/test_real_archives.py)."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pgblobdump.cli import cli
from pgblobdump.errors import CorruptArchive
from pgblobdump.toc import streamend
from pgblobdump.toc.compression import SUFFIXES, Stream
from tests.toc.build import stored_chunks
from tests.toc.conftest import Corpus

COMPRESSED_DIRS = [
    "pg16-directory-gzip",
    "pg17-directory-gzip",
    "pg17-directory-lz4",
    "pg17-directory-zstd",
    "pg18-directory-gzip",
]
ALL_DIRS = ["pg16-directory-none", "pg17-directory-none", *COMPRESSED_DIRS]


def _toc(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, ["toc", *map(str, args)])


def _error(result: Result) -> str:
    """The one-line error of a run that failed with exit 7."""
    assert result.exit_code == 7, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def _copy(corpus: Corpus, name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(corpus.archives[name].path, target)
    return target


def _data_file(archive: Path, oid: int) -> Path:
    return next(archive.glob(f"blob_{oid}.dat*"))


def _all_fail(archive: Path, oid: int, *expected: str) -> None:
    """summary, los and extract of LO ``oid`` fail alike, naming what is expected."""
    for args in (["summary", archive], ["los", archive, "--json"], ["extract", archive, oid]):
        line = _error(_toc(*args))
        assert str(archive) in line and f"large object {oid}" in line, (args, line)
        for text in expected:
            assert text in line, (args, line)


# -- a 0-byte or truncated data file ---------------------------------------------------
@pytest.mark.parametrize("name", ["pg16-directory-gzip", "pg17-directory-gzip"])
def test_empty_gzip_data_file(corpus: Corpus, name: str, tmp_path: Path) -> None:
    # Extracted as 0 bytes with exit 0 before, where the LO had 5 bytes ('hello').
    archive = _copy(corpus, name, tmp_path)
    _data_file(archive, 1002).write_bytes(b"")
    _all_fail(archive, 1002, "blob_1002.dat.gz", "an empty file")


@pytest.mark.parametrize("name", COMPRESSED_DIRS)
@pytest.mark.parametrize("oid", [1003, 1004, 2001])
def test_truncated_data_file(corpus: Corpus, name: str, oid: int, tmp_path: Path) -> None:
    # summary and los took the size of the file and exited 0 before.
    archive = _copy(corpus, name, tmp_path)
    victim = _data_file(archive, oid)
    raw = victim.read_bytes()
    for keep in (len(raw) - 1, len(raw) // 2, 3):
        victim.write_bytes(raw[:keep])
        _all_fail(archive, oid, victim.name)
    # The same file whole again: all three read it.
    victim.write_bytes(raw)
    assert _toc("summary", archive).exit_code == 0
    assert _toc("extract", archive, oid).stdout_bytes == corpus.los[oid]


def test_damaged_gzip_data_file(corpus: Corpus, tmp_path: Path) -> None:
    archive = _copy(corpus, "pg17-directory-gzip", tmp_path)
    victim = _data_file(archive, 1004)
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2 : len(raw) // 2 + 16] = bytes(16)  # the middle of the deflate data
    victim.write_bytes(bytes(raw))
    _all_fail(archive, 1004, "blob_1004.dat.gz", "damaged")


@pytest.mark.parametrize("name", COMPRESSED_DIRS)
def test_stream_end_of_every_real_data_file(corpus: Corpus, name: str) -> None:
    """Every data file pg_dump wrote is complete; every proper prefix of one is not
    (the empty one excepted for lz4 and zstd, which write an empty LO as 0 bytes);
    extract's decompressor agrees on each."""
    archive = corpus.archives[name].path
    algorithm = corpus.archives[name].compression
    files = sorted(archive.glob(f"*.dat{SUFFIXES[algorithm]}"))
    assert len(files) > len(corpus.los)  # every LO's file, and the table's
    for path in files:
        raw = path.read_bytes()
        cuts = set(range(min(len(raw), 300))) | set(range(0, len(raw), 997))
        cuts |= set(range(max(0, len(raw) - 40), len(raw)))
        for cut in [*sorted(cuts), len(raw)]:
            data = raw[:cut]
            head = data[: streamend.WINDOW]
            reason = streamend.incomplete(
                head, cut, lambda at, n, d=data: d[at : at + n], algorithm
            )
            stream = Stream(algorithm, "x", 1, path.name)
            try:
                stream.feed(data, 0)
                stream.finish()
                decompressed = True
            except CorruptArchive:
                decompressed = False
            whole = cut == len(raw) or (cut == 0 and algorithm != "gzip")
            assert (reason is None) == whole, (path.name, cut, reason)
            assert decompressed == whole, (path.name, cut)


def test_uncompressed_data_file_cut_short_is_undetectable(corpus: Corpus, tmp_path: Path) -> None:
    """Documented in docs/toc.md: an uncompressed data file has no framing, so one cut
    short reads as a shorter LO (its first bytes, exactly), and only that LO changes."""
    archive = _copy(corpus, "pg17-directory-none", tmp_path)
    victim = _data_file(archive, 1004)
    assert victim.read_bytes() == corpus.los[1004]  # no framing: the file is the bytes
    victim.write_bytes(corpus.los[1004][:100])
    summary = _toc("summary", archive, "--json")
    assert summary.exit_code == 0, summary.output
    s = json.loads(summary.stdout)
    assert s["lo_count"] == s["los_with_data"] == len(corpus.los)
    assert s["lo_data_bytes"] == sum(map(len, corpus.los.values())) - len(corpus.los[1004]) + 100
    rows = json.loads(_toc("los", archive, "--json").stdout)
    assert {r["oid"]: r["size"] for r in rows} == {
        oid: 100 if oid == 1004 else len(data) for oid, data in corpus.los.items()
    }
    for oid, data in corpus.los.items():
        out = tmp_path / f"{oid}.bin"
        extracted = _toc("extract", archive, oid, "-o", out)
        assert extracted.exit_code == 0, extracted.output
        assert out.read_bytes() == (data[:100] if oid == 1004 else data), oid


# -- a data file or a blobs list line missing -------------------------------------------
@pytest.mark.parametrize("name", ALL_DIRS)
def test_missing_data_file(corpus: Corpus, name: str, tmp_path: Path) -> None:
    archive = _copy(corpus, name, tmp_path)
    victim = _data_file(archive, 2004)
    victim.unlink()
    _all_fail(archive, 2004, f"{victim.name} is missing")


def _list_with(archive: Path, oid: int) -> Path:
    """blobs.toc (16) or the blobs_<dumpId>.toc (17+) listing LO ``oid``."""
    lists = sorted(archive.glob("blobs*.toc"))
    return next(p for p in lists if f"{oid} blob_{oid}.dat\n" in p.read_text())


@pytest.mark.parametrize("name", ALL_DIRS)
@pytest.mark.parametrize("oid", [1002, 3000000000])
def test_line_removed_from_blobs_list(corpus: Corpus, name: str, oid: int, tmp_path: Path) -> None:
    # los listed the other LOs and exited 0 before; extract said "not in this archive".
    archive = _copy(corpus, name, tmp_path)
    listing = _list_with(archive, oid)
    listing.write_text(listing.read_text().replace(f"{oid} blob_{oid}.dat\n", ""))
    kind = "BLOB METADATA" if corpus.archives[name].major >= 17 else "BLOB"
    _all_fail(archive, oid, f"has a {kind} entry but no line in {listing.name}")


def test_blobs_list_emptied_and_line_added(corpus: Corpus, tmp_path: Path) -> None:
    archive = _copy(corpus, "pg17-directory-gzip", tmp_path)
    listing = _list_with(archive, 3000000000)  # lo_bob's group with an ACL: one LO
    listing.write_text("")
    _all_fail(archive, 3000000000, f"no line in {listing.name}")
    # A line for an LO that no entry creates, its data file copied from another LO's.
    listing.write_text("3000000000 blob_3000000000.dat\n4000000000 blob_4000000000.dat\n")
    shutil.copy(_data_file(archive, 1002), archive / "blob_4000000000.dat.gz")
    for args in (["summary", archive], ["los", archive]):
        line = _error(_toc(*args))
        assert f"{listing.name} holds large object 4000000000, which has no BLOB METADATA" in line


def test_duplicate_line_in_blobs_list(corpus: Corpus, tmp_path: Path) -> None:
    archive = _copy(corpus, "pg16-directory-gzip", tmp_path)
    listing = archive / "blobs.toc"
    listing.write_text(listing.read_text() + "2005 blob_2005.dat\n")
    line = _error(_toc("summary", archive))
    assert "blobs.toc holds large object 2005 more than once" in line


def test_tar_line_removed_from_blobs_list(corpus: Corpus, tmp_path: Path) -> None:
    """A tar archive's blobs.toc member, rewritten without one line (members kept)."""
    damaged = tmp_path / "damaged.tar"
    with tarfile.open(corpus.tar.path) as src, tarfile.open(damaged, "w", format=src.format) as out:
        for member in src.getmembers():
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name == "blobs.toc":
                data = data.replace(b"2003 blob_2003.dat\n", b"")
                member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    _all_fail(damaged, 2003, "has a BLOB entry but no line in blobs.toc")


# -- custom archives: an LO record cut out of a block -----------------------------------
@pytest.mark.parametrize("name", ["pg16-custom-none", "pg17-custom-zstd-piped"])
def test_lo_cut_out_of_custom_block(corpus: Corpus, name: str, tmp_path: Path) -> None:
    # pg_dump 16 writes the BLOBS block last, and a dump written to a pipe has no block
    # positions: cutting LO 1002's record (oid, its chunks, the 0 length) out leaves a
    # well-formed archive; los listed the other LOs and exited 0 before.
    src = corpus.archives[name].path
    chunks = stored_chunks(src, 1002)
    start = chunks[0].offset - 10  # Int oid, Int length
    end = chunks[-1].offset + len(chunks[-1].data) + 5  # the ending 0 length
    raw = src.read_bytes()
    damaged = tmp_path / "damaged.dump"
    damaged.write_bytes(raw[:start] + raw[end:])
    kind = "BLOB METADATA" if corpus.archives[name].major >= 17 else "BLOB"
    for args in (["summary", damaged], ["los", damaged], ["extract", damaged, "1002"]):
        line = _error(_toc(*args))
        assert f"large object 1002 has a {kind} entry but no data in the large objects" in line


# -- a tar archive cut short -------------------------------------------------------------
def test_truncated_tar(corpus: Corpus, tmp_path: Path) -> None:
    src = corpus.tar.path
    raw = src.read_bytes()
    with tarfile.open(src) as t:
        members = t.getmembers()
        end = t.offset  # where the end-of-archive marker starts
    toc, blob = members[0], next(m for m in members if m.name == "blob_1004.dat")
    boundary = blob.offset  # between two members
    cuts = [100, 300, toc.offset_data + 10, boundary, boundary + 100, blob.offset_data + 7, end]
    cut = tmp_path / "cut.tar"
    for n in cuts:
        cut.write_bytes(raw[:n])
        for args in (["summary", cut], ["los", cut], ["extract", cut, "1002"]):
            line = _error(_toc(*args))
            assert f"{cut}: file ends early (truncated?) at byte {n}" in line, (n, line)
            assert "not one written by pg_dump" not in line
    # Cut inside the end-of-archive marker, every member whole: still read.
    cut.write_bytes(raw[: end + 100])
    assert _toc("summary", cut).exit_code == 0
