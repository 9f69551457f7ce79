"""The forms a value names an LO in: the Python reading and the server's agree, on the
published forms and on any text or integer (a property)."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from pgblobdump.refs import values
from pgblobdump.servers.cluster import EmbeddedCluster


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16385", (16385, "digits")),  # pgjdbc's setClob behind Hibernate's @Lob String
        ("0016385", (16385, "digits")),
        ("16385.png", (16385, "file name")),  # pg-lo-storage's '<oid>.<ext>'
        ("-1294967296", (3000000000, "digits")),  # oid::int4::text of LO 3000000000
        ("4294967295", (4294967295, "digits")),
        ("4294967296", None),
        ("0", None),
        ("hello", None),
        (" 16385", None),
        ("16385.tar.gz", (16385, "file name")),  # pg-lo-storage keeps every suffix
        ("16385.backup-2024", (16385, "file name")),
        ("16385.jpg_large", (16385, "file name")),
        ("16385.", None),
        ("16385./x", None),
        ("-5.png", None),
        ("", None),
        ("16385\n", None),  # $ before a final newline in Python, not on the server
    ],
)
def test_text_forms(text: str, expected: tuple[int, str] | None) -> None:
    assert values.from_text(text) == expected


def test_integer_forms() -> None:
    assert values.from_int(-1294967296, 32) == 3000000000
    assert values.from_int(-1, 16) == 4294967295
    assert values.from_int(-1, 64) is None
    assert values.from_int(1 << 32, 64) is None
    assert values.from_int(16385, 64) == 16385


@pytest.fixture(scope="module")
def conn(pg17: EmbeddedCluster) -> psycopg.Connection:
    with psycopg.connect(pg17.conninfo(), autocommit=True) as c:
        yield c  # type: ignore[misc]


_TEXTS = st.one_of(
    st.text(max_size=14),
    st.from_regex(r"\A-?[0-9]{1,11}(\.[a-z0-9]{1,3})?\Z"),
)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(_TEXTS, min_size=1, max_size=20))
def test_the_server_reads_text_as_python_does(conn: psycopg.Connection, texts: list[str]) -> None:
    texts = [t.replace("\x00", "") for t in texts]
    v = sql.SQL("t")
    rows = conn.execute(
        sql.SQL("SELECT {}::int8, {} FROM unnest(%s::text[]) AS u(t)").format(
            values.text_sql(v), values.text_pattern_sql(v)
        ),
        (texts,),
    ).fetchall()
    for t, (oid, pattern) in zip(texts, rows, strict=True):
        want = values.from_text(t)
        assert (oid, pattern if oid is not None else None) == (
            (want[0], want[1]) if want else (None, None)
        ), t


@settings(max_examples=100, deadline=None)
@given(ints=st.lists(st.integers(-(1 << 40), 1 << 40), min_size=1, max_size=20))
def test_the_server_reads_integers_as_python_does(
    conn: psycopg.Connection, ints: list[int]
) -> None:
    for bits in (32, 64):
        rows = conn.execute(
            sql.SQL("SELECT {}::int8 FROM unnest(%s::int8[]) AS u(i)").format(
                values.int_sql(sql.SQL("i"), bits)
            ),
            (ints,),
        ).fetchall()
        assert [r[0] for r in rows] == [values.from_int(i, bits) for i in ints]
