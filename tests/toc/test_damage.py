"""Damaged archives, missing and special paths, unwritable outputs: one-line errors that
say what is wrong and where, no traceback, no partial output."""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lz4.frame
import pytest
import zstandard
from click.testing import CliRunner, Result

from pgblobdump.cli import cli
from pgblobdump.errors import CorruptArchive
from pgblobdump.report import stream
from pgblobdump.toc.compression import decompressor
from pgblobdump.toc.reader import open_archive
from tests.toc.build import Chunk, stored_chunks
from tests.toc.conftest import Corpus


def _toc(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, ["toc", *map(str, args)])


def _one_line_error(result: Result) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def _chunks(path: Path, oid: int) -> list[Chunk]:
    """Where LO ``oid``'s stored chunks are in a custom archive."""
    return stored_chunks(path, oid)


# -- 6: damaged LO data is damaged data of that LO, not a truncated file -------------------
@pytest.mark.parametrize("name", ["pg16-custom-gzip", "pg17-custom-gzip"])
def test_damaged_compressed_bytes(corpus: Corpus, name: str, tmp_path: Path) -> None:
    src = corpus.archives[name].path
    first = _chunks(src, 1003)[0]
    raw = bytearray(src.read_bytes())
    middle = first.offset + len(first.data) // 2
    raw[middle : middle + 8] = bytes(b ^ 0x5A for b in raw[middle : middle + 8])
    bad = tmp_path / "bad.dump"
    bad.write_bytes(bytes(raw))
    result = _toc("extract", bad, "1003")
    assert result.exit_code == 7
    line = _one_line_error(result)
    assert f"{bad}: damaged gzip data of large object 1003 at byte {first.offset}" in line
    assert "ends early" not in line and "truncated" not in line


def test_damaged_chunk_length(corpus: Corpus, tmp_path: Path) -> None:
    # 17 writes a data block per 1000 LOs of one owner: LO 1003's block is followed by others.
    src = corpus.archives["pg17-custom-lz4"].path
    first = _chunks(src, 1003)[0]
    raw = bytearray(src.read_bytes())
    length_at = first.offset - 5
    raw[length_at + 2] ^= 0x01  # the chunk's length, 65,536 bytes longer
    bad = tmp_path / "bad.dump"
    bad.write_bytes(bytes(raw))
    runs: list[list[str | Path]] = [["extract", bad, "1003"], ["summary", bad], ["los", bad]]
    for args in runs:
        result = _toc(*args)
        assert result.exit_code == 7, args
        line = _one_line_error(result)
        assert f"damaged data of large object 1003 at byte {length_at}" in line, line
        assert "truncated" not in line


def test_damaged_lz4_frame(corpus: Corpus, tmp_path: Path) -> None:
    src = corpus.archives["pg17-custom-lz4"].path
    first = _chunks(src, 1002)[0]
    raw = bytearray(src.read_bytes())
    raw[first.offset : first.offset + 4] = b"\0\0\0\0"  # the frame's magic number
    bad = tmp_path / "bad.dump"
    bad.write_bytes(bytes(raw))
    line = _one_line_error(_toc("extract", bad, "1002"))
    assert f"damaged lz4 data of large object 1002 at byte {first.offset}" in line


# -- 5: extract -o: one line naming the file, nothing partial left behind -----------------
@pytest.mark.parametrize("target", ["/proc/x", "nodir/x"])
def test_extract_to_unwritable(corpus: Corpus, tmp_path: Path, target: str) -> None:
    out = tmp_path / target if not target.startswith("/") else Path(target)
    result = _toc("extract", corpus.archives["pg17-custom-lz4"].path, "1004", "-o", out)
    assert result.exit_code == 11  # FileError
    line = _one_line_error(result)
    assert line == f"Error: cannot write {out}: No such file or directory"


def test_extract_onto_full_disk(corpus: Corpus) -> None:
    full = Path("/dev/full")  # a real device whose every write fails with ENOSPC
    if not full.is_char_device():
        pytest.skip("no /dev/full device")
    result = _toc("extract", corpus.archives["pg17-custom-lz4"].path, "1004", "-o", full)
    assert result.exit_code == 10  # InsufficientResources
    assert _one_line_error(result) == (
        "Error: cannot write /dev/full: No space left on device (the disk is full)"
    )
    assert full.is_char_device()  # written in place, never renamed over


