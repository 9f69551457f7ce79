"""The LO walk pack reads archives with: one pass over the TOC (no second one holding
every OID of a pg_dump 16 archive), and the custom archive's LO data blocks read once."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgblobdump.cli import cli
from pgblobdump.errors import CorruptArchive
from pgblobdump.packed.pgdump.pack import pack
from pgblobdump.storage.local import LocalDirectory
from pgblobdump.toc import blocks
from pgblobdump.toc import lo as los
from pgblobdump.toc.lo import directory
from pgblobdump.toc.lo.catalog import catalog
from pgblobdump.toc.reader import Archive, open_archive
from tests.toc.conftest import Corpus


@pytest.mark.parametrize("name", ["pg16-directory-gzip", "pg16-directory-none", "tar"])
def test_pack_reads_the_toc_once(
    corpus: Corpus, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to 1.15 a directory or tar archive's coverage check took a second pass over
    the TOC, holding every BLOB entry's OID; the catalog's pass tallies them now. (A
    custom archive's TOC is read again to write it, as kept, without LO data.)"""
    built = corpus.tar if name == "tar" else corpus.archives[name]
    passes = []
    real = Archive.iter_items

    def counted(self: Archive) -> object:
        passes.append(self.name)
        return real(self)

    monkeypatch.setattr(Archive, "iter_items", counted)
    with open_archive(built.path) as a:
        result = pack(a, LocalDirectory(tmp_path / "p", create=True))
    assert result.los == len(corpus.los)
    assert len(passes) == 1


@pytest.mark.parametrize("name", ["pg16-custom-gzip", "pg17-custom-none", "pg18-custom-gzip"])
def test_block_index_passes_over_the_blocks_walked(
    corpus: Corpus, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blocks an LO walk recorded are not read again, and the index is the same."""
    with open_archive(corpus.archives[name].path) as a:
        whole = list(blocks.block_index(a))
        assert any(b.kind == blocks.BLK_BLOBS for b in whole)
        index = blocks.BlockIndex()
        walked = {lo.oid: b"".join(pieces) for lo, pieces in los.iter_data(a, index)}
        assert walked == corpus.los

        def unread(r: object) -> None:
            raise AssertionError("a BLOBS block read twice")

        monkeypatch.setattr(blocks, "_skip_blobs_block", unread)
        assert list(blocks.block_index(a, index)) == whole


def test_list_file_read_in_blocks_of_lines(
    corpus: Corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An LO list file is split in blocks (not held whole): the same OIDs, and the same
    line number in an error, whatever the block size, CR LF line ends included."""
    copy = tmp_path / "d"
    shutil.copytree(corpus.archives["pg16-directory-none"].path, copy)
    listing = copy / "blobs.toc"
    lines = listing.read_bytes().splitlines()
    listing.write_bytes(b"\r\n".join(lines) + b"\r\n")

    def outcome() -> list[tuple[int, str]]:
        with open_archive(copy) as a:
            (entry,) = catalog(a).blobs
            return list(directory.list_oids(a, entry))

    whole = outcome()
    assert sorted(oid for oid, _ in whole) == sorted(corpus.los)
    for size in (1, 7, 64):
        monkeypatch.setattr(directory, "LIST_BLOCK", size)
        assert outcome() == whole
    listing.write_bytes(b"\r\n".join([*lines[:3], b"x", *lines[3:]]) + b"\r\n")
    with pytest.raises(CorruptArchive, match=r"blobs\.toc line 4 is not"):
        outcome()
    monkeypatch.setattr(directory, "LIST_BLOCK", 1 << 18)
    with pytest.raises(CorruptArchive, match=r"blobs\.toc line 4 is not"):
        outcome()


@pytest.mark.parametrize("name", ["pg16-custom-gzip-piped", "pg17-custom-zstd-piped"])
def test_pack_of_pg_dump_to_stdout(corpus: Corpus, name: str, tmp_path: Path) -> None:
    """``pg_dump -Fc > FILE`` writes the TOC again after the last data block (with the
    blocks' positions); pack read on into it as if it were a block ("unrecognized data
    block type 0", exit 7). The blocks the TOC names are all there is to keep."""
    built = corpus.archives[name]
    packed, back = tmp_path / "p", tmp_path / "back.dump"
    result = CliRunner().invoke(cli, ["pack", str(built.path), "-o", str(packed)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["unpack", str(packed), "--format", "custom", "-o", str(back)])
    assert result.exit_code == 0, result.output
    with open_archive(back) as a:
        assert {lo.oid: b"".join(pieces) for lo, pieces in los.iter_data(a)} == corpus.los
    listed = subprocess.run(
        [str(built.bin_dir / "pg_restore"), "-l", str(back)], capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    entries = [x for x in built.pg_restore_list().splitlines() if not x.startswith(";")]
    assert [x for x in listed.stdout.splitlines() if not x.startswith(";")] == entries
