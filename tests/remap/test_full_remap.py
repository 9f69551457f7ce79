"""``restore --full --remap``: two tenants' whole databases, whose LOs have the same
OIDs, into one database. The second one's tables are restored by pg_restore and the
references in them, found through the reference model, are rewritten: an oid column and
a text column of ``<oid>.<ext>`` names (high confidence); an integer column whose few
values equal OIDs by chance is reported, not rewritten; the first tenant's tables,
which existed before, are never touched."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import run
from tests.conftest import NewDb

FIRST = 300_000


def _tenant(db: str, schema: str, fill: str) -> Path | None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            f"SELECT lo_from_bytea({FIRST} + g, convert_to('{fill}' || g, 'UTF8'))"
            " FROM generate_series(0, 49) g"
        )
        conn.execute(
            f"CREATE SCHEMA {schema};"
            f" CREATE TABLE {schema}.docs (id int PRIMARY KEY, lo oid, name text, title text);"
            f" INSERT INTO {schema}.docs SELECT g, {FIRST} + g, ({FIRST} + g)::text || '.pdf',"
            f" 'doc ' || g FROM generate_series(0, 49) g;"
            f" CREATE TABLE {schema}.amounts (qty int);"
            f" INSERT INTO {schema}.amounts SELECT g FROM generate_series(1, 200) g;"
            f" INSERT INTO {schema}.amounts VALUES ({FIRST} + 3)"
        )
    return None


def _reads(db: str, schema: str) -> list[tuple[bytes, bytes]]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            f"SELECT lo_get(lo), lo_get(split_part(name, '.', 1)::int8::oid)"
            f" FROM {schema}.docs ORDER BY id"
        ).fetchall()
    return [(bytes(a), bytes(b)) for a, b in rows]


def test_two_tenants_whole(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    a, b, target = new_db(pg17), new_db(pg17), new_db(pg17)
    _tenant(a, "ta", "A")
    _tenant(b, "tb", "B")
    for db, name in ((a, "a"), (b, "b")):
        assert run("dump", "--full", "-d", db, "-o", str(tmp_path / name)).exit_code == 0
    assert run("restore", "--full", str(tmp_path / "a"), "-d", target).exit_code == 0
    before = _reads(target, "ta")
    result = run("restore", "--full", str(tmp_path / "b"), "-d", target, "--remap", "--json")
    assert result.exit_code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["remapped"] == 50
    rewritten = {w["column"]: w["rows"] for w in record["rewrites"]}
    assert rewritten == {"tb.docs.lo": 50, "tb.docs.name": 50}
    assert "tb.amounts.qty: 1 value name remapped LOs" in result.stderr
    assert _reads(target, "ta") == before == [(f"A{g}".encode(),) * 2 for g in range(50)]
    assert _reads(target, "tb") == [(f"B{g}".encode(),) * 2 for g in range(50)]
    with psycopg.connect(target) as conn:
        qty = conn.execute(f"SELECT count(*) FROM tb.amounts WHERE qty = {FIRST + 3}").fetchone()
    assert qty == (1,)  # reported, not touched


def test_only_the_archives_tables_are_searched(pg17: EmbeddedCluster, new_db: NewDb,
                                               tmp_path: Path) -> None:  # fmt: skip
    """A table another session makes while pg_restore runs is new too, but not the
    archive's: it is never searched (discover.restored keeps the TOC's tables only)."""
    from pgblobdump.packed.read.source import directory
    from pgblobdump.remap import discover

    src = new_db(pg17)
    _tenant(src, "ta", "A")
    assert run("dump", "--full", "-d", src, "-o", str(tmp_path / "a")).exit_code == 0
    names = discover.archive_tables(directory(str(tmp_path / "a")))
    assert names == {("ta", "docs"), ("ta", "amounts")}
    target = new_db(pg17)
    with psycopg.connect(target, autocommit=True) as conn:
        before = discover.user_tables(conn)
        conn.execute(
            "CREATE SCHEMA ta; CREATE TABLE ta.docs (lo oid); CREATE TABLE ta.other (lo oid)"
        )
        new = discover.user_tables(conn) - before
        kept = discover.restored(conn, new, names)
        got = conn.execute("SELECT relname FROM pg_class WHERE oid = ANY(%s::oid[])",
                           (sorted(kept),)).fetchall()  # fmt: skip
    assert len(new) == 2 and got == [("docs",)]
