"""`toc show` of runs of BLOB entries (show.chunks) against the field-by-field listing, on
pg_dump 16-layout archives built with no server (toc.build), including OID text that
only a damaged or hand-made archive has: leading zeros, ten digits past 2^32 - 1."""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from pgblobdump.toc import blobruns, show
from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.build import write_archive
from pgblobdump.toc.reader import open_archive


@dataclass(frozen=True)
class _Meta:
    owner: str | None = "postgres"
    acl: tuple[str, ...] | None = None
    comment: str | None = None


@dataclass(frozen=True)
class _Piece:
    oid: int
    offset: int = 0
    data: bytes = b""
    last: bool = True


class _Source:
    database = "db"
    server_version = "16.14"

    def __init__(self, oids: list[int]) -> None:
        self.oids = oids

    def los(self) -> Iterable[tuple[int, _Meta]]:
        # a 100%-literal owner and one with a space, so a run's template carries both
        return ((o, _Meta("Lo 100% Carol" if o % 997 == 0 else "postgres")) for o in self.oids)

    def pieces(self) -> Iterable[_Piece]:
        return (_Piece(o) for o in self.oids)

    def read_lo(self, oid: int) -> Iterable[bytes]:
        return ()


OIDS = [*range(1, 3000), *range(99_990, 100_020), 2_147_483_648, 4_294_967_290, 4_294_967_295]


def _archive(tmp_path: Path, patch: tuple[bytes, bytes] | None = None) -> Path:
    out = io.BytesIO()
    write_archive(out, _Source(OIDS), "none")
    data = out.getvalue()
    if patch is not None:
        assert data.count(patch[0]) >= 4  # oid, tag, lo_create, lo_unlink
        data = data.replace(*patch)
    path = tmp_path / "a.dump"
    path.write_bytes(data)
    return path


def _listings(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str], int]:
    """(the chunks joined, the lines decoded field by field, BLOB entries in runs)."""
    with open_archive(path) as a:
        fast = "".join(show.chunks(a, show_all=True))
        in_runs = sum(i.count for i in a.iter_items() if isinstance(i, BlobRun))
    with monkeypatch.context() as m:
        m.setattr(blobruns, "MAX_FAMILIES", 0)
        with open_archive(path) as a:
            slow = list(show.lines(a, show_all=True))
            assert not any(isinstance(i, BlobRun) for i in a.iter_items())
    return fast, slow, in_runs


@pytest.mark.parametrize(
    "patch, line",
    [
        (None, "2613 4294967295 BLOB - 4294967295 postgres"),
        ((b"1234", b"0234"), "2613 234 BLOB - 0234 postgres"),
        ((b"4294967295", b"9294967295"), "2613 0 BLOB - 9294967295 postgres"),
        ((b"100013", b"000013"), "2613 13 BLOB - 000013 postgres"),
    ],
)
def test_runs_list_as_entries_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, patch: tuple[bytes, bytes] | None, line: str
) -> None:
    fast, slow, in_runs = _listings(_archive(tmp_path, patch), monkeypatch)
    assert in_runs > len(OIDS) // 2  # the runs' path is the one tested
    assert fast == "\n".join(slow) + "\n"
    assert any(x.endswith(line) for x in slow), line
    assert "Lo 100% Carol" in fast


def test_lines_split_only_at_newlines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An owner holding a character str.splitlines() breaks at (\\x1c) stays one line."""
    path = _archive(tmp_path, (b"postgres", b"post\x1cres"))
    fast, slow, in_runs = _listings(path, monkeypatch)
    assert in_runs
    with open_archive(path) as a:
        assert list(show.lines(a, show_all=True)) == slow
    assert fast.count("\n") == len(slow)
