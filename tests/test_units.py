"""Sizes and counts as users type them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgblobdump.errors import UsageError
from pgblobdump.generate.spec import SizeSpec
from pgblobdump.units import format_bytes, parse_count, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", 0), ("512", 512), ("4KiB", 4096), ("4k", 4096), ("1.5MB", 1_500_000), ("2GiB", 2**31)],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["4XB", "", "-1", "KiB", "1.5B", "four"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(UsageError, match="size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1000", 1000), ("100k", 100_000), ("1M", 10**6), ("1_000_000", 10**6), ("1.5M", 1_500_000)],
)
def test_parse_count(text: str, expected: int) -> None:
    assert parse_count(text) == expected


@pytest.mark.parametrize("text", ["-5", "1.5", "lots", "1e6"])
def test_parse_count_rejects(text: str) -> None:
    with pytest.raises(UsageError):
        parse_count(text)


def test_size_ranges() -> None:
    assert SizeSpec.parse("1KiB-64KiB") == SizeSpec(1024, 65536)
    assert SizeSpec.parse("4KiB").fixed
    with pytest.raises(UsageError, match="upper end"):
        SizeSpec.parse("64KiB-1KiB")
    with pytest.raises(UsageError, match="1 GB"):
        SizeSpec.parse("2GiB")


@given(st.integers(min_value=0, max_value=2**40))
def test_parse_size_reads_plain_numbers(n: int) -> None:
    assert parse_size(str(n)) == n
    assert format_bytes(n)  # never fails


@pytest.mark.parametrize(
    ("n", "word", "expected"),
    [(1, "file", "1 file"), (0, "file", "0 files"), (2, "difference", "2 differences"),
     (1, "LO", "1 LO"), (34816, "LO", "34,816 LOs"), (3, "entry", "3 entries"),
     (1, "batch", "1 batch"), (5, "batch", "5 batches"), (2, "OID", "2 OIDs"),
     (2, "person", "2 people")],
)  # fmt: skip
def test_plural(n: int, word: str, expected: str) -> None:
    from pgblobdump.units import plural

    assert plural(n, word, "people" if word == "person" else None) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(3600, "1 h"), (5400, "90 min"), (90, "90 s"), (172800, "2 d"), (1.5, "1.5 s")],
)
def test_format_duration(seconds: float, expected: str) -> None:
    from pgblobdump.units import format_duration

    assert format_duration(seconds) == expected
