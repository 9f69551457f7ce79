"""migrate of columns that hold OIDs in another type than oid (issue 37, item 4): a
text/varchar column of CLOB OIDs to their text (``--to text``), integers and digits
retyped oid (``--to oid``) or moved to bytea; mixed columns, encodings, dangling values,
a kill and a resume, access; on real servers."""

from __future__ import annotations

import subprocess
import threading
import time

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from pgblobdump.errors import DatabaseError, UsageError
from pgblobdump.migrate import LockPolicy, RunOptions, abort, plan, run, run_in_place
from pgblobdump.migrate.forms import Form
from pgblobdump.refs import values
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb
from tests.migrate.test_access import R, W, _roles, as_role, started
from tests.migrate.test_migrate import _argv, _kill_when_filled, _phase, lo_count

CLOB = "Grüße, € and 😀 "
"""Multi-byte UTF-8 text: repeated past a page (2 KiB), its characters straddle pages."""


def go(db: str, spec: str, **opts: object) -> object:
    with psycopg.connect(db, autocommit=True) as conn:
        return run(conn, spec, RunOptions(**opts))  # type: ignore[arg-type]


def column_type(db: str, table: str, col: str) -> str | None:
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid ="
            " %s::regclass AND attname = %s AND NOT attisdropped",
            (table, col),
        ).fetchone()
    return None if row is None else str(row[0])


def rows(db: str, query: str) -> dict[int, object]:
    with psycopg.connect(db) as conn:
        return {int(r[0]): r[1] for r in conn.execute(query)}


def clob(conn: psycopg.Connection, text: str, oid: int = 0) -> int:
    """An LO of ``text`` in UTF-8, as pgjdbc's setClob writes one; its OID."""
    return int(
        conn.execute("SELECT lo_from_bytea(%s, convert_to(%s, 'UTF8'))", (oid, text)).fetchone()[0]  # type: ignore[index]
    )


# -- the reading ---------------------------------------------------------------------


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
def test_text_form_is_values_text_sql_in_the_digits_form(
    conn: psycopg.Connection, texts: list[str]
) -> None:
    """migrate reads a text column as refs.values does, its digits form only: the same
    OID as ``text_sql`` where ``text_pattern_sql`` says digits, none elsewhere (a file
    name, ``<oid>.<ext>``, would lose its name); for text, varchar and char alike."""
    texts = [t.replace("\x00", "") for t in texts]
    v = sql.SQL("t")
    for typ in ("text", "varchar", "char(20)"):
        got = conn.execute(
            sql.SQL(
                "SELECT {mine}::int8, CASE WHEN {p} = 'digits' THEN {theirs} END::int8"
                " FROM unnest(%s::text[]) AS u(x), LATERAL (SELECT x::{typ} AS t) c"
            ).format(
                mine=Form("text").oid(v), p=values.text_pattern_sql(sql.SQL("t::text")),
                theirs=values.text_sql(sql.SQL("t::text")), typ=sql.SQL(typ),
            ),
            (texts,),
        ).fetchall()  # fmt: skip
        for t, (mine, theirs) in zip(texts, got, strict=True):
            want = values.from_text(t.rstrip(" ") if typ.startswith("char") else t)
            assert mine == theirs, (typ, t)
            assert mine == (want[0] if want and want[1] == "digits" else None), (typ, t)


# -- --to text -------------------------------------------------------------------------


