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


def test_a_new_archive_directory_is_its_owners_only(tmp_path: Path) -> None:
    """As pg_dump -Fd makes its directory 0700: the LO bytes inside are no more readable
    by other users than they were in the database. A directory the user made is left."""
    from pgblobdump.storage.local import LocalDirectory

    LocalDirectory(tmp_path / "new", create=True)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
    (tmp_path / "mine").mkdir(mode=0o750)
    LocalDirectory(tmp_path / "mine", create=True)
    assert (tmp_path / "mine").stat().st_mode & 0o777 == 0o750
