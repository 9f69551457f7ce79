"""dump --full / restore --full: a whole database (tables, an owning table with an oid
column, a view, comments, LOs with owners, ACLs and comments, and where the server has
the lo extension a lo_manage trigger) restored into 16, 17 and 18: the schema as
pg_dump -s prints it, the table rows and every LO equal."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import psycopg
from click.testing import CliRunner, Result

from pgblobdump.cli import cli
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb
from tests.losets import fill, roles, state

SCHEMA = """
CREATE TABLE docs (id int PRIMARY KEY, title text NOT NULL, body oid);
CREATE TABLE tags (doc int REFERENCES docs, tag text, PRIMARY KEY (doc, tag));
CREATE VIEW doc_tags AS SELECT d.title, t.tag FROM docs d JOIN tags t ON t.doc = d.id;
CREATE SEQUENCE ticket START 42;
COMMENT ON TABLE docs IS 'documents, bodies as large objects';
INSERT INTO docs SELECT o - 60000, 'doc ' || o, o FROM generate_series(60000, 60049) o;
INSERT INTO tags SELECT id, t FROM docs, unnest(ARRAY['a', 'b']) t WHERE id % 3 = 0;
"""
TRIGGER = """
CREATE EXTENSION lo;
CREATE TRIGGER docs_lo BEFORE UPDATE OR DELETE ON docs
  FOR EACH ROW EXECUTE FUNCTION lo_manage(body);
