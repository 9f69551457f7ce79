"""Raw index records as columns (packed/format/rawindex.py): builders merged run by run give
every record once in OID order, whatever the interleaving and the block boundaries; an
OID in two builders is an error, not a loop."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgblobdump.errors import CorruptArchive
from pgblobdump.packed.format import indexbuild
from pgblobdump.packed.format.indexbuild import IndexBuilder
from pgblobdump.packed.format.rawindex import RawRecords, merged_builder, oid_column
from pgblobdump.packed.format.spec import CHAIN_VOLUME


def _builder(oids: list[int], tag: int) -> IndexBuilder:
    b = IndexBuilder()
    for oid in oids:
        b.add(oid, tag, oid * 3, CHAIN_VOLUME if tag % 2 else tag, tag, oid ^ 0xFFFF_FFFF_0000)
    return b


@settings(max_examples=60, deadline=None)
@given(
    oids=st.sets(st.integers(0, 2**32 - 1), max_size=300),
    parts=st.integers(1, 4),
    seed=st.randoms(use_true_random=False),
    block=st.integers(1, 9),
)
def test_merged_builder_gives_every_record_once_in_order(
    oids: set[int], parts: int, seed: object, block: int
) -> None:
    owner = {oid: seed.randrange(parts) for oid in sorted(oids)}  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(indexbuild, "INDEX_BLOCK_RECORDS", block)
        builders = [_builder([o for o in sorted(oids) if owner[o] == k], k) for k in range(parts)]
        merged = merged_builder(builders)
        got = [oid for raw in merged.raw_blocks() for oid in oid_column(raw)]
        for b in [*builders, merged]:
            b.close()
    assert got == sorted(oids)
    assert merged.count == len(oids)


def test_an_oid_in_two_builders_is_an_error() -> None:
    builders = [_builder([1, 5], 0), _builder([5, 9], 1)]
    with pytest.raises(CorruptArchive, match="LO 5 is in two parts"):
        merged_builder(builders)
    for b in builders:
        b.close()


def test_raw_records_take_through_and_run_stop_at_the_oid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(indexbuild, "INDEX_BLOCK_RECORDS", 8)
    b = _builder(list(range(10, 30)), 0)
    cursor = RawRecords(b.raw_blocks())
    assert oid_column(cursor.take_through(14)) == [10, 11, 12, 13, 14]  # across no block
    assert cursor.peek() == 15
    assert oid_column(cursor.run(2**32 - 1)) == [15, 16, 17]  # the rest of its block only
    assert oid_column(cursor.take_through(25)) == list(range(18, 26))  # across blocks
    assert oid_column(cursor.run(2**32 - 1)) == [26, 27, 28, 29]
    assert cursor.peek() is None
    b.close()
