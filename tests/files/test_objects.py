"""files/objects: a directory and an S3 prefix as places of many objects, for real (a
local file system, SeaweedFS)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from pgblobdump.errors import FileError, InsufficientResources, NotFound, ObjectStorageError
from pgblobdump.files.objects import Entry, Skipped, UnsafeKey, filled, key_problem, open_place
from pgblobdump.storage.base import NameTaken


def _put(place, key: str, data: bytes, **kw) -> None:  # type: ignore[no-untyped-def]
    with place.putter() as p:
        p.put(key, [(0, data)], len(data), **kw)


def _read(place, key: str) -> bytes:  # type: ignore[no-untyped-def]
    with place.open(key) as f:
        return bytes(f.read())


@pytest.mark.parametrize(
    "key",
    [
        "",
        "/etc/passwd",
        "a/../../x",
        "..",
        "a//b",
        "a/./b",
        "x\0y",
        "a" * 256,
        "d/" * 600 + "x",
        ".pgblobdump-part-1",
        "a/",
    ],
)
def test_unsafe_keys_are_refused_before_anything_is_written(tmp_path: Path, key: str) -> None:
    place = open_place(str(tmp_path / "out"), create=True)
    assert key_problem(key)
    with pytest.raises(UnsafeKey), place.putter() as p:
        p.put(key, [(0, b"x")], 1)
    assert list((tmp_path / "out").iterdir()) == []
    assert not (tmp_path / "x").exists()


def test_a_local_place_writes_private_files_and_never_overwrites(tmp_path: Path) -> None:
    out = tmp_path / "out"
    place = open_place(str(out), create=True)
    _put(place, "t1/déjà vu/1.pdf", b"first")
    assert (out / "t1/déjà vu/1.pdf").read_bytes() == b"first"
    assert oct((out / "t1/déjà vu/1.pdf").stat().st_mode & 0o777) == "0o600"
    assert oct((out / "t1").stat().st_mode & 0o777) == "0o700"
    with pytest.raises(NameTaken, match="already exists"):
        _put(place, "t1/déjà vu/1.pdf", b"second")
    assert (out / "t1/déjà vu/1.pdf").read_bytes() == b"first"
    assert sorted(p.name for p in (out / "t1/déjà vu").iterdir()) == ["1.pdf"]  # no part left
    entry = place.stat("t1/déjà vu/1.pdf")
    assert entry == Entry("t1/déjà vu/1.pdf", 5, entry.mtime_ns if entry else 0)
    assert place.stat("t1/missing") is None


def test_a_symbolic_link_on_the_way_is_not_followed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    place = open_place(str(out), create=True)
    (out / "t1").symlink_to(elsewhere)
    with pytest.raises(FileError, match="symbolic link"):
        _put(place, "t1/x", b"secret")
    assert list(elsewhere.iterdir()) == []
    (out / "f").symlink_to(tmp_path / "victim")
    with pytest.raises(NameTaken):  # the link is a name taken: never written through
        _put(place, "f", b"x")
    assert not (tmp_path / "victim").exists()
    with pytest.raises(FileError, match="symbolic link"):
        _read(place, "f")


def test_gaps_are_holes_locally_and_zeros_in_a_stream(tmp_path: Path) -> None:
    place = open_place(str(tmp_path), create=True)
    size = 64 << 20
    with place.putter() as p:
        p.put("sparse", [(0, b"head"), (32 << 20, b"middle")], size)
    f = tmp_path / "sparse"
    assert f.stat().st_size == size
    assert f.stat().st_blocks * 512 < 1 << 20  # the holes take no blocks
    with f.open("rb") as r:
        assert r.read(4) == b"head"
        r.seek(32 << 20)
        assert r.read(6) == b"middle"
    whole = b"".join(bytes(c) for c in filled([(2, b"ab"), (6, b"c")], 9))
    assert whole == b"\0\0ab\0\0c\0\0"


def test_walk_lists_files_in_key_order_and_says_what_it_skipped(tmp_path: Path) -> None:
    root = tmp_path / "in"
    (root / "a").mkdir(parents=True)
    for name in ("a/b", "a-c", "a.txt", "z", "a/é"):
        (root / name).write_bytes(name.encode())
    (root / ".pgblobdump-export").mkdir()
    (root / ".pgblobdump-export" / "export.json").write_bytes(b"tool's own")
    os.mkfifo(root / "fifo")
    (root / "inside").symlink_to(root / "z")
    (root / "outside").symlink_to(tmp_path)
    place = open_place(str(root))
    found = list(place.walk())
    keys = [e.key for e in found if isinstance(e, Entry)]
    assert keys == sorted(keys) == ["a-c", "a.txt", "a/b", "a/é", "z"]
    skipped = {s.key: s.why for s in found if isinstance(s, Skipped)}
    assert set(skipped) == {"fifo", "inside", "outside"}
    assert "not followed" in skipped["inside"]
    followed = list(place.walk(follow_symlinks=True))
    assert [e.key for e in followed if isinstance(e, Entry)] == [*keys[:4], "inside", "z"]
    assert "out of" in {s.key: s.why for s in followed if isinstance(s, Skipped)}["outside"]


def test_a_full_disk_is_one_line_and_leaves_no_part(small_disk: Path) -> None:
    with (
        open_place(str(small_disk / "out"), create=True) as place,
        pytest.raises(InsufficientResources, match="disk is full"),
        place.putter() as p,
    ):
        p.put("big", [(0, os.urandom(4 << 20))], 4 << 20)
    assert list((small_disk / "out").iterdir()) == []


def test_a_missing_directory_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="no such directory"):
        open_place(str(tmp_path / "nope"))


def test_an_s3_prefix_stores_objects_with_metadata_and_never_overwrites(s3_url: str) -> None:
    place = open_place(s3_url, create=True)
    data = os.urandom(10_000)
    digest = hashlib.sha256(data).hexdigest()
    with place.putter(in_flight=4) as p:
        stored: list[str] = []
        for i in range(20):
            p.put(f"t/{i:02}", [(0, data)], len(data), {"sha256": digest}, stored.append)
        p.put("sparse", [(5, b"x")], 9 << 20)  # a multipart upload, zeros filled
    assert sorted(stored) == [f"t/{i:02}" for i in range(20)]
    assert _read(place, "t/07") == data
    assert place.metadata("t/07")["sha256"] == digest
    assert _read(place, "sparse") == b"\0" * 5 + b"x" + b"\0" * ((9 << 20) - 6)
    with pytest.raises(NameTaken):
        _put(place, "t/07", b"other")
    assert _read(place, "t/07") == data
    keys = [e.key for e in place.walk() if isinstance(e, Entry)]
    assert keys == ["sparse", *(f"t/{i:02}" for i in range(20))]
    entry = place.stat("t/03")
    assert entry is not None and entry.size == 10_000 and entry.etag
    assert place.stat("t/nope") is None
    place.remove("t/03")
    assert place.stat("t/03") is None


def test_a_missing_bucket_is_refused_before_any_work(s3_url: str) -> None:
    with pytest.raises(ObjectStorageError, match="no-such-bucket"):
        open_place("s3://no-such-bucket/x", create=True)


def test_an_s3_walk_says_which_tool_like_names_it_skipped(s3_url: str) -> None:
    place = open_place(s3_url, create=True)
    for key in ("a", ".pgblobdump-notes/x", "d/.pgblobdumprc", ".pgblobdump-export/export.json",
                ".pgblobdump-export/1-of-1/r-00-000000.csv"):  # fmt: skip
        place.replace(key, b"{}")  # the tool's own way of writing: no name refused
    found = list(place.walk())
    assert [e.key for e in found if isinstance(e, Entry)] == ["a"]
    # the user's names are said; the export's own state (its export.json is there) is not
    assert sorted(s.key for s in found if isinstance(s, Skipped)) == [
        ".pgblobdump-notes/x",
        "d/.pgblobdumprc",
    ]
