"""The core's atomic file writer and its refusal to write over its input."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgblobdump.errors import UsageError
from pgblobdump.fileio import refuse_input, write_atomically


def test_all_or_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out.bin"
    out.write_bytes(b"old")

    def pieces() -> object:
        yield b"new"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomically(out, pieces())  # type: ignore[arg-type]
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    write_atomically(out, [b"new", b"!"])
    assert out.read_bytes() == b"new!"


def test_a_symlink_is_followed_not_replaced(tmp_path: Path) -> None:
    """/dev/stdout is a symlink: the link stays, what it names is written."""
    target = tmp_path / "target"
    target.write_bytes(b"")
    link = tmp_path / "link"
    link.symlink_to(target)
    write_atomically(link, [b"data"])
    assert link.is_symlink() and target.read_bytes() == b"data"


def test_the_input_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "a.dump"
    archive.write_bytes(b"x")
    with pytest.raises(UsageError, match="would overwrite the input"):
        refuse_input(archive, archive)
    folder = tmp_path / "dir"
    folder.mkdir()
    with pytest.raises(UsageError):
        refuse_input(folder / "new.bin", folder)
    refuse_input(tmp_path / "other.bin", archive)
