"""`pg_restore -l` lines: format and parse round trips (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgblobdump.errors import CorruptArchive
from pgblobdump.toc import listing

word = st.text(
    st.characters(blacklist_categories=["Cs", "Cc", "Zs", "Zl", "Zp"]), min_size=1, max_size=12
)
tag = st.text(st.characters(blacklist_categories=["Cs", "Cc", "Zl", "Zp"]), max_size=30)


@given(
    dump_id=st.integers(1, 2**31 - 1),
    tableoid=st.integers(0, 2**32 - 1),
    oid=st.integers(0, 2**32 - 1),
    desc=st.sampled_from(listing.KNOWN_DESCS),
    namespace=st.none() | word,
    tag=tag,
    owner=word,
)
def test_format_then_parse(
    dump_id: int, tableoid: int, oid: int, desc: str, namespace: str | None, tag: str, owner: str
) -> None:
    line = listing.format_line(dump_id, tableoid, oid, desc, namespace, tag, owner)
    parsed = listing.parse_line(line)
    assert parsed is not None
    assert parsed == listing.ListingLine(
        dump_id, tableoid, oid, desc, namespace if namespace is not None else "-", tag, owner
    )
    assert parsed.format() == line


def test_newlines_become_spaces() -> None:
    line = listing.format_line(5, 0, 0, "COMMENT", None, "a\nb\rc", "bob")
    assert line == "5; 0 0 COMMENT - a b c bob"


def test_comments_and_blank_lines_skipped() -> None:
    text = [
        ";\n",
        "; Archive created at x\n",
        "\n",
        "215; 1259 16387 TABLE public items postgres\n",
    ]
    assert [x.tag for x in listing.parse_listing(text)] == ["items"]


def test_garbage_line() -> None:
    with pytest.raises(CorruptArchive):
        listing.parse_line("hello world")
