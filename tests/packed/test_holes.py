"""Holes on their own (no server): runs of zero pages are left out of the archive and come
back as zeros, whatever the layout; old (version 1) archives read as before; a newer
version is refused by name."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgblobdump.errors import CorruptArchive, UnsupportedArchive
from pgblobdump.packed.format.holes import ZERO_PAGE, runs
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.manifest import DumpSource
from pgblobdump.packed.format.spec import PIECE_MAX, PIECE_RECORD
from pgblobdump.packed.read.items import each_piece
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.read.stream import stream_items, stream_pieces
from pgblobdump.packed.write import packer as writer
from pgblobdump.packed.write.writer import ArchiveWriter
from pgblobdump.pgconstants import LOBLKSIZE
from pgblobdump.storage import LocalDirectory
from tests.clirun import assert_one_line_error, run

P = LOBLKSIZE
DATA = Path(__file__).parent / "data"
META = Meta(None, None, None)


def naive_holes(data: bytes, min_pages: int = 1) -> list[tuple[int, int]]:
    """The zero pages of ``data`` (an LO from offset 0), its short last page too, merged
    into runs, those that save ``min_pages`` pages or more (a hole at the end saves one
    page less than it has): what the writer must leave out, found page by page."""
    out: list[tuple[int, int]] = []
    for at in range(0, len(data), P):
        page = data[at : at + P]
        if page == bytes(len(page)):
            if out and out[-1][1] == at:
                out[-1] = (out[-1][0], at + len(page))
            else:
                out.append((at, at + len(page)))

    def saves(b: int, e: int) -> int:
        return -(-(e - b) // P) - (e == len(data))

    return [(b, e) for b, e in out if saves(b, e) >= min_pages]


# An LO as segments: whole zero pages, random pages, pages of random bytes with zero runs
# that straddle page boundaries (never a hole), and a last page of any length.
segment = st.one_of(
    st.tuples(st.just("zero"), st.integers(1, 700)),
    st.tuples(st.just("data"), st.integers(1, 3)),
    st.tuples(st.just("straddle"), st.integers(1, 2)),
)
layouts = st.tuples(
    st.lists(segment, max_size=6),
    st.integers(0, P - 1),
    st.booleans(),
)


def build(layout: tuple[list[tuple[str, int]], int, bool]) -> bytes:
    segments, tail, tail_zero = layout
    out = bytearray()
    for kind, n in segments:
        if kind == "zero":
            out += bytes(n * P)
        elif kind == "data":
            out += os.urandom(n * P)
        else:  # 2 * (P - 1) zeros across a page boundary, a byte in each page: no hole
            out += (b"\x01" + bytes(P - 1) + bytes(P - 1) + b"\x01") * n
    out += bytes(tail) if tail_zero else os.urandom(tail)
    return bytes(out)


def complement(holes: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    out, at = [], 0
    for b, e in holes:
        if b > at:
            out.append((at, b))
        at = e
    if at < n:
        out.append((at, n))
    return out


@settings(max_examples=200, deadline=None)
@given(layout=layouts)
def test_runs_leave_out_exactly_the_zero_pages(
    layout: tuple[list[tuple[str, int]], int, bool],
) -> None:
    data = build(layout)
    for min_pages in (0, 1, 3, 64):
        want = complement(naive_holes(data, min_pages), len(data))
        assert runs(data, 0, len(data), min_pages) == want


def write(los: dict[int, bytes], storage: LocalDirectory | None = None,
          stream: io.BytesIO | None = None) -> None:  # fmt: skip
    with ArchiveWriter(storage=storage, stream=stream, volume_size=3 * PIECE_MAX) as w:
        packer = w.worker()
        for oid in sorted(los):
            data = los[oid]
            if len(data) > PIECE_MAX:  # as dump gives a large LO: in ranges
                chunks = (data[i : i + 300_000] for i in range(0, len(data), 300_000))
                packer.add_chunks(oid, META, len(data), chunks)
            else:
                packer.add(oid, META, data)
        w.finish(DumpSource(extra={"test": True}))


def stored(items: object) -> dict[int, list[tuple[int, bytes]]]:
    """What restore is given: each LO's (offset, bytes) pieces, as stored."""
    out: dict[int, list[tuple[int, bytes]]] = {}
    for p in each_piece(items):  # type: ignore[arg-type]
        out.setdefault(p.oid, []).append((p.offset, bytes(p.data)))
    return out


