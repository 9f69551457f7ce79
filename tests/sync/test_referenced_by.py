"""``--referenced-by`` on columns that hold OIDs the way applications write them (issue
37): file names ``<oid>.<ext>`` in text (pg-lo-storage), a text column mixing inline
values and OIDs (Spring Cloud Data Flow), ``int4`` holding OIDs of 2^31 or more as
negative numbers, ``int8`` with values that are no OID, ``numeric``, arrays of a domain.
dump, copy and sync each select exactly the LOs named (a ``::oid`` cast failed on every
one of these but the ``int4`` scalar), by workers, parts and an incremental dump too; a
column of another type is refused in one line."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from pgblobdump.errors import UsageError
from pgblobdump.packed.dump.run import DumpRequest, dump
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.pg.lostream import Selection
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage.local import LocalDirectory
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.run import SyncRequest, sync
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb
from tests.losets import fill, roles, state

BIG = 3_000_000_000
"""An OID of 2^31 or more: ``oid::int4`` stores it as -1294967296."""
LOS = {o: (o % 7 + 1, 0, 0, False) for o in [*range(40_001, 40_016), BIG, BIG + 1, 2**32 - 1]}

TABLES = [
    "CREATE TABLE files (id serial, name text)",
    "INSERT INTO files (name) VALUES ('40001.png'), ('40002.jpeg'), ('40003'),"
    " ('readme.txt'), ('x40004.png'), ('40004.tar.gz'), ('99.png'), (NULL)",
    "CREATE TABLE task_comment (id serial, body text)",
    "INSERT INTO task_comment (body) VALUES ('hello world'), ('40005'),"
    " ('inline text naming 40006'), (''), ('-1294967296'), ('4294967296'), ('  40007')",
    "CREATE TABLE attach (id serial, o int4, os int4[])",
    "INSERT INTO attach (o, os) VALUES (-1294967296, NULL), (-1, '{40008,0,NULL}'),"
    " (40007, '{-1294967295}'), (0, NULL)",
    "CREATE TABLE refs8 (id serial, o int8)",
    "INSERT INTO refs8 (o) VALUES (-5), (-1294967296), (5000000000), (4294967296),"
    " (40009), (3000000001), (0), (NULL)",
    "CREATE TABLE refsn (id serial, o numeric)",
    "INSERT INTO refsn (o) VALUES (40010), (40011.5), (40012.000), (-3), (1e20), ('NaN')",
    "CREATE DOMAIN file_name AS varchar(64)",
    "CREATE TABLE extra (id serial, names file_name[])",
    "INSERT INTO extra (names) VALUES ('{40013.pdf,nope,NULL}'), ('{}'), (NULL)",
    "CREATE TABLE meta (id serial, doc jsonb)",
    "CREATE DOMAIN lo AS pg_catalog.oid",  # as the lo extension makes it
    "CREATE TABLE blobs (id serial, o lo)",
    "INSERT INTO blobs (o) VALUES (40011), (99), (NULL)",
]

CASES = {
    "files.name": {40001, 40002, 40003, 40004},
    "task_comment.body": {40005, BIG},
    "attach.o": {BIG, 2**32 - 1, 40007},
    "attach.os": {40008, BIG + 1},
    "refs8.o": {40009, BIG + 1},
    "refsn.o": {40010, 40012},
    "extra.names": {40013},
    "blobs.o": {40011},
}
"""Each column, and the LOs its values name: file names with any suffixes (``40004.tar.gz``)
and digits (not digits inside a text, nor a dangling 99), a negative int4 as the OID + 2^32
(as text too), an int8 as it is (a negative or too large one names none), a whole numeric,
a domain's array, a domain over oid (as is; a dangling 99 selects nothing)."""


def _ref(column: str) -> Selection:
    table, col = column.split(".")
    return Selection(referenced_by=((table, col),))


def _source(pg: EmbeddedCluster, new_db: NewDb) -> str:
    roles(pg)
    src = new_db(pg)
    fill(src, LOS)
    with psycopg.connect(src, autocommit=True) as conn:
        for s in TABLES:
            conn.execute(s)
    return src


def _archived(path: Path) -> set[int]:
    return {r.oid for r in PackedDirectory(LocalDirectory(path)).index}


@pytest.mark.parametrize("column", CASES)
def test_dump_selects_exactly_the_los_named(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, column: str
) -> None:
    src = _source(pg17, new_db)
    r = dump(src, DumpRequest(_ref(column)), LocalDirectory(tmp_path / "a", create=True))
    assert _archived(tmp_path / "a") == CASES[column] and r.los == len(CASES[column])


@pytest.mark.parametrize("column", CASES)
def test_copy_and_sync_select_exactly_the_los_named(
    pg16: EmbeddedCluster, pg18: EmbeddedCluster, new_db: NewDb, column: str
) -> None:
    src = _source(pg16, new_db)
    roles(pg18)
    dst = new_db(pg18)
    assert copy(src, dst, CopyRequest(_ref(column))).los == len(CASES[column])
    assert state(dst).keys() == CASES[column]
    dst = new_db(pg18)
    r = sync(src, dst, SyncRequest(_ref(column)))
    assert sorted(r.plan.new) == sorted(CASES[column]) and r.copied == len(CASES[column])
    got = state(dst)
    assert got.keys() == CASES[column]
    whole = state(src)
    assert all(got[o] == whole[o] for o in got)


def test_workers_parts_and_an_incremental_keep_the_columns_reading(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src = _source(pg17, new_db)
    both = Selection(referenced_by=(("files", "name"), ("refs8", "o")))
    want = CASES["files.name"] | CASES["refs8.o"]
    r = dump(src, DumpRequest(both, jobs=3), LocalDirectory(tmp_path / "a", create=True))
    assert _archived(tmp_path / "a") == want and r.los == len(want)
    dst = new_db(pg17)
    got = [copy(src, dst, CopyRequest(both, part=(k, 2), jobs=2)).los for k in (1, 2)]
    assert sum(got) == len(want) and state(dst).keys() == want
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("INSERT INTO files (name) VALUES ('40014.png')")
        conn.execute("SELECT lo_put(40001, 0, 'changed')")
    r = dump(src, DumpRequest(both, jobs=2, since=str(tmp_path / "a")),
             LocalDirectory(tmp_path / "b", create=True))  # fmt: skip
    assert _archived(tmp_path / "b") == want | {40014}
    assert r.incremental is not None


def test_a_column_of_another_type_is_refused_in_one_line(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src = _source(pg17, new_db)
    with pytest.raises(UsageError, match=r"meta\.doc: a column of type jsonb"):
        copy(src, new_db(pg17), CopyRequest(_ref("meta.doc")))
    out = tmp_path / "a"
    result = run("dump", "-d", src, "-o", str(out), "--referenced-by", "meta.doc")
    assert_one_line_error(result, 2, "name a view's column that extracts the OIDs")
    assert not out.exists()
    # what the refusal says to do instead
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("""INSERT INTO meta (doc) VALUES ('{"lo": 40015}'), ('{"lo": "x"}')""")
        conn.execute(
            "CREATE VIEW meta_los AS SELECT (doc->>'lo')::int8 AS lo FROM meta"
            " WHERE doc->>'lo' ~ '^[0-9]+$'"
        )
    r = dump(src, DumpRequest(_ref("meta_los.lo")), LocalDirectory(out, create=True))
    assert _archived(out) == {40015} and r.los == 1
