"""The packed format on its own (no server): whatever LOs go in come back, byte for byte,
through volumes, through a stream, by OID; damage is named, never read as valid."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgblobdump.errors import ArchiveError, CorruptArchive, NotFound
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.manifest import DumpSource, Manifest
from pgblobdump.packed.format.spec import FRAME_TARGET, PIECE_MAX
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.read.stream import stream_pieces
from pgblobdump.packed.write.packer import LoPacker
from pgblobdump.packed.write.writer import ArchiveWriter
from pgblobdump.storage import LocalDirectory

LOs = dict[int, tuple[Meta, bytes]]

metas = st.sampled_from(
    [
        Meta(None, None, None),
        Meta("alice", None, None),
        Meta("bob", ("bob=rw/bob", "r1=r/bob"), None),
        Meta("alice", None, "a comment, with 'quotes' and ünïcode"),
    ]
)
sizes = st.one_of(
    st.just(0),
    st.integers(1, 5000),
    st.integers(FRAME_TARGET - 10, FRAME_TARGET + 10),
    st.integers(2 * PIECE_MAX, 2 * PIECE_MAX + 3),
)
lo_sets = st.dictionaries(
    st.integers(1, 2**32 - 1), st.tuples(metas, sizes), min_size=0, max_size=40
)


def materialise(spec: dict[int, tuple[Meta, int]]) -> LOs:
    return {oid: (m, os.urandom(n) if n < 4096 else bytes([oid % 251]) * n)
            for oid, (m, n) in spec.items()}  # fmt: skip


def write(los: LOs, workers: int, **target: object) -> Manifest:
    oids = sorted(los)
    share = -(-len(oids) // workers) if oids else 1
    with ArchiveWriter(**target, volume_size=3 * PIECE_MAX) as w:  # type: ignore[arg-type]
        for k in range(workers):
            packer = w.worker()
            for oid in oids[k * share : (k + 1) * share]:
                meta, data = los[oid]
                packer.add(oid, meta, data)
        return w.finish(DumpSource(extra={"test": True}))


def collect(pieces: Iterator[object]) -> LOs:
    out: dict[int, tuple[Meta, bytearray]] = {}
    for p in pieces:
        _meta, buf = out.setdefault(p.oid, (p.meta, bytearray()))  # type: ignore[attr-defined]
        assert p.offset == len(buf)  # type: ignore[attr-defined]
        buf += p.data  # type: ignore[attr-defined]
    return {oid: (m, bytes(b)) for oid, (m, b) in out.items()}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=lo_sets, workers=st.integers(1, 3))
def test_directory_round_trip(spec: dict[int, tuple[Meta, int]], workers: int) -> None:
    los = materialise(spec)
    with tempfile.TemporaryDirectory() as d:
        storage = LocalDirectory(Path(d), create=True)
        manifest = write(los, workers, storage=storage)
        assert manifest.los == len(los)
        archive = PackedDirectory(storage)
        assert collect(archive.pieces()) == los
        assert [r.oid for r in archive.index] == sorted(los)
        for oid, (meta, data) in los.items():
            assert b"".join(archive.read_lo(oid)) == data
            r = archive.find(oid)
            assert archive.index.meta(r.meta) == meta and r.size == len(data)
        if los:
            lo, hi = min(los), max(los)
            assert [r.oid for r in archive.index.range(lo + 1, hi)] == sorted(los)[1:]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=lo_sets, workers=st.integers(1, 2))
def test_stream_round_trip(spec: dict[int, tuple[Meta, int]], workers: int) -> None:
    los = materialise(spec)
    out = io.BytesIO()
    write(los, workers, stream=out)
    out.seek(0)
    assert collect(stream_pieces(out)) == los


def test_an_oid_not_in_the_archive(tmp_path: Path) -> None:
    storage = LocalDirectory(tmp_path, create=True)
    write({5: (Meta(None, None, None), b"x")}, 1, storage=storage)
    with pytest.raises(NotFound, match="LO 6 is not in"):
        list(PackedDirectory(storage).read_lo(6))


def _archive(tmp_path: Path) -> LocalDirectory:
    storage = LocalDirectory(tmp_path, create=True)
    los = {oid: (Meta("o", None, None), os.urandom(3000)) for oid in range(100, 400)}
    write(los, 1, storage=storage)
    return storage


def test_an_interrupted_dump_is_not_an_archive(tmp_path: Path) -> None:
    storage = _archive(tmp_path)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(CorruptArchive, match=r"no manifest\.json: an interrupted dump"):
        PackedDirectory(storage)


@pytest.mark.parametrize("where", [0.2, 0.5, 0.9])
def test_a_flipped_byte_in_a_volume_is_named(tmp_path: Path, where: float) -> None:
    storage = _archive(tmp_path)
    vol = tmp_path / "data-1-000001.pbd"
    raw = bytearray(vol.read_bytes())
    raw[int(len(raw) * where)] ^= 0x40
    vol.write_bytes(raw)
    with pytest.raises(CorruptArchive, match=r"data-1-000001\.pbd"):
        list(PackedDirectory(storage).pieces())


@pytest.mark.parametrize("name", ["data-1-000001.pbd", "index.pbi"])
def test_a_truncated_file_is_named(tmp_path: Path, name: str) -> None:
    storage = _archive(tmp_path)
    path = tmp_path / name
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ArchiveError, match=name):
        archive = PackedDirectory(storage)
        list(archive.pieces())


def test_a_failure_after_the_manifest_leaves_nothing(tmp_path: Path) -> None:
    """A step that fails inside the writer after ``finish`` (a sync, the caller's own
    work) removes the manifest and index with the volumes: no archive naming lost files."""
    storage = LocalDirectory(tmp_path, create=True)
    with pytest.raises(RuntimeError, match="after finish"), ArchiveWriter(storage) as w:
        w.worker().add(7, Meta(None, None, None), os.urandom(5000))
        w.finish(DumpSource(extra={"test": True}))
        assert (tmp_path / "manifest.json").exists()
        raise RuntimeError("after finish")
    assert list(tmp_path.iterdir()) == []


def test_a_truncated_stream_is_an_interrupted_dump() -> None:
    out = io.BytesIO()
    los = {oid: (Meta(None, None, None), os.urandom(2000)) for oid in range(1, 50)}
    write(los, 1, stream=out)
    data = out.getvalue()
    for cut in (len(data) - 10, len(data) // 2):
        with pytest.raises(CorruptArchive, match=r"truncated|interrupted"):
            collect(stream_pieces(io.BytesIO(data[:cut])))


def test_two_workers_sharing_a_stream_keep_large_los_whole() -> None:
    """Workers write at once into one stream: a large LO's pieces stay consecutive."""
    import threading

    out = io.BytesIO()
    los = {oid: (Meta(None, None, None), bytes([oid % 256]) * (3 * PIECE_MAX + oid))
           for oid in (*range(1, 9), *range(100, 108))}  # fmt: skip
    with ArchiveWriter(stream=out) as w:
        packers = [w.worker(), w.worker()]

        def run(packer: LoPacker, oids: range) -> None:
            for oid in oids:
                meta, data = los[oid]
                chunks = [data[i : i + 5000] for i in range(0, len(data), 5000)]
                packer.add_chunks(oid, meta, len(data), chunks)

        shares = (range(1, 9), range(100, 108))
        threads = [
            threading.Thread(target=run, args=(p, r)) for p, r in zip(packers, shares, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        w.finish(DumpSource())
    out.seek(0)
    assert collect(stream_pieces(out)) == los


def test_many_distinct_comments_make_several_meta_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    """Metadata is published in META frames of bounded size (a single one could pass the
    64 MiB a reader accepts: 17,000 distinct 4 KiB comments did)."""
    import pgblobdump.packed.write.sink as sink

    monkeypatch.setattr(sink, "META_FRAME_MAX", 10_000)
    los = {oid: (Meta("o", None, f"{oid}:" + "c" * 1000), b"") for oid in range(1, 101)}
    out = io.BytesIO()
    write(los, 1, stream=out)
    out.seek(0)
    assert collect(stream_pieces(out)) == los
    assert out.getvalue().count(b"PBDF\x04") >= 10  # META frames


def test_a_file_that_is_no_archive_is_named_before_anything_runs(tmp_path: Path) -> None:
    from pgblobdump.errors import NotAnArchive
    from pgblobdump.packed.read.source import directory, open_source

    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"junk\n")
    with (
        pytest.raises(NotAnArchive, match="not a pgblobdump packed stream"),
        open_source(str(junk)),
    ):
        pass
    with pytest.raises(NotAnArchive, match="not a packed archive"):
        directory(str(junk))
