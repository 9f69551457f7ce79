"""`toc extract -o` never writes into the archive it reads: the archive file under any
path or link, or a path inside a directory archive, is refused (exit 2, one line) and
nothing is touched."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pgblobdump.cli import cli
from tests.toc.conftest import Corpus


def _extract(archive: Path, output: str | Path) -> Result:
    return CliRunner().invoke(cli, ["toc", "extract", str(archive), "1002", "-o", str(output)])


def _state(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a digest of its bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _refused(result: Result, output: str | Path) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output)  # UsageError
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: -o {output} "), result.stderr
    assert lines[0].endswith("name a file outside the archive")
    return lines[0]


@pytest.mark.parametrize("name", ["pg16-custom-gzip", "pg17-custom-lz4"])
def test_output_is_the_custom_archive(corpus: Corpus, name: str, tmp_path: Path) -> None:
    # Before: the archive was replaced by the LO's 5 bytes, exit 0.
    archive = tmp_path / "db.dump"
    shutil.copy(corpus.archives[name].path, archive)
    os.link(archive, tmp_path / "hardlink.dump")
    (tmp_path / "symlink.dump").symlink_to("db.dump")
    (tmp_path / "sub").mkdir()
    before = _state(tmp_path)
    spellings = [archive, tmp_path / "hardlink.dump", tmp_path / "symlink.dump",
                 tmp_path / "sub" / ".." / "db.dump"]  # fmt: skip
    for output in spellings:
        line = _refused(_extract(archive, output), output)
        assert f"is the archive {archive} itself" in line
        assert _state(tmp_path) == before  # nothing written, no .part file left
    # Another file beside it is fine.
    assert _extract(archive, tmp_path / "lo.bin").exit_code == 0
    assert (tmp_path / "lo.bin").read_bytes() == corpus.los[1002]


def test_output_inside_a_directory_archive(corpus: Corpus, tmp_path: Path) -> None:
    archive = tmp_path / "dump"
    shutil.copytree(corpus.archives["pg17-directory-gzip"].path, archive)
    os.link(archive / "blob_1003.dat.gz", tmp_path / "linked.gz")
    before = _state(tmp_path)
    outputs = [archive / "toc.dat", archive / "blob_1002.dat.gz", archive / "new.bin",
               archive / "blobs_x" / ".." / "other.bin", tmp_path / "linked.gz"]  # fmt: skip
    for named in (archive, archive / "toc.dat"):  # the archive named either way
        for output in outputs:
            line = _refused(_extract(named, output), output)
            assert f"would write into the directory archive {named}" in line
            assert _state(tmp_path) == before
    assert _extract(archive, tmp_path / "lo.bin").exit_code == 0
    assert (tmp_path / "lo.bin").read_bytes() == corpus.los[1002]


def test_output_is_the_tar_archive(corpus: Corpus, tmp_path: Path) -> None:
    archive = tmp_path / "db.tar"
    shutil.copy(corpus.tar.path, archive)
    before = archive.read_bytes()
    _refused(_extract(archive, archive), archive)
    assert archive.read_bytes() == before


def test_stdout_appending_to_the_archive(corpus: Corpus, tmp_path: Path) -> None:
    """`toc extract db.dump OID >> db.dump` is refused too (a real process: stdout must be
    the file itself, which CliRunner's buffer is not)."""
    archive = tmp_path / "db.dump"
    shutil.copy(corpus.archives["pg16-custom-gzip"].path, archive)
    before = archive.read_bytes()
    with archive.open("ab") as out:
        run = subprocess.run(
            [sys.executable, "-m", "pgblobdump", "toc", "extract", str(archive), "1002"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    assert run.returncode == 2
    assert run.stderr.strip() == (
        f"Error: stdout is the archive {archive} itself; redirect it elsewhere or use -o FILE"
    )
    assert archive.read_bytes() == before