"""


def _source(cluster: EmbeddedCluster, new_db: NewDb, trigger: bool) -> str:
    roles(cluster)
    db = new_db(cluster)
    fill(db, {o: (o % 5000, o % 3, o % 3, o % 4 == 0) for o in range(60_000, 60_050)})
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(SCHEMA)
        if trigger:
            conn.execute(TRIGGER)
    return db


def _schema(db: str, major: int) -> str:
    """pg_dump -s, without its version comments and 18's random \\restrict keys."""
    pg_dump = toolchain.find(major).tool("pg_dump")
    out = subprocess.run([str(pg_dump), "-s", "-d", db], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return re.sub(r"^(\\(un)?restrict .*|-- Dumped (from|by) .*)$", "", out, flags=re.M)


def _rows(db: str) -> list[tuple[object, ...]]:
    with psycopg.connect(db) as conn:
        return conn.execute(
            "SELECT d.id, d.title, d.body, t.tag, (SELECT last_value FROM ticket)"
            " FROM docs d LEFT JOIN tags t ON t.doc = d.id ORDER BY 1, 4"
        ).fetchall()


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _round_trip(src: str, src_major: int, targets: list[EmbeddedCluster], new_db: NewDb,
                tmp_path: Path) -> None:  # fmt: skip
    path = tmp_path / "full"
    done = _cli("dump", "--full", "-d", src, "-o", str(path), "--json")
    assert done.exit_code == 0, done.output
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["source"]["pg_dump"]["version"].startswith(str(src_major))
    assert "database.dump" in {f["name"] for f in manifest["files"]}
    assert len(list(path.iterdir())) <= 5
    assert _cli("verify", str(path)).exit_code == 0
    for cluster in targets:
        roles(cluster)
        dst = new_db(cluster)
        restored = _cli("restore", "--full", str(path), "-d", dst, "-j", "2")
        assert restored.exit_code == 0, restored.output
        assert state(dst) == state(src), cluster.tc.major
        assert _rows(dst) == _rows(src), cluster.tc.major
        assert _schema(dst, cluster.tc.major) == _schema(src, cluster.tc.major), cluster.tc.major


def test_16_into_16_17_18(pg16: EmbeddedCluster, pg17: EmbeddedCluster, pg18: EmbeddedCluster,
                          new_db: NewDb, tmp_path: Path) -> None:  # fmt: skip
    # the 16 wheel has no lo extension: no lo_manage trigger on this source
    src = _source(pg16, new_db, trigger=False)
    _round_trip(src, 16, [pg16, pg17, pg18], new_db, tmp_path)


def test_17_with_lo_manage_into_17_18(pg17: EmbeddedCluster, pg18: EmbeddedCluster,
                                      new_db: NewDb, tmp_path: Path) -> None:  # fmt: skip
    src = _source(pg17, new_db, trigger=True)
    _round_trip(src, 17, [pg17, pg18], new_db, tmp_path)
    # the trigger came back and works: deleting a row unlinks its LO
    dst = new_db(pg18)
    roles(pg18)
    assert _cli("restore", "--full", str(tmp_path / "full"), "-d", dst).exit_code == 0
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute("DELETE FROM docs WHERE id = 1 AND NOT EXISTS"
                     " (SELECT 1 FROM tags WHERE doc = 1)")  # fmt: skip
        gone = conn.execute("SELECT count(*) FROM pg_largeobject_metadata WHERE oid = 60001")
        assert gone.fetchone() == (0,)


def test_bad_input(pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    src = new_db(pg16)
    result = _cli("dump", "--full", "-d", src, "-o", "-")
    assert result.exit_code == 2 and "--full writes a directory archive" in result.stderr
    result = _cli("dump", "--full", "--pg-dump-major", "15", "-d", src, "-o", str(tmp_path / "x"))
    assert result.exit_code == 5, result.output
    assert "pg_dump 15 cannot dump a PostgreSQL 16 server" in result.stderr
    assert not (tmp_path / "x" / "manifest.json").exists()
    los_only = tmp_path / "los"
    assert _cli("dump", "-d", src, "-o", str(los_only)).exit_code == 0
    result = _cli("restore", "--full", str(los_only), "-d", new_db(pg16))
    assert result.exit_code == 2 and "dumped without --full" in result.stderr


def test_a_failing_pg_restore_names_what_is_left(
    pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src = _source(pg16, new_db, trigger=False)
    path = tmp_path / "full"
    assert _cli("dump", "--full", "-d", src, "-o", str(path)).exit_code == 0
    dst = new_db(pg16)
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute("CREATE TABLE tags (x int)")  # pre-data's CREATE TABLE tags fails
    result = _cli("restore", "--full", str(path), "-d", dst)
    assert result.exit_code == 9, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: pg_restore") and "tags" in line, result.stderr
    with psycopg.connect(dst) as conn:
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)


def test_a_manifest_with_a_bad_source_is_refused(
    pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """restore --full reads the manifest's source.pg_dump: edited by hand into anything
    but what dump --full writes, it is one Error line naming the field, exit 7, and
    nothing is restored."""
    src = _source(pg16, new_db, trigger=False)
    path = tmp_path / "full"
    assert _cli("dump", "--full", "-d", src, "-o", str(path)).exit_code == 0
    good = json.loads((path / "manifest.json").read_text())
    dst = new_db(pg16)
    cases: list[tuple[object, str]] = [
        ("a string", "'source' is \"a string\", not an object"),
        ({"pg_dump": ["17.2"]}, "'source.pg_dump' is an array"),
        ({"pg_dump": {"file": "database.dump"}}, "'source.pg_dump.version' is missing"),
        ({"pg_dump": {"version": 17, "file": "database.dump"}}, "'source.pg_dump.version' is 17"),
        ({"pg_dump": {"version": "seventeen", "file": "database.dump"}}, "not a PostgreSQL"),
        ({"pg_dump": {"version": "16.4", "file": "../etc/passwd"}}, "'source.pg_dump.file'"),
        ({"pg_dump": {"version": "16.4"}}, "'source.pg_dump.file' is missing"),
    ]
    for source, said in cases:
        (path / "manifest.json").write_text(json.dumps({**good, "source": source}))
        result = _cli("restore", "--full", str(path), "-d", dst)
        assert result.exit_code == 7, (source, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
        assert "manifest.json: " in lines[0] and said in lines[0], (source, lines[0])
    no_source = {k: v for k, v in good.items() if k != "source"}
    (path / "manifest.json").write_text(json.dumps(no_source))
    result = _cli("restore", "--full", str(path), "-d", dst)
    assert result.exit_code == 7 and "has no 'source'" in result.stderr, result.output
    files = [f for f in good["files"] if f["name"] != "database.dump"]
    (path / "manifest.json").write_text(json.dumps({**good, "files": files}))
    result = _cli("restore", "--full", str(path), "-d", dst)
    assert result.exit_code == 7 and "does not list database.dump" in result.stderr, result.output
    with psycopg.connect(dst) as conn:
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)
        assert conn.execute("SELECT to_regclass('docs')").fetchone() == (None,)
