"""refs/rewrite.py on a live server: each form a column names LOs in is rewritten from an
OID mapping into the same form (issue 39: '12345' becomes '67890', 12345.pdf becomes
67890.pdf), rows naming no mapped OID are not touched, dangling values are counted, and
every refusal comes before anything is written."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from pgblobdump.errors import DatabaseError, NotFound, UsageError
from pgblobdump.refs import values
from pgblobdump.refs.rewrite import Rewritten, check_fits, lock, resolve, rewrite, statement
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb

BIG = 3_000_000_000
"""An OID of 2^31 or more: ``oid::int4`` stores it as -1294967296."""
MAP = {40001: 50001, 40002: BIG, 40003: 60003, BIG + 1: 40005, BIG + 2: BIG + 3}
"""old -> new; the new OIDs' LOs exist (made by ``_db``), the old ones' do not."""
MAPPING = sql.SQL("(SELECT old, new FROM remap)")


@pytest.fixture
def db(pg17: EmbeddedCluster, new_db: NewDb) -> Iterator[psycopg.Connection]:
    """A database with MAP in table ``remap`` and an LO at each new OID; a connection to
    it (not autocommit: rewrite runs in the caller's transaction)."""
    conninfo = new_db(pg17)
    with psycopg.connect(conninfo) as conn:
        _mapping(conn, MAP)
        conn.commit()
        yield conn


def _mapping(conn: psycopg.Connection, mapping: dict[int, int]) -> None:
    conn.execute("CREATE TABLE remap (old oid PRIMARY KEY, new oid NOT NULL)")
    with conn.cursor().copy("COPY remap FROM STDIN") as cp:
        for pair in mapping.items():
            cp.write_row(pair)
    conn.execute("SELECT lo_create(new) FROM remap")


def _table(conn: psycopg.Connection, typ: str, rows: list[str | None], pk: bool = True) -> None:
    """Table ``t`` (``id`` in insertion order, ``c`` of ``typ``) holding ``rows``."""
    conn.execute(f"CREATE TABLE t ({'id serial PRIMARY KEY, ' if pk else ''}c {typ})")
    for r in rows:
        conn.execute("INSERT INTO t (c) VALUES (%s)", (r,))


def _column(conn: psycopg.Connection) -> list[str | None]:
    return [r[0] for r in conn.execute("SELECT c::text FROM t ORDER BY id")]


def _run(conn: psycopg.Connection, highest: int = max(MAP.values())) -> Rewritten:
    col = resolve(conn, "t", "c", "--referenced-by t.c")
    check_fits(conn, col, highest)
    lock(conn, col)
    return rewrite(conn, col, MAPPING)


CASES = {
    # type: (values, rewritten, rows updated, dangling, examples)
    "oid": (["40001", "40002", "40004", None, "40003", "40001"],
            ["50001", "3000000000", "40004", None, "60003", "50001"], 4, 1, (40004,)),
    "int4": (["40001", "40002", "-1294967295", "-1294967294", "0", "-1", None, "40004"],
             ["50001", "-1294967296", "40005", "-1294967293", "0", "-1", None, "40004"],
             4, 2, (40004, 2**32 - 1)),
    "int8": (["40001", "40002", "3000000001", "-1294967295", "4294967297", None],
             ["50001", "3000000000", "40005", "-1294967295", "4294967297", None], 3, 0, ()),
    "numeric": (["40001", "40002.000", "40003.5", "-40001", "1e20", "NaN"],
                ["50001", "3000000000", "40003.5", "-40001", "100000000000000000000", "NaN"],
                2, 0, ()),
    "text": (["40001", "40002", "-1294967295", "-1294967294", "3000000002", "0040003",
              "40001.tar.gz", "40002.backup-2024.pdf", "40003.jpg_large", "hello", "x40001",
              "40001 ", "40001.", "40001/a.png", "", None, "40004", "99.png"],
             ["50001", "3000000000", "40005", "-1294967293", "3000000003", "60003",
              "50001.tar.gz", "3000000000.backup-2024.pdf", "60003.jpg_large", "hello",
              "x40001", "40001 ", "40001.", "40001/a.png", "", None, "40004", "99.png"],
             9, 2, (99, 40004)),
    "varchar(24)": (["40001.tar.gz", "40002", "note", "-1294967294"],
                    ["50001.tar.gz", "3000000000", "note", "-1294967293"], 3, 0, ()),
    "char(16)": (["40001", "40002.pdf", "note"], ["50001", "3000000000.pdf", "note"], 2, 0, ()),
    "int4[]": (["{40001,NULL,40004,40002}", "{40004,7}", "{}", None, "{NULL}",
                "{{1,2},{3,4}}", "{-1294967295}"],
               ["{50001,NULL,40004,-1294967296}", "{40004,7}", "{}", None, "{NULL}",
                "{{1,2},{3,4}}", "{40005}"], 2, 7, (1, 2, 3, 4, 7)),
    "text[]": (['{40001.png,NULL,hello,-1294967294,"40002"}', "{hello}"],
               ["{50001.png,NULL,hello,-1294967293,3000000000}", "{hello}"], 1, 0, ()),
}  # fmt: skip


@pytest.mark.parametrize("typ", list(CASES))
def test_each_form_is_kept(db: psycopg.Connection, typ: str) -> None:
    before, after, rows, dangling, examples = CASES[typ]
    _table(db, typ, before)
    db.commit()
    xmin = dict(db.execute("SELECT id, xmin::text FROM t").fetchall())
    stored = _column(db)  # as the server shows them (1e20 comes back in full)
    done = _run(db)
    db.commit()
    assert _column(db) == after
    assert done == Rewritten(rows, dangling, examples)
    # only the rows that named a mapped OID were written
    changed = {i for i, x in db.execute("SELECT id, xmin::text FROM t") if xmin[i] != x}
    assert changed == {i + 1 for i, (b, a) in enumerate(zip(stored, after, strict=True)) if b != a}


def test_int2(db: psycopg.Connection) -> None:
    db.execute("TRUNCATE remap")
    db.execute("INSERT INTO remap VALUES (101, 202), (303, 32767)")
    db.execute("SELECT lo_create(new) FROM remap")
    _table(db, "int2", ["101", "303", "5", None, "-1"])
    assert _run(db, highest=32767) == Rewritten(2, 2, (5, 2**32 - 1))
    assert _column(db) == ["202", "32767", "5", None, "-1"]


@pytest.mark.parametrize("lo_type", ["lo", "public.file_oid"])
def test_domains_over_oid(db: psycopg.Connection, lo_type: str) -> None:
    try:
        with db.transaction():
            db.execute("CREATE EXTENSION lo")
    except psycopg.errors.Error:
        db.execute("CREATE DOMAIN lo AS oid")  # as the extension makes it
    db.execute("CREATE DOMAIN file_oid AS oid CHECK (VALUE <> 0)")
    _table(db, lo_type, ["40001", "40002", "40004"])
    col = resolve(db, "public.t", "c", "--referenced-by t.c")
    assert (col.base, col.array, col.qualified) == ("oid", False, "public.t.c")
    assert rewrite(db, col, MAPPING) == Rewritten(2, 1, (40004,))
    assert _column(db) == ["50001", "3000000000", "40004"]


def test_arrays_of_domains(db: psycopg.Connection) -> None:
    db.execute("CREATE DOMAIN file_name AS varchar(20)")
    db.execute("CREATE DOMAIN ids AS int8[]")
    db.execute("CREATE TABLE t (id serial PRIMARY KEY, c file_name[], d ids)")
    db.execute("INSERT INTO t (c, d) VALUES ('{40001.png,NULL,x}', '{40002,NULL,1}'),"
               " ('{x}', '{40004}')")  # fmt: skip
    for column, done in (("c", Rewritten(1, 0, ())), ("d", Rewritten(1, 2, (1, 40004)))):
        col = resolve(db, "t", column, f"--referenced-by t.{column}")
        assert col.array
        check_fits(db, col, BIG)
        assert rewrite(db, col, MAPPING) == done
    assert db.execute("SELECT c::text, d::text FROM t ORDER BY id").fetchall() == [
        ("{50001.png,NULL,x}", "{3000000000,NULL,1}"),
        ("{x}", "{40004}"),
    ]


def test_a_table_without_primary_key(db: psycopg.Connection) -> None:
    _table(db, "text", ["40001.pdf", "40001.pdf", "40004", "40001.pdf", "40002"], pk=False)
    assert _run(db).rows == 4
    got = sorted(r[0] for r in db.execute("SELECT c FROM t"))
    assert got == ["3000000000", "40004", "50001.pdf", "50001.pdf", "50001.pdf"]


def test_a_swap_is_rewritten_once(db: psycopg.Connection) -> None:
    db.execute("TRUNCATE remap")
    db.execute("INSERT INTO remap VALUES (50001, 60003), (60003, 50001)")
    _table(db, "oid", ["50001", "60003"])
    assert _run(db).rows == 2
    assert _column(db) == ["60003", "50001"]


def test_multidimensional_array_naming_a_mapped_oid_is_refused(db: psycopg.Connection) -> None:
    _table(db, "oid[]", ["{40001}", "{{40001,1},{2,3}}"])
    col = resolve(db, "t", "c", "--referenced-by t.c")
    with pytest.raises(DatabaseError, match=r"public\.t\.c: .*dimensions \[1:2\]\[1:2\]"):
        rewrite(db, col, MAPPING)
    db.rollback()
    _table(db, "oid[]", ["{40001}", "[0:1]={1,40002}"])
    with pytest.raises(DatabaseError, match=r"dimensions \[0:1\]"):
        rewrite(db, col, MAPPING)


def test_oid_statement_is_the_naive_one(db: psycopg.Connection) -> None:
    _table(db, "oid", [str(o) for o in range(40000, 40500)])
    db.execute("ANALYZE t")
    col = resolve(db, "t", "c", "--referenced-by t.c")

    def plan(q: sql.Composable) -> str:
        return "\n".join(r[0] for r in db.execute(sql.SQL("EXPLAIN {}").format(q)))

    naive = sql.SQL(
        "UPDATE t pgbd_t SET c = pgbd_m.new FROM (SELECT old, new FROM remap) pgbd_m"
        " WHERE pgbd_t.c = pgbd_m.old"
    )
    assert plan(statement(col, MAPPING)) == plan(naive)


def test_resolve_refuses(db: psycopg.Connection) -> None:
    db.execute("CREATE TABLE t (id int PRIMARY KEY, c oid, g int8 GENERATED ALWAYS AS (id) STORED,"
               " j jsonb)")  # fmt: skip
    db.execute("CREATE VIEW v AS SELECT c FROM t")
    with pytest.raises(NotFound, match=r"^no table nosuch \(from --referenced-by x\)$"):
        resolve(db, "nosuch", "c", "--referenced-by x")
    with pytest.raises(NotFound, match=r"^no column t\.nosuch"):
        resolve(db, "t", "nosuch", "--referenced-by x")
    with pytest.raises(UsageError, match=r"^--referenced-by x: a column of type jsonb holds no"):
        resolve(db, "t", "j", "--referenced-by x")
    with pytest.raises(DatabaseError, match=r"public\.v\.c: it is a column of a view"):
        resolve(db, "v", "c", "--referenced-by x")
    with pytest.raises(DatabaseError, match=r"public\.t\.g: a generated column"):
        resolve(db, "t", "g", "--referenced-by x")


@pytest.mark.parametrize(
    ("grants", "refused"),
    [
        (["GRANT SELECT, UPDATE (id) ON t TO rw", "GRANT SELECT ON t TO rw"],
         "no UPDATE privilege on the column"),
        (["GRANT UPDATE (c) ON t TO rw"], "no SELECT privilege on the column"),
        (["GRANT SELECT, UPDATE (c) ON t TO rw"], "may not lock the table"),
        (["GRANT SELECT, UPDATE ON t TO rw", "ALTER TABLE t ENABLE ROW LEVEL SECURITY",
          "CREATE POLICY few ON t USING (id < 2)"], "row-level security applies"),
        (["GRANT SELECT, UPDATE ON s.t TO rw", "REVOKE USAGE ON SCHEMA s FROM rw"],
         "schema s"),
    ],
)  # fmt: skip
def test_resolve_refuses_a_role(
    pg17: EmbeddedCluster, db: psycopg.Connection, grants: list[str], refused: str
) -> None:
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = 'rw'").fetchone():
            conn.execute("CREATE ROLE rw")  # a role is the cluster's: made once
    table = "s.t" if "s.t" in grants[0] else "t"
    db.execute("CREATE SCHEMA s")
    db.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, c oid)")
    db.execute(f"INSERT INTO {table} VALUES (1, 40001), (2, 40002)")
    db.execute("GRANT SELECT ON remap TO rw")
    for g in grants:
        db.execute(g)
    db.execute("SET ROLE rw")
    with pytest.raises(DatabaseError, match=refused) as e:
        resolve(db, table, "c", "--referenced-by x")
    assert "\n" not in str(e.value)
    db.execute("RESET ROLE")
    # what the role was refused, granted, is allowed
    db.execute(f"GRANT ALL ON {table} TO rw")
    db.execute("GRANT USAGE ON SCHEMA s TO rw")
    db.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    db.execute("SET ROLE rw")
    col = resolve(db, table, "c", "--referenced-by x")
    lock(db, col)
    assert rewrite(db, col, MAPPING).rows == 2