def check_stored(los: dict[int, bytes], pieces: dict[int, list[tuple[int, bytes]]]) -> None:
    """Restore is given every byte outside the holes, and nothing else."""
    for oid, data in los.items():
        got = pieces[oid]
        assert got[0][0] == 0  # every LO opens at offset 0
        kept: list[tuple[int, int]] = []
        for o, b in got:
            assert data[o : o + len(b)] == b
            if not b:
                continue
            if kept and kept[-1][1] == o:  # cut at a frame's or a part's end
                kept[-1] = (kept[-1][0], o + len(b))
            else:
                kept.append((o, o + len(b)))
        holes = naive_holes(data, 0 if len(data) > PIECE_MAX else writer.SMALL_HOLE_PAGES)
        assert kept == complement(holes, len(data)), oid


lo_sets = st.dictionaries(st.integers(1, 10**6), layouts, min_size=1, max_size=6)


@pytest.mark.parametrize("small", [1, writer.SMALL_HOLE_PAGES])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(spec=lo_sets)
def test_holes_round_trip_through_a_directory(
    spec: dict[int, tuple[list[tuple[str, int]], int, bool]],
    small: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the writer's threshold for small LOs as it is, and at one page."""
    monkeypatch.setattr(writer, "SMALL_HOLE_PAGES", small)
    los = {oid: build(layout) for oid, layout in spec.items()}
    with tempfile.TemporaryDirectory() as d:
        storage = LocalDirectory(Path(d), create=True)
        write(los, storage=storage)
        archive = PackedDirectory(storage)
        whole: dict[int, bytearray] = {}
        for p in archive.pieces():  # cat, verify, unpack: every byte, zeros included
            buf = whole.setdefault(p.oid, bytearray())
            assert p.offset == len(buf)
            buf += p.data
        assert {o: bytes(b) for o, b in whole.items()} == los
        for oid, data in los.items():
            assert b"".join(archive.read_lo(oid)) == data
            r = archive.find(oid)
            assert (r.size, r.checksum) == (len(data), xxhash.xxh3_64_intdigest(data))
        check_stored(los, stored(archive.items()))  # restore: the holes left out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=lo_sets)
def test_holes_round_trip_through_a_stream(
    spec: dict[int, tuple[list[tuple[str, int]], int, bool]],
) -> None:
    los = {oid: build(layout) for oid, layout in spec.items()}
    out = io.BytesIO()
    write(los, stream=out)
    whole: dict[int, bytes] = {}
    for p in stream_pieces(io.BytesIO(out.getvalue())):
        whole[p.oid] = whole.get(p.oid, b"") + bytes(p.data)
    assert whole == los
    check_stored(los, stored(stream_items(io.BytesIO(out.getvalue()))))


def test_a_gigabyte_hole_takes_no_room(tmp_path: Path) -> None:
    """13 bytes at offset 10^9 (given as dump gives them: every zero) make a frame of two
    pieces: one opening the LO at 0, one of its last page."""
    size = 1_000_000_013
    zeros = bytes(PIECE_MAX)

    def chunks() -> object:
        at = 0
        while at + PIECE_MAX <= 999_999_488:
            yield zeros
            at += PIECE_MAX
        yield bytes(999_999_488 - at) + bytes(512) + b"thirteen byte"

    storage = LocalDirectory(tmp_path / "a.pbd", create=True)
    with ArchiveWriter(storage=storage) as w:
        w.worker().add_chunks(7, META, size, chunks())  # type: ignore[arg-type]
        w.finish(DumpSource())
    volume = (tmp_path / "a.pbd" / "data-1-000001.pbd").read_bytes()
    assert len(volume) < 200
    archive = PackedDirectory(storage)
    assert stored(archive.items()) == {7: [(0, b""), (999_999_488, bytes(512) + b"thirteen byte")]}
    tail = b""
    n = 0
    for piece in archive.read_lo(7):
        n += len(piece)
        tail = (tail + bytes(piece))[-13:]
    assert (n, tail) == (size, b"thirteen byte")


def test_a_piece_past_its_lo_is_damage_not_a_hole(tmp_path: Path) -> None:
    """A piece whose offset goes past its LO's size is refused, never hashed as zeros."""
    storage = LocalDirectory(tmp_path / "a.pbd", create=True)
    with ArchiveWriter(storage=storage, level=0) as w:  # frames stored as they are
        w.worker().add(5, META, ZERO_PAGE * 100 + b"x")
        w.finish(DumpSource())
    name = tmp_path / "a.pbd" / "data-1-000001.pbd"
    raw = bytearray(name.read_bytes())
    # its second record's offset is at 12 + 32 + 36 + 16: past the size, and the frame's
    # checksum made right
    at = 12 + 32 + PIECE_RECORD.size + 16
    raw[at : at + 8] = (10**12).to_bytes(8, "little")
    payload = raw[12 + 32 :]
    raw[12 + 24 : 12 + 32] = xxhash.xxh3_64_intdigest(bytes(payload)).to_bytes(8, "little")
    name.write_bytes(bytes(raw))
    with pytest.raises(CorruptArchive, match="out of place"):
        list(PackedDirectory(LocalDirectory(tmp_path / "a.pbd")).pieces())


# -- versions ---------------------------------------------------------------------------
V1 = {
    1001: b"hello",
    1002: b"",
    1003: bytes(100_000) + b"after a hole",
    1004: (b"packed format version 1 " * 70000)[:1_600_000],
    1005: b"commented",
}
"""What tests/packed/data/v1.pbd and v1.pbs hold: dumped by format version 1 (commit
ca08c83) from a PostgreSQL 17 database made with lo_from_bytea/lo_put (1003 has a hole,
which version 1 stored as zeros)."""


def test_a_version_1_archive_reads_as_before(tmp_path: Path) -> None:
    archive = PackedDirectory(LocalDirectory(DATA / "v1.pbd"))
    assert archive.manifest is not None and archive.manifest.version == 1
    assert {oid: b"".join(map(bytes, archive.read_lo(oid))) for oid in V1} == V1
    whole: dict[int, bytes] = {}
    for p in archive.pieces():
        whole[p.oid] = whole.get(p.oid, b"") + bytes(p.data)
    assert whole == V1
    with (DATA / "v1.pbs").open("rb") as f:
        streamed: dict[int, bytes] = {}
        for p in stream_pieces(f):
            streamed[p.oid] = streamed.get(p.oid, b"") + bytes(p.data)
    assert streamed == V1
    result = run("verify", str(DATA / "v1.pbd"))
    assert result.exit_code == 0, result.output
    result = run("cat", str(DATA / "v1.pbd"), "1003", "-o", str(tmp_path / "lo"))
    assert result.exit_code == 0 and (tmp_path / "lo").read_bytes() == V1[1003]


def test_a_newer_version_is_refused_by_name(tmp_path: Path) -> None:
    storage = LocalDirectory(tmp_path / "a.pbd", create=True)
    write({1: b"x"}, storage=storage)
    manifest = tmp_path / "a.pbd" / "manifest.json"
    body = json.loads(manifest.read_text())
    body["version"] = 4
    manifest.write_text(json.dumps(body))
    with pytest.raises(UnsupportedArchive, match="format version 4, written by a newer"):
        PackedDirectory(storage)
    assert_one_line_error(run("ls", str(tmp_path / "a.pbd")), 7, "upgrade pgblobdump")
    out = io.BytesIO()
    write({1: b"x"}, stream=out)
    data = bytearray(out.getvalue())
    data[8:10] = (4).to_bytes(2, "little")
    with pytest.raises(UnsupportedArchive, match="stream format version 4, written by a newer"):
        list(stream_items(io.BytesIO(bytes(data))))