def clob_table(db: str) -> dict[int, str | None]:
    """task_comment (jBPM's, Hibernate's @Lob String on a varchar): CLOB OIDs beside
    inline text, digits naming no LO, a file name, an OID of 2^31 or more written as
    oid::int4 stores it, a shared LO, an empty one, NULL. Returns id -> the text each
    row should hold after --to text."""
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT getdatabaseencoding()").fetchone()[0] == "UTF8"  # type: ignore[index]
        conn.execute(
            "CREATE TABLE task_comment (id bigint PRIMARY KEY,"
            " text varchar(255) DEFAULT 'none yet', addedat timestamp)"
        )
        long = CLOB * 400  # 8,800 bytes: five pages, characters cut at page ends
        small, big, empty = clob(conn, "first comment"), clob(conn, long), clob(conn, "")
        high = clob(conn, "an OID past 2^31", 3_000_000_000)
        named_file = clob(conn, "not a CLOB: a file")
        want: dict[int, str | None] = {}
        values_ = [
            (str(small), "first comment"), (str(big), long), (str(empty), ""),
            ("-1294967296", "an OID past 2^31"),  # 3000000000 as oid::int4::text
            ("3000000000", "an OID past 2^31"), (str(small), "first comment"),
            ("hello, inline", "hello, inline"), ("", ""), ("Grüße inline", "Grüße inline"),
            ("4000000001", "4000000001"),  # digits naming no LO: inline, kept
            (f"{named_file}.txt", f"{named_file}.txt"),  # a file name is no CLOB
            (f" {small}", f" {small}"), (None, None),
        ]  # fmt: skip
        for i, (value, after) in enumerate(values_, start=1):
            conn.execute("INSERT INTO task_comment VALUES (%s, %s, now())", (i, value))
            want[i] = after
        for i in range(100, 160):  # enough rows for a few batches
            conn.execute(
                "INSERT INTO task_comment VALUES (%s, %s, now())", (i, str(clob(conn, f"c{i}")))
            )
            want[i] = f"c{i}"
        conn.execute("COMMENT ON COLUMN task_comment.text IS 'the comment'")
        # A column grant to a role nobody can log in as: carried over, and no reader
        # whose access the move could widen.
        conn.execute(
            "DO $$ BEGIN CREATE ROLE pgbd_forms_reader; EXCEPTION WHEN duplicate_object"
            " THEN NULL; END $$"
        )
        conn.execute("GRANT SELECT (text) ON task_comment TO pgbd_forms_reader")
    assert high == 3_000_000_000
    return want


def test_to_text_moves_clobs_and_keeps_inline_values(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    want = clob_table(db)
    los = lo_count(db)
    r = go(db, "task_comment.text", to="text", batch_rows=7)
    assert r.phase == "done" and r.direction == "text"  # type: ignore[attr-defined]
    assert column_type(db, "task_comment", "text") == "text"
    assert column_type(db, "task_comment", "text_lo") is None  # dropped
    assert rows(db, "SELECT id, text FROM task_comment") == want
    assert lo_count(db) == los  # without --unlink every LO stays
    with psycopg.connect(db) as conn:
        carried = conn.execute(
            "SELECT col_description('task_comment'::regclass, attnum),"
            " pg_get_expr(d.adbin, d.adrelid),"
            " has_column_privilege('pgbd_forms_reader', 'task_comment', 'text', 'SELECT')"
            " FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid"
            " AND d.adnum = a.attnum WHERE attrelid = 'task_comment'::regclass"
            " AND attname = 'text'"
        ).fetchone()
        assert carried == ("the comment", "'none yet'::character varying", True)
        conn.execute("INSERT INTO task_comment (id) VALUES (999)")
        assert conn.execute("SELECT text FROM task_comment WHERE id = 999").fetchone() == (
            "none yet",
        )
        assert not conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'task_comment'::regclass"
        ).fetchone()[0]  # type: ignore[index]


