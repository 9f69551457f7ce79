"""The OID lists of an archive read in one C-level pass when they look as pg_dump writes
them, line by line otherwise: the same OIDs, and the same error at the same line, either
way (no server)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from pgblobdump.errors import CorruptArchive
from pgblobdump.toc import entry
from pgblobdump.toc.build import write_directory
from pgblobdump.toc.lo import directory
from pgblobdump.toc.lo.catalog import blobs_entries
from pgblobdump.toc.reader import open_archive
from tests.toc.test_read_ahead import _Source


def _outcome(fn: object, *args: object) -> object:
    try:
        return list(fn(*args))  # type: ignore[operator]
    except CorruptArchive as e:
        return ("error", str(e))


@pytest.mark.parametrize(
    "text",
    [b"", b"\n", b"1\n2\n3\n", b"1\n2\n3", b"0\n", b"5\n0\n", b"4294967295\n", b"4294967296\n",
     b"007\n", b" 1\n", b"1\n\n2\n", b"12345678901\n", b"1\r\n2\r\n", b"x\n", b"9" * 5000],
)  # fmt: skip
def test_parse_oids_as_line_by_line(text: bytes) -> None:
    assert _outcome(entry.parse_oids, text, "a") == _outcome(entry._parse_oids, text, "a")


def _archive(root: Path, oids: list[int]) -> Path:
    root.mkdir()

    @contextlib.contextmanager
    def lists(name: str) -> Iterator[BinaryIO]:
        with open(root / name, "wb") as f:
            yield f

    with open(root / "toc.dat", "wb") as toc:
        write_directory(_Source(oids), toc, lists, "none", 16)
    return root


@pytest.mark.parametrize(
    "line, error",
    [
        (None, None),
        (b"7 blob_7.dat\r\n", None),  # CR LF: the line-by-line path, same pairs
        (b"1234567890123456789012345 blob_1.dat\n", None),  # read as pg_restore's strtoul won't
        (b"9" * 5000 + b" blob_1.dat\n", "line 6 is not"),  # past int()'s digit limit
        (b"\xc3\xa9 blob_1.dat\n", "line 6 is not"),
        (b"12blob_1.dat\n", "line 6 is not"),
        (b"\n", None),  # blank lines are skipped
    ],
)
def test_list_oids_as_line_by_line(tmp_path: Path, line: bytes | None, error: str | None) -> None:
    root = _archive(tmp_path / "a", list(range(1, 3000)))
    lines = (root / "blobs.toc").read_bytes().splitlines(keepends=True)
    if line is not None:
        lines[5] = line
    (root / "blobs.toc").write_bytes(b"".join(lines[:-1]) + lines[-1].rstrip(b"\n"))
    with open_archive(root) as a:
        (e,) = blobs_entries(a)
        got = _outcome(directory.list_oids, a, e)
        block = directory.LIST_BLOCK
        try:
            directory.LIST_BLOCK = 1 << 30  # one block: compared with the plain loop below
            want: object = []
            number = 0
            for raw in (root / "blobs.toc").read_bytes().splitlines():
                number += 1
                if not raw.strip():
                    continue
                try:
                    oid_text, member = raw.decode().split(" ", 1)
                    want.append((int(oid_text), member))  # type: ignore[attr-defined]
                except ValueError:
                    want = ("error", f"{a.name}: blobs.toc line {number} is not '<oid> <file>'")
                    break
        finally:
            directory.LIST_BLOCK = block
    assert got == want
    if error is not None:
        assert error in str(got)
