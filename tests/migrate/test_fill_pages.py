"""migrate's fill and verify pass read one-page LOs from pg_largeobject (a role that may
read it), and the verify pass compares without asking whether each LO exists: every LO
shape the page read must leave to lo_get (several pages, holes, no page, no LO) comes
out equal to lo_get's bytes read apart, right the first time (nothing re-copied)."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.migrate import RunOptions, run
from pgblobdump.migrate.move import LOBLKSIZE
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb

SHAPES: dict[int, str] = {
    1: "SELECT lo_from_bytea(0, '')",  # no page at all
    2: "SELECT lo_from_bytea(0, 'x')",
    3: f"SELECT lo_from_bytea(0, decode(repeat('ab', {LOBLKSIZE - 1}), 'hex'))",
    4: f"SELECT lo_from_bytea(0, decode(repeat('cd', {LOBLKSIZE}), 'hex'))",  # page 0 full
    5: f"SELECT lo_from_bytea(0, decode(repeat('ef', {LOBLKSIZE + 1}), 'hex'))",  # two pages
    6: "SELECT lo_from_bytea(0, decode(repeat('01', 5000), 'hex'))",
    # page 1 alone: a hole where page 0 would be (lo_get reads zeros)
    7: f"SELECT o FROM (SELECT lo_create(0) o) s, lo_put(s.o, {LOBLKSIZE + 10}, 'after a hole')",
    # page 0 and page 2: a hole in the middle
    8: f"SELECT o FROM (SELECT lo_from_bytea(0, 'head') o) s, lo_put(s.o, {2 * LOBLKSIZE}, 'tail')",
    # page 0 short with page 1 after it: lo_get fills the gap with zeros
    9: f"SELECT o FROM (SELECT lo_from_bytea(0, 'short') o) s, lo_put(s.o, {LOBLKSIZE + 5}, 'x')",
}


# "data" and "pageno" are pg_largeobject's column names too: the page read must not
# take the page's for the row's.
@pytest.mark.parametrize("batch_rows, col, other", [(3, "lo", "x"), (1000, "data", "pageno")])
def test_every_lo_shape_is_copied_right_the_first_time(
    pg17: EmbeddedCluster, new_db: NewDb, batch_rows: int, col: str, other: str
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE docs (id int PRIMARY KEY, {col} oid, {other} int DEFAULT 7)")
        for i, make in SHAPES.items():
            oid = conn.execute(make).fetchone()[0]  # type: ignore[index]
            conn.execute("INSERT INTO docs VALUES (%s, %s)", (i, oid))
        # a second row naming the same LO, a dangling OID, a NULL
        conn.execute(f"INSERT INTO docs SELECT 100, {col} FROM docs WHERE id = 7")
        conn.execute("INSERT INTO docs VALUES (101, 4000000001), (102, NULL)")
        want = dict(
            conn.execute(
                f"SELECT id, CASE WHEN {col} IS NULL OR NOT EXISTS (SELECT FROM"
                f" pg_largeobject_metadata m WHERE m.oid = {col}) THEN NULL"
                f" ELSE lo_get({col}) END FROM docs"
            ).fetchall()
        )
        assert want[8][:4] == b"head" and want[7].startswith(b"\0" * LOBLKSIZE)
        res = run(conn, f"docs.{col}", RunOptions(missing="null", batch_rows=batch_rows))
        assert res.phase == "done" and res.recopied == 0
        got = dict(conn.execute(f"SELECT id, {col} FROM docs").fetchall())
    assert got == want
