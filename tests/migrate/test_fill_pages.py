"""migrate's fill reads one-page LOs from pg_largeobject (a role that may read it) and
the verify pass compares without asking whether each LO exists: every LO shape the page
read must leave to lo_get (several pages, holes, no page, no LO) comes out exact, and
the fill copies every row right the first time (the verify pass re-copies none)."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.migrate import RunOptions, columns, refs, run
from pgblobdump.pg import catalog
from pgblobdump.pgconstants import LOBLKSIZE
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


def test_blockers_for_a_role_that_may_not_read_the_pages(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """run's pre-check as a role without pg_largeobject: one byte asked past the bytea
    limit finds the LO over 1 GB (a sparse one), a dangling OID and an LO it may not read
    are counted, and none of them is read."""
    db = new_db(pg17)
    role = f"pgbd_blk_{db.rsplit('dbname=', 1)[-1].split()[0]}"
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN")
        try:
            conn.execute("CREATE TABLE big (id int PRIMARY KEY, b oid)")
            conn.execute(f"ALTER TABLE big OWNER TO {role}")
            mine = [conn.execute("SELECT lo_from_bytea(0, 'small')").fetchone()[0]]  # type: ignore[index]
            huge = conn.execute("SELECT lo_create(0)").fetchone()[0]  # type: ignore[index]
            conn.execute("SELECT lo_put(%s, 1100000000, 'x')", (huge,))
            edge = conn.execute("SELECT lo_create(0)").fetchone()[0]  # type: ignore[index]
            conn.execute("SELECT lo_put(%s, %s, 'x')", (edge, refs.MAX_BYTEA - 1))  # just fits
            for o in (*mine, huge, edge):
                conn.execute(f"ALTER LARGE OBJECT {o} OWNER TO {role}")
            theirs = conn.execute("SELECT lo_from_bytea(0, 'not yours')").fetchone()[0]  # type: ignore[index]
            conn.execute(
                "INSERT INTO big VALUES (1, %s), (2, %s), (3, %s), (4, %s), (5, 4000000001),"
                " (6, NULL)",
                (mine[0], huge, edge, theirs),
            )
            with psycopg.connect(db + f" user={role}", autocommit=True) as r:
                col = refs.as_lo_column(columns.resolve(r, "big.b"))
                assert not catalog.pages_readable(r)
                got = refs.blockers(r, col)
            assert (got.dangling, got.dangling_sample) == (1, (4000000001,))
            assert (got.unreadable, got.unreadable_sample) == (1, (int(theirs),))
            assert (got.over_1gb, got.over_1gb_sample) == (1, (int(huge),))
        finally:
            conn.execute("DROP TABLE IF EXISTS big")
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
