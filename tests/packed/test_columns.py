"""A DATA frame of whole LOs is read as columns of its directory (restore's fast path, no
object per LO): it must give exactly what the piece-by-piece reading gives, for whole
archives and for a share of one (``restore --part``/``--jobs``), and name damage the
same way. No server."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgblobdump.errors import CorruptArchive
from pgblobdump.packed.format import columns
from pgblobdump.packed.format.frames import FrameReader, encode
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.manifest import DumpSource
from pgblobdump.packed.format.spec import (
    FRAME_HEADER,
    PIECE_MAX,
    PIECE_RECORD,
    VOLUME_HEADER,
    FrameKind,
)
from pgblobdump.packed.read.items import Damaged, Item, LoPiece, WholeLos
from pgblobdump.packed.read.parts import share_items
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.packed.write.writer import ArchiveWriter
from pgblobdump.storage import LocalDirectory

METAS = [
    Meta(None, None, None),
    Meta("alice", None, None),
    Meta("bob", ("bob=rw/bob", "r1=r/bob"), None),
    Meta("alice", None, "a comment"),
]
sizes = st.one_of(st.just(0), st.just(0), st.integers(1, 3000), st.just(2 * PIECE_MAX + 1))
lo_sets = st.dictionaries(
    st.integers(1, 2**32 - 1), st.tuples(st.sampled_from(METAS), sizes), max_size=60
)


@contextlib.contextmanager
def piece_by_piece() -> Iterator[None]:
    """The reader without its column path: every frame through Frame.pieces."""
    saved = columns.ENABLED
    columns.ENABLED = False
    try:
        yield
    finally:
        columns.ENABLED = saved


def flat(items: Iterator[Item]) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for item in items:
        assert not isinstance(item, Damaged)
        pieces = item.pieces() if isinstance(item, WholeLos) else [item]
        for p in pieces:
            assert isinstance(p, LoPiece)
            out.append((p.oid, p.meta, p.size, p.offset, bytes(p.data), p.last, p.checksum))
    return out


def write(d: Path, spec: dict[int, tuple[Meta, int]], workers: int = 1) -> PackedDirectory:
    storage = LocalDirectory(d, create=True)
    oids = sorted(spec)
    per = -(-len(oids) // workers) if oids else 1
    with ArchiveWriter(storage=storage, volume_size=3 * PIECE_MAX) as w:
        for k in range(workers):
            packer = w.worker()
            for oid in oids[k * per : (k + 1) * per]:
                meta, n = spec[oid]
                packer.add(oid, meta, bytes([oid % 251]) * n if n > 4096 else os.urandom(n))
        w.finish(DumpSource(extra={"test": True}))
    return PackedDirectory(storage)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=lo_sets, workers=st.integers(1, 2), cut=st.integers(0, 2**32 - 1))
def test_columns_read_what_pieces_read(
    spec: dict[int, tuple[Meta, int]], workers: int, cut: int
) -> None:
    with tempfile.TemporaryDirectory() as d:
        archive = write(Path(d), spec, workers)
        fast = flat(archive.items())
        shares = [flat(share_items(archive, 0, cut)), flat(share_items(archive, cut + 1, 2**32))]
        with piece_by_piece():
            assert flat(archive.items()) == fast
            assert flat(share_items(archive, 0, cut)) == shares[0]
            assert flat(share_items(archive, cut + 1, 2**32)) == shares[1]
    assert sorted({p[0] for p in fast}) == sorted(spec)
    assert [p[0] for p in shares[0]] == [p[0] for p in fast if p[0] <= cut]


@pytest.mark.parametrize("columns", [True, False], ids=["columns", "pieces"])
@pytest.mark.parametrize("victim", [3, 9], ids=["empty LO", "LO with bytes"])
def test_a_bad_checksum_in_a_sound_frame_is_named(victim: int, columns: bool) -> None:
    """The directory's checksum of one LO altered, the frame's own checksum recomputed
    (damage the frame check cannot see): the restore's reading names that LO."""
    spec = {oid: (METAS[oid % 2], 0 if oid < 8 else 100) for oid in range(1, 11)}
    with tempfile.TemporaryDirectory() as d:
        archive = write(Path(d), spec)
        (name,) = archive.volumes()
        path = Path(d) / name
        with path.open("rb") as f:
            f.seek(VOLUME_HEADER.size)
            frame = FrameReader(f, name, VOLUME_HEADER.size).next()
            assert frame is not None and f.read() == b""
        records = [list(r) for r in PIECE_RECORD.iter_unpack(frame.directory)]
        assert [r[0] for r in records] == list(range(1, 11))
        records[victim - 1][5] ^= 1
        directory = b"".join(PIECE_RECORD.pack(*r) for r in records)
        body = encode(FrameKind.DATA, frame.data, directory, len(records))
        assert FRAME_HEADER.unpack(body[: FRAME_HEADER.size])[8] == xxhash.xxh3_64_intdigest(
            body[FRAME_HEADER.size :]
        )
        head = path.read_bytes()[: VOLUME_HEADER.size]
        path.write_bytes(head + body)
        ctx = contextlib.nullcontext() if columns else piece_by_piece()
        with ctx, pytest.raises(CorruptArchive, match=rf"LO {victim} is damaged \(checksum\)"):
            list(PackedDirectory(LocalDirectory(Path(d))).items())