def test_extract_leaves_nothing_on_failure(corpus: Corpus, tmp_path: Path) -> None:
    src = corpus.archives["pg16-custom-gzip"].path
    last = _chunks(src, 1003)[-1]
    raw = bytearray(src.read_bytes())
    raw[last.offset + len(last.data) - 6] ^= 0xFF  # late: after some bytes were written
    bad = tmp_path / "bad.dump"
    bad.write_bytes(bytes(raw))
    outdir = tmp_path / "out"
    outdir.mkdir()
    result = _toc("extract", bad, "1003", "-o", outdir / "lo.bin")
    assert result.exit_code == 7
    assert list(outdir.iterdir()) == []
    # An existing file is left as it was.
    (outdir / "lo.bin").write_bytes(b"before")
    assert _toc("extract", bad, "1003", "-o", outdir / "lo.bin").exit_code == 7
    assert [p.name for p in outdir.iterdir()] == ["lo.bin"]
    assert (outdir / "lo.bin").read_bytes() == b"before"


def test_extract_into_a_file(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "lo.bin"
    result = _toc("extract", corpus.archives["pg17-custom-lz4"].path, "1004", "-o", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == corpus.los[1004]
    assert [p.name for p in tmp_path.iterdir()] == ["lo.bin"]


# -- 7: special files are not "empty"; a missing path is NotFound everywhere -------------------
def test_special_file_is_not_called_empty() -> None:
    if not Path("/proc/self/mem").exists():
        pytest.skip("no /proc")
    line = _one_line_error(_toc("summary", "/proc/self/mem"))
    assert "empty" not in line
    assert "/proc/self/mem: cannot be read as a file" in line
    line = _one_line_error(_toc("summary", "/proc/self/status"))
    assert "special file" in line and "empty" not in line


@pytest.mark.parametrize(
    "args",
    [["show", "nosuch"], ["summary", "nosuch"], ["los", "nosuch"],
     ["extract", "nosuch", "1"], ["diff", "nosuch", "nosuch"]],
)  # fmt: skip
def test_missing_path_is_not_found(args: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "nosuch"
    result = _toc(*[str(missing) if a == "nosuch" else a for a in args])
    assert result.exit_code == 8
    assert _one_line_error(result) == f"Error: {missing}: no such file or directory"


# -- 8: an archive that fails before its first row writes nothing to stdout --------------------
@pytest.mark.parametrize(
    "args",
    [["los", "--json"], ["show", "--json"], ["los", "--csv"], ["show", "--csv"], ["show"],
     ["los", "--markdown"], ["los"]],
)  # fmt: skip
def test_nothing_on_stdout_before_the_first_row(
    corpus: Corpus, tmp_path: Path, args: list[str]
) -> None:
    src = corpus.archives["pg17-custom-none"].path
    with open_archive(src) as a:
        toc_at = a.header.toc_offset
    cut = tmp_path / "cut.dump"
    cut.write_bytes(src.read_bytes()[: toc_at + 3])  # a header, then a broken first entry
    result = _toc(args[0], cut, *args[1:])
    assert result.exit_code == 7
    assert result.stdout == ""
    assert "ends early" in _one_line_error(result)


def test_stream_writers_fetch_the_first_row_first() -> None:
    def failing() -> Iterator[dict[str, Any]]:
        yield from ()
        raise CorruptArchive("x: damaged")

    writers: list[Callable[[io.StringIO, Iterator[dict[str, Any]]], None]] = [
        lambda out, rows: stream.write_json(out, rows),
        lambda out, rows: stream.write_csv(out, ["a"], rows),
        lambda out, rows: stream.write_markdown(out, ["a"], rows),
        lambda out, rows: stream.write_tsv(out, ["a"], rows),
    ]
    for write in writers:
        out = io.StringIO()
        with pytest.raises(CorruptArchive):
            write(out, failing())
        assert out.getvalue() == ""
    out = io.StringIO()
    stream.write_json(out, iter([]))
    assert json.loads(out.getvalue()) == []
    out = io.StringIO()
    stream.write_json(out, iter([{"a": 1}, {"a": 2}]))
    assert json.loads(out.getvalue()) == [{"a": 1}, {"a": 2}]


# -- 9: the decompressors raise CorruptArchive, not RuntimeError ------------------------
@pytest.mark.parametrize(
    ("algorithm", "stream"),
    [
        ("lz4", lz4.frame.compress(bytes(range(256)) * 64)),
        ("zstd", zstandard.ZstdCompressor().compress(bytes(range(256)) * 64)),
        ("gzip", zlib.compress(bytes(range(256)) * 64)),
    ],
)
def test_stream_ending_early_is_corrupt_archive(algorithm: str, stream: bytes) -> None:
    d = decompressor(algorithm)
    d.feed(stream[: len(stream) // 2])
    with pytest.raises(CorruptArchive, match="ends before its end marker"):
        d.finish()