def test_check_fits(db: psycopg.Connection) -> None:
    db.execute("CREATE TABLE t (a int2, b varchar(12), c char(10)[], d varchar(10))")
    db.execute("INSERT INTO t VALUES (1, '40001.tar.gz', '{-12345}', '12345')")

    def fits(column: str, highest: int) -> None:
        check_fits(db, resolve(db, "t", column, "x"), highest)

    fits("a", 32767)
    with pytest.raises(UsageError, match=r"public\.t\.a \(smallint\): .* up to 32768"):
        fits("a", 32768)
    fits("b", 99999)  # 5 digits + '.tar.gz'
    with pytest.raises(UsageError, match=r"could be 13 characters .*suffixes up to 7.* its 12"):
        fits("b", 100000)
    fits("c", 2**31 - 1)  # a negative digits value, new OIDs below 2^31: written plain
    with pytest.raises(UsageError, match=r"could be 11 characters"):
        fits("c", 2**31)  # -2147483648
    fits("d", 2**32 - 1)


FORMS = st.sampled_from(["digits", "negative", "file", "other"])
SUFFIXES = st.lists(st.text("abcxyz-_09", min_size=1, max_size=4), min_size=1, max_size=3)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    mapping=st.dictionaries(
        st.integers(1, 2**32 - 1), st.integers(1, 2**32 - 1), min_size=1, max_size=8
    ),
    rows=st.lists(
        st.tuples(st.integers(0, 9), FORMS, SUFFIXES, st.integers(1, 2**32 - 1)), max_size=12
    ),
)  # fmt: skip
def test_property_text_column(
    db: psycopg.Connection, mapping: dict[int, int], rows: list[tuple[int, str, list[str], int]]
) -> None:
    olds = list(mapping)
    texts: list[str] = []
    for pick, form, suffixes, other in rows:
        oid = olds[pick] if pick < len(olds) else other  # mostly mapped, some not
        if form == "digits":
            texts.append(str(oid))
        elif form == "negative":
            texts.append(str(oid - 2**32 if oid >= 2**31 else oid))
        elif form == "file":
            texts.append(str(oid) + "".join("." + s for s in suffixes))
        else:
            texts.append(f"note {oid}")
    with db.transaction(force_rollback=True):
        db.execute("CREATE TEMP TABLE pm (old oid PRIMARY KEY, new oid)")
        db.cursor().executemany("INSERT INTO pm VALUES (%s, %s)", list(mapping.items()))
        db.execute("CREATE TABLE t (id serial PRIMARY KEY, c text)")
        db.cursor().executemany("INSERT INTO t (c) VALUES (%s)", [(x,) for x in texts])
        col = resolve(db, "t", "c", "x")
        rewrite(db, col, sql.SQL("pm"))
        for before, after in zip(texts, _column(db), strict=True):
            named = values.from_text(before)
            if named is None or named[0] not in mapping:
                assert after == before
                continue
            assert after is not None
            assert values.from_text(after) == (mapping[named[0]], named[1])
            assert after.partition(".")[1:] == before.partition(".")[1:]