def test_to_text_unlink_removes_only_the_moved_los(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    clob_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        named = {int(r[0]) for r in conn.execute(
            "SELECT text::oid FROM task_comment WHERE id >= 100 OR id IN (1, 2, 3)")}  # fmt: skip
        keep = int(conn.execute("SELECT text::oid FROM task_comment WHERE id = 100").fetchone()[0])  # type: ignore[index]
        conn.execute("CREATE TABLE attachment (id int PRIMARY KEY, content oid)")
        conn.execute("INSERT INTO attachment VALUES (1, %s)", (keep,))
        others = {int(r[0]) for r in conn.execute("SELECT oid FROM pg_largeobject_metadata")}
        others -= named | {3_000_000_000}
    r = go(db, "task_comment.text", to="text", unlink=True)
    # the 63 named, and 3000000000 (as digits and as oid::int4's), but the one kept
    assert r.kept_referenced == 1 and len(named) == 63  # type: ignore[attr-defined]
    assert r.unlinked == 63  # type: ignore[attr-defined]
    with psycopg.connect(db) as conn:
        left = {int(r[0]) for r in conn.execute("SELECT oid FROM pg_largeobject_metadata")}
    # the file-name row's LO was not moved: kept, as is the one attachment references
    assert left == others | {keep}


def test_to_text_refuses_an_lo_not_valid_in_the_database_encoding(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Two LOs that are not UTF-8 (a Latin-1 byte, a NUL): refused by OID after the fill
    read them, nothing switched; fixed one, the rerun names the other; fixed both, it
    finishes. In place, refused the same, nothing changed."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT getdatabaseencoding()").fetchone()[0] == "UTF8"  # type: ignore[index]
        conn.execute("CREATE TABLE doc (id int PRIMARY KEY, body text NOT NULL)")
        for i in range(1, 41):
            conn.execute("INSERT INTO doc VALUES (%s, %s)", (i, str(clob(conn, f"doc {i}"))))
        latin = int(conn.execute("SELECT lo_from_bytea(0, '\\x4772fc7365'::bytea)").fetchone()[0])  # type: ignore[index]
        nul = int(conn.execute("SELECT lo_from_bytea(0, '\\x610062'::bytea)").fetchone()[0])  # type: ignore[index]
        conn.execute("UPDATE doc SET body = %s WHERE id = 7", (str(latin),))
        conn.execute("UPDATE doc SET body = %s WHERE id = 33", (str(nul),))
        conn.execute("CREATE TABLE doc2 AS SELECT * FROM doc")
        before = rows(db, "SELECT id, body FROM doc")
    with pytest.raises(DatabaseError, match=rf"2 LOs .* not valid UTF8 text \({latin}, {nul}\)"):
        go(db, "doc.body", to="text", batch_rows=5)
    assert column_type(db, "doc", "body") == "text"
    assert rows(db, "SELECT id, body FROM doc") == before  # the old column, untouched
    assert _phase(db) == ("filling", 40)  # not switched: resumable, or abort
    with psycopg.connect(db, autocommit=True) as conn:
        match = rf"2 LOs .* not valid UTF8 text \({latin}, {nul}\)"
        with pytest.raises(DatabaseError, match=match):
            run_in_place(conn, "doc2.body", RunOptions(to="text"))  # in place: the same
        assert rows(db, "SELECT id, body FROM doc2") == before
        with pytest.raises(UsageError, match="under way"):
            run_in_place(conn, "doc.body", RunOptions(to="text"))  # not beside a run
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT lo_unlink(%s), lo_from_bytea(%s, 'a b')", (nul, nul))
    with pytest.raises(DatabaseError, match=rf"1 LOs .* not valid UTF8 text \({latin}\)"):
        go(db, "doc.body", to="text", batch_rows=5)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT lo_unlink(%s), lo_from_bytea(%s, 'Grüße'::bytea)", (latin, latin))
    # (a text literal cast to bytea: its UTF-8 bytes, 'Gr\xc3\xbc\xc3\x9fe')
    r = go(db, "doc.body", to="text", batch_rows=5)
    assert r.phase == "done" and r.resumed  # type: ignore[attr-defined]
    got = rows(db, "SELECT id, body FROM doc")
    assert got == {**{i: f"doc {i}" for i in range(1, 41)}, 7: "Grüße", 33: "a b"}


def test_to_text_refuses_an_lo_written_during_the_run_that_does_not_decode(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A row written while the run goes, naming an LO that is not UTF-8: the sync
    trigger cannot copy it (logged, the writer's transaction commits), the verify pass
    finds it, and the run refuses it by OID before the switch; the row holds its OID."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE doc (id int PRIMARY KEY, body text)")
        for i in range(1, 21):
            conn.execute("INSERT INTO doc VALUES (%s, %s)", (i, str(clob(conn, f"doc {i}"))))
    started(db, "doc.body", RunOptions(to="text"))
    with psycopg.connect(db, autocommit=True) as conn:
        bad = int(conn.execute("SELECT lo_from_bytea(0, '\\xc328'::bytea)").fetchone()[0])  # type: ignore[index]
        conn.execute("INSERT INTO doc VALUES (21, %s)", (str(bad),))
        logged = conn.execute("SELECT error FROM pgblobdump.migration_redo").fetchall()
    assert logged and "UTF8" in str(logged[0][0])
    with pytest.raises(DatabaseError, match=rf"1 LOs .* not valid UTF8 text \({bad}\)"):
        go(db, "doc.body", to="text")
    assert _phase(db) is not None and _phase(db)[0] == "verifying"  # type: ignore[index]
    assert rows(db, "SELECT id, body FROM doc WHERE id = 21") == {21: str(bad)}


def test_to_text_abort_after_a_refusal_gives_the_table_back(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE doc (id int PRIMARY KEY, body varchar(40))")
        conn.execute("INSERT INTO doc VALUES (1, %s), (2, 'inline')", (str(clob(conn, "ok")),))
        bad = int(conn.execute("SELECT lo_from_bytea(0, '\\xff'::bytea)").fetchone()[0])  # type: ignore[index]
        conn.execute("INSERT INTO doc VALUES (3, %s)", (str(bad),))
    before = rows(db, "SELECT id, body FROM doc")
    with pytest.raises(DatabaseError, match=str(bad)):
        go(db, "doc.body", to="text")
    with psycopg.connect(db, autocommit=True) as conn:
        abort(conn, "doc.body", "pgblobdump", LockPolicy())
    assert rows(db, "SELECT id, body FROM doc") == before
    assert column_type(db, "doc", "body") == "character varying(40)"
    assert column_type(db, "doc", "body_pgbd_new") is None


def test_to_text_refuses_an_lo_over_1gb(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE doc (id int PRIMARY KEY, body text)")
        huge = int(conn.execute("SELECT lo_create(0)").fetchone()[0])  # type: ignore[index]
        conn.execute("SELECT lo_put(%s, 1100000000, 'x')", (huge,))
        conn.execute("INSERT INTO doc VALUES (1, %s), (2, 'inline')", (str(huge),))
        with pytest.raises(UsageError, match=f"over 1 GB, which cannot become text.*{huge}"):
            run(conn, "doc.body", RunOptions(to="text"))
    assert column_type(db, "doc", "body") == "text"
    assert rows(db, "SELECT id, body FROM doc") == {1: str(huge), 2: "inline"}


def test_to_text_copies_rows_written_during_the_run(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """An application writing the way pgjdbc does (the LO, then its OID in the row, one
    transaction), inline values, and rows going from inline to a CLOB and back: after the
    switch each row holds the text of what it named then."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE doc (id int PRIMARY KEY, body text)")
        for i in range(1, 301):
            conn.execute("INSERT INTO doc VALUES (%s, %s)", (i, str(clob(conn, f"doc {i}"))))
    stop, errors = threading.Event(), []
    # Only before the switch: the run's new column is there until then.
    running = (
        "EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'doc'::regclass"
        " AND attname = 'body_pgbd_new')"
    )

    def writer() -> None:
        try:
            with psycopg.connect(db, autocommit=True) as conn:
                i = 0
                while not stop.is_set():
                    i += 1
                    with conn.transaction():
                        o = clob(conn, f"late {i}")
                        conn.execute(
                            "INSERT INTO doc SELECT %s, %s WHERE " + running, (10_000 + i, str(o))
                        )
                    conn.execute(
                        "INSERT INTO doc SELECT %s, %s WHERE " + running,
                        (20_000 + i, f"inline {i}"),
                    )
                    with conn.transaction():
                        o = clob(conn, f"now a clob {i}")
                        conn.execute(
                            "UPDATE doc SET body = %s WHERE id = %s AND " + running,
                            (str(o), 1 + i % 300),
                        )
                    conn.execute(
                        "UPDATE doc SET body = %s WHERE id = %s" + " AND " + running,
                        (f"inline again {i}", 1 + (i * 7) % 300),
                    )
                    time.sleep(0.002)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(0.2)
        r = go(db, "doc.body", to="text", batch_rows=5, keep_old=True)
    finally:
        stop.set()
        t.join()
    assert not errors, errors
    assert r.phase == "done"  # type: ignore[attr-defined]
    with psycopg.connect(db) as conn:
        late, inline, wrong = conn.execute(
            "SELECT count(*) FILTER (WHERE id BETWEEN 10001 AND 19999),"
            " count(*) FILTER (WHERE id > 20000),"
            " count(*) FILTER (WHERE body IS DISTINCT FROM CASE WHEN body_lo ~ '^[0-9]+$'"
            "  THEN convert_from(lo_get(body_lo::oid), 'UTF8') ELSE body_lo END) FROM doc"
        ).fetchone()  # type: ignore[misc]
        texts = conn.execute("SELECT count(*) FROM doc WHERE body ~ '^[0-9]+$'").fetchone()[0]  # type: ignore[index]
    assert late > 0 and inline > 0, (late, inline)
    assert wrong == 0 and texts == 0, (wrong, texts)


# -- --to oid --------------------------------------------------------------------------


def oid_table(db: str) -> dict[int, int | None]:
    """cms-dev's files (an integer column of OIDs, 2^31 and up stored negative), a
    bigint copy, and Odoo's varchar of str(oid); returns id -> the OID each names."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE files (id int PRIMARY KEY, digest text, lobject integer NOT NULL,"
            " big bigint, store_fname varchar)"
        )
        want: dict[int, int | None] = {}
        for i in range(1, 61):
            oid = clob(conn, f"file {i}", 3_000_000_000 + i if i % 3 == 0 else 0)
            as_int4 = oid - (1 << 32) if oid >= 1 << 31 else oid
            conn.execute(
                "INSERT INTO files VALUES (%s, md5(%s::text), %s, %s, %s)",
                (i, i, as_int4, oid, str(as_int4)),
            )
            want[i] = oid
    return want


@pytest.mark.parametrize("column", ["lobject", "big", "store_fname"])
def test_to_oid_retypes_integers_and_digits(
    pg17: EmbeddedCluster, new_db: NewDb, column: str
) -> None:
    """Every form of the same OIDs becomes the oid column vacuumlo and pg_dump read: no
    LO left an orphan by vacuumlo's rule, no LO created or removed."""
    db = new_db(pg17)
    want = oid_table(db)
    los = lo_count(db)
    r = go(db, f"files.{column}", to="oid", batch_rows=9)
    assert r.phase == "done"  # type: ignore[attr-defined]
    assert column_type(db, "files", column) == "oid"
    assert rows(db, f"SELECT id, {column}::int8 FROM files") == want
    with psycopg.connect(db) as conn:
        orphans = conn.execute(
            f"SELECT count(*) FROM pg_largeobject_metadata m WHERE NOT EXISTS"
            f" (SELECT 1 FROM files WHERE {column} = m.oid)"
        ).fetchone()[0]  # type: ignore[index]
    assert orphans == 0 and lo_count(db) == los


def test_to_oid_checks_every_value_first(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """A value naming no LO, or in no OID's form, is refused by example before anything
    changes; --missing null gives it NULL; --missing skip keeps the old column too."""
    db = new_db(pg17)
    want = oid_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("INSERT INTO files VALUES (100, 'x', -1, 4000000001, 'report.pdf')")
        conn.execute("INSERT INTO files VALUES (101, 'y', 1, 1, '4000000001')")
    with pytest.raises(DatabaseError, match=r"2 rows .*store_fname hold values that name no LO"
                       r" .*\('4000000001', 'report.pdf'\).*--missing null"):  # fmt: skip
        go(db, "files.store_fname", to="oid")
    with pytest.raises(DatabaseError, match=r"2 rows .*big .*\(1, 4000000001\)"):
        go(db, "files.big", to="oid")
    with pytest.raises(UsageError, match="NOT NULL but 2 of its values name no LO"):
        go(db, "files.lobject", to="oid", missing="null")
    assert column_type(db, "files", "store_fname") == "character varying"
    go(db, "files.store_fname", to="oid", missing="null")
    got = rows(db, "SELECT id, store_fname::int8 FROM files")
    assert got == {**want, 100: None, 101: None}
    go(db, "files.big", to="oid", missing="skip")
    assert rows(db, "SELECT id, big_old FROM files WHERE id >= 100") == {
        100: 4000000001, 101: 1,
    }  # fmt: skip


def test_to_oid_moves_no_bytes_so_widens_nothing(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """W reads the table, not LO 777777: --to text and --to bytea would hand W its bytes
    and are refused; --to oid hands W the number it had, and goes."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        _roles(conn)
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, c text, n integer)")
        conn.execute("SELECT lo_from_bytea(777777, 'secret'), lo_from_bytea(777778, 'open')")
        conn.execute(f"GRANT SELECT ON LARGE OBJECT 777778 TO {W}, {R}")
        conn.execute(f"GRANT SELECT ON LARGE OBJECT 777777 TO {R}")
        conn.execute("INSERT INTO t VALUES (1, '777777', 777777), (2, '777778', 777778)")
        conn.execute(f"GRANT SELECT ON t TO {W}, {R}")
    for spec, to in (("t.c", "text"), ("t.c", "bytea"), ("t.n", "bytea")):
        with pytest.raises(DatabaseError, match=rf"into {to} would let .*777777.*{W}"):
            go(db, spec, to=to)
    assert column_type(db, "t", "c") == "text" and column_type(db, "t", "n") == "integer"
    go(db, "t.c", to="oid")
    go(db, "t.n", to="oid")
    with as_role(db, W) as conn:
        assert conn.execute("SELECT c, n FROM t ORDER BY id").fetchall() == [
            (777777, 777777), (777778, 777778),
        ]  # fmt: skip
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT lo_get(c) FROM t WHERE id = 1")


def test_to_text_writer_may_not_point_a_row_at_an_lo_it_may_not_read(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """During a --to text run, W writing the digits of an LO it may not read is refused
    by the server, as reading it would be: W would read its text after the switch."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        _roles(conn)
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, c text)")
        conn.execute("SELECT lo_from_bytea(777777, 'secret'), lo_from_bytea(777778, 'open')")
        conn.execute(f"GRANT SELECT ON LARGE OBJECT 777778 TO {W}, {R}")
        conn.execute(f"GRANT SELECT ON LARGE OBJECT 777777 TO {R}")
        conn.execute("INSERT INTO t VALUES (1, '777778')")
        conn.execute(f"GRANT SELECT, UPDATE ON t TO {W}, {R}")
    started(db, "t.c", RunOptions(to="text"))
    with as_role(db, W) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="large object 777777"):
            conn.execute("UPDATE t SET c = '777777' WHERE id = 1")
        conn.execute("UPDATE t SET c = 'inline is fine' WHERE id = 1")
    go(db, "t.c", to="text")
    assert rows(db, "SELECT id, c FROM t") == {1: "inline is fine"}


# -- --to bytea from integers and digits --------------------------------------------------


@pytest.mark.parametrize("column", ["lobject", "big", "store_fname"])
def test_to_bytea_from_integers_and_digits(
    pg17: EmbeddedCluster, new_db: NewDb, column: str
) -> None:
    db = new_db(pg17)
    want = oid_table(db)
    r = go(db, f"files.{column}", to="bytea", unlink=True, batch_rows=11)
    # The table's two other columns name the same LOs (as an integer, a bigint or
    # digits): --unlink keeps them all, as it keeps what an oid column names.
    assert (r.unlinked, r.kept_referenced) == (0, 60)  # type: ignore[attr-defined]
    assert column_type(db, "files", column) == "bytea"
    got = rows(db, f"SELECT id, convert_from({column}, 'UTF8') FROM files")
    assert got == {i: f"file {i}" for i in want}
    assert lo_count(db) == 60


# -- in place --------------------------------------------------------------------------


def test_in_place_to_text_and_to_oid(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    want = clob_table(db)
    r = run_in_place_at(db, "task_comment.text", RunOptions(to="text"))
    assert r.phase == "done"
    assert column_type(db, "task_comment", "text") == "text"
    assert rows(db, "SELECT id, text FROM task_comment") == want
    oids = oid_table(db)
    run_in_place_at(db, "files.lobject", RunOptions(to="oid"))
    assert column_type(db, "files", "lobject") == "oid"
    assert rows(db, "SELECT id, lobject::int8 FROM files") == oids


def run_in_place_at(db: str, spec: str, opts: RunOptions):  # type: ignore[no-untyped-def]
    with psycopg.connect(db, autocommit=True) as conn:
        return run_in_place(conn, spec, opts)


# -- a kill and a resume -------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "column", "to"),
    [("doc", "body", "text"), ("files", "lobject", "oid"), ("files", "store_fname", "bytea")],
)
def test_kill_9_mid_fill_then_a_rerun_finishes(
    pg17: EmbeddedCluster, new_db: NewDb, table: str, column: str, to: str
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE doc (id int PRIMARY KEY, body text);"
            "CREATE TABLE files (id int PRIMARY KEY, lobject integer, store_fname varchar)"
        )
        conn.execute(
            "INSERT INTO doc SELECT g, CASE WHEN g % 5 = 0 THEN 'inline ' || g ELSE"
            " lo_from_bytea(0, convert_to('clob ' || g || ' é', 'UTF8'))::text END"
            " FROM generate_series(1, 1500) g"
        )
        conn.execute(
            "INSERT INTO files SELECT g, lo_from_bytea(0, convert_to('file ' || g, 'UTF8'))::int8"
            "::int4, NULL FROM generate_series(1, 1500) g"
        )
        conn.execute("UPDATE files SET store_fname = lobject::text")
        expect = {
            "text": "SELECT id, CASE WHEN body LIKE 'inline%' THEN body ELSE"
            " convert_from(lo_get(body::oid), 'UTF8') END FROM doc",
            "oid": "SELECT id, lobject::int8 FROM files",
            "bytea": "SELECT id, lo_get(store_fname::oid) FROM files",
        }[to]
        before = {int(r[0]): r[1] for r in conn.execute(expect)}
    spec, old = f"{table}.{column}", f"SELECT id, {column}::text FROM {table}"
    original = rows(db, old)
    _kill_when_filled(db, 30, spec, "--to", to, "--batch-rows", "2")
    p = _phase(db)
    assert p is not None and p[0] == "filling", p
    assert rows(db, old) == original  # the old column is intact
    done = subprocess.run(_argv(db, spec, "--to", to, "--json"), capture_output=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"resuming run" in done.stderr
    assert column_type(db, table, column) == {"text": "text", "oid": "oid", "bytea": "bytea"}[to]
    after = {
        "text": f"SELECT id, {column} FROM {table}",
        "oid": f"SELECT id, {column}::int8 FROM {table}",
        "bytea": f"SELECT id, {column} FROM {table}",
    }[to]
    got = rows(db, after)
    if to == "bytea":
        got = {k: bytes(v) for k, v in got.items()}  # type: ignore[call-overload]
        before = {k: bytes(v) for k, v in before.items()}
    assert got == before


# -- plan ------------------------------------------------------------------------------


def test_plan_looks_at_a_named_text_column(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    clob_table(db)
    with psycopg.connect(db, autocommit=True) as conn:
        unnamed = plan(conn, "test")
        p = plan(conn, "test", named=["task_comment.text"])
        with pytest.raises(UsageError, match="addedat is timestamp"):
            plan(conn, "test", named=["task_comment.addedat"])
    assert unnamed.columns == [] and unnamed.orphans == lo_count(db)
    (c,) = p.columns
    assert c.column == "public.task_comment.text" and c.form == "text" and c.confirmed
    assert c.stats is not None
    # 64 distinct OIDs in the digits form, 63 of them LOs (4000000001 is not)
    assert (c.stats.referenced, c.stats.present, c.stats.dangling) == (65, 64, 1)
    assert c.inline == 5  # 'hello, inline', '', 'Grüße inline', '<oid>.txt', ' <oid>'
    assert p.orphans == 1  # the file name's LO: no reference names it
    assert any("--to text keeps them" in n for n in c.notes)


def test_a_column_default_is_no_dependant(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """An oid column with a default moves to bytea, the default dropped and said so (it
    counted as a dependant that blocked every such column before)."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE f (id int PRIMARY KEY, b oid DEFAULT 0)")
        conn.execute("INSERT INTO f VALUES (1, lo_from_bytea(0, 'x'))")
    r = go(db, "f.b")
    assert r.phase == "done"  # type: ignore[attr-defined]
    assert any("default (0) cannot apply to bytea: dropped" in n for n in r.notes)  # type: ignore[attr-defined]
    assert rows(db, "SELECT id, b FROM f") == {1: b"x"}
