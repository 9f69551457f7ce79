"""Bad input gives a one-line error naming the file and what it looks like; fuzzing too."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgblobdump.cli import cli
from pgblobdump.errors import ArchiveError, NotFound
from pgblobdump.toc import lo as los
from pgblobdump.toc import summary
from pgblobdump.toc.reader import open_archive
from tests.toc.conftest import Corpus


def _error(path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["toc", "summary", str(path), *args])
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output  # one line, no traceback
    return result.exit_code, lines[0]


def test_plain_sql_dump(corpus: Corpus) -> None:
    code, line = _error(corpus.plain_sql)
    assert code == 7
    assert str(corpus.plain_sql) in line and "plain-text SQL dump" in line


def test_random_bytes_and_empty(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 8)
    assert "binary data" in _error(junk)[1]
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert "an empty file" in _error(empty)[1]
    gz = tmp_path / "x.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00rest")
    assert "gzip" in _error(gz)[1]


def test_directory_without_toc(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    code, line = _error(tmp_path / "d")
    assert code == 7 and "without toc.dat" in line and str(tmp_path / "d") in line


def test_truncated(corpus: Corpus, tmp_path: Path) -> None:
    src = corpus.archives["pg16-custom-none"].path.read_bytes()
    cut = tmp_path / "cut.dump"
    cut.write_bytes(src[:2000])
    code, line = _error(cut)
    assert code == 7 and "ends early" in line and str(cut) in line


def test_newer_version(corpus: Corpus, tmp_path: Path) -> None:
    src = bytearray(corpus.archives["pg17-custom-none"].path.read_bytes())
    src[6] = 17  # vmin: 1.17
    newer = tmp_path / "newer.dump"
    newer.write_bytes(bytes(src))
    code, line = _error(newer)
    assert code == 7 and "1.17-0 is newer" in line


def test_oid_not_in_archive(corpus: Corpus) -> None:
    path = corpus.archives["pg16-directory-gzip"].path
    result = CliRunner().invoke(cli, ["toc", "extract", str(path), "424242"])
    assert result.exit_code == 8
    assert (
        result.output.strip() == f"Error: {path}: no large object with OID 424242 in this archive"
    )


def test_tar_is_read(corpus: Corpus) -> None:
    with open_archive(corpus.tar.path) as a:
        assert a.kind == "tar"
        assert summary.summarize(a).lo_count == len(corpus.los)


def _exercise(path: Path) -> None:
    """Everything the reader does with an archive; only our errors may escape."""
    try:
        with open_archive(path) as a:
            summary.summarize(a)
            for _ in a.iter_entries():
                pass
            rows = list(los.iter_los(a))
            for lo in rows[:3]:
                b"".join(los.extract(a, lo.oid))
            for _, pieces in los.iter_data(a):
                b"".join(pieces)
    except (ArchiveError, NotFound):
        pass


FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


flips = st.lists(st.tuples(st.integers(0, 2**32), st.integers(0, 255)), max_size=4)


def _damage(raw: bytes, cut: float, changes: list[tuple[int, int]]) -> bytes:
    out = bytearray(raw[: int(len(raw) * cut)])
    for where, value in changes:
        if out:
            out[where % len(out)] = value
    return bytes(out)


@pytest.mark.parametrize("name", ["pg16-custom-gzip", "pg17-custom-lz4", "pg18-custom-gzip-piped"])
@FUZZ
@given(cut=st.floats(0, 1), changes=flips)
def test_fuzz_custom(corpus: Corpus, name: str, cut: float, changes: list[tuple[int, int]]) -> None:
    src = corpus.archives[name].path.read_bytes()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "a.dump"
        path.write_bytes(_damage(src, cut, changes))
        _exercise(path)


@pytest.mark.parametrize("name", ["pg16-directory-gzip", "pg17-directory-zstd"])
@FUZZ
@given(member=st.integers(0, 100), cut=st.floats(0, 1), changes=flips)
def test_fuzz_directory(
    corpus: Corpus, name: str, member: int, cut: float, changes: list[tuple[int, int]]
) -> None:
    src_dir = corpus.archives[name].path
    with tempfile.TemporaryDirectory() as d:
        target = Path(d) / "dir"
        shutil.copytree(src_dir, target)
        names = sorted(p.name for p in target.iterdir())
        victim = target / names[member % len(names)]
        victim.write_bytes(_damage(victim.read_bytes(), cut, changes))
        _exercise(target)
