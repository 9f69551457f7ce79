"""``pgblobdump import``: files become LOs, on a real PostgreSQL 17 (and SeaweedFS for an
S3 prefix): the tree walked in key order, each file's bytes (holes too) in its LO, what
is skipped said, rows written or updated with their LO, owners and grants, and a file
that changes while read read again or skipped."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import psycopg
import pytest

from pgblobdump.errors import DatabaseError, FileError, UsageError
from pgblobdump.files.importing.follow import Followed, check_inside
from pgblobdump.files.importing.rows import RowTarget
from pgblobdump.files.importing.run import ImportRequest, run_import
from pgblobdump.files.objects import open_place
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb


def los(db: str) -> dict[int, bytes]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT oid::int8, lo_get(oid) FROM pg_largeobject_metadata ORDER BY oid"
        ).fetchall()
    return {int(o): bytes(d) for o, d in rows}


def journal(db: str) -> dict[str, int]:
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT path, oid::int8 FROM pgblobdump_import.files").fetchall()
    return {p: int(o) for p, o in rows}


def tree(root: Path) -> dict[str, bytes]:
    """Nested directories, unicode names, an empty file, a sparse file, a file of
    several MiB (read in ranges) and a symbolic link; returns key -> bytes of the files."""
    files = {
        "a.txt": b"alpha",
        "empty": b"",
        "dir/sub/deep.bin": os.urandom(5000),
        "dir/ünï cødé ✓.txt": "grüße".encode(),
        "big.bin": os.urandom(3 << 20) + b"tail",
    }
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    with open(root / "sparse", "wb") as f:  # a hole of 2 MiB between two runs
        f.write(b"head")
        f.seek(2 << 20)
        f.write(b"end")
    files["sparse"] = b"head" + b"\0" * ((2 << 20) - 4) + b"end"
    (root / ".pgblobdump-part-1-2").write_bytes(b"ours")
    os.symlink(root / "a.txt", root / "link")
    return files


def test_a_tree_becomes_los_with_its_bytes_holes_and_names(
    tmp_path: Path, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    files = tree(tmp_path)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(900000, 'theirs')")
    r = run_import(db, ImportRequest(str(tmp_path), jobs=2))
    assert r.files == len(files) and r.skipped == [
        ("link", "a symbolic link (not followed without --follow-symlinks)")
    ]
    assert r.oids is not None and r.oids[0] > 900_000
    got = los(db)
    assert got.pop(900_000) == b"theirs"
    paths = journal(db)
    assert {k: got[o] for k, o in paths.items()} == files
    # OIDs follow the keys' order
    assert sorted(paths, key=paths.__getitem__) == sorted(files)
    with psycopg.connect(db) as conn:  # the hole stayed a hole: 2 pages of 1,025 stored
        pages = conn.execute(
            "SELECT count(*) FROM pg_largeobject WHERE loid = %s", (paths["sparse"],)
        ).fetchone()
        assert pages is not None and pages[0] == 2
        sha = conn.execute(
            "SELECT sha256 FROM pgblobdump_import.files WHERE path = 'big.bin'"
        ).fetchone()
        assert sha is not None and bytes(sha[0]) == hashlib.sha256(files["big.bin"]).digest()
    # once more: a new run, new LOs (the journal does not refuse a finished run's place)
    again = run_import(db, ImportRequest(str(tmp_path)))
    assert again.files == len(files) and again.oids and again.oids[0] > r.oids[1]


def test_files_named_like_the_tools_own_are_skipped_and_said(
    tmp_path: Path, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A user's file or directory named .pgblobdump* is not imported but reported; the
    tool's own (a part, a probe, an export's state with its export.json) are not."""
    db = new_db(pg17)
    for key in ("a", ".pgblobdump-notes.txt", "d/.pgblobdump", "d/.pgblobdump-export/x",
                ".pgblobdump-part-7-1", "d/.pgblobdump-probe-7-2", "e/.pgblobdump-export/x",
                "e/.pgblobdump-export/export.json"):  # fmt: skip
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(key.encode())
    r = run_import(db, ImportRequest(str(tmp_path)))
    assert r.files == 1 and sorted(los(db).values()) == [b"a"]
    assert [k for k, _ in r.skipped] == [".pgblobdump-notes.txt", "d/.pgblobdump",
                                         "d/.pgblobdump-export"]  # fmt: skip
    assert all("the tool's own" in why for _, why in r.skipped)


def test_symbolic_links_followed_only_inside(tmp_path: Path, pg17: EmbeddedCluster,
                                            new_db: NewDb) -> None:  # fmt: skip
    db = new_db(pg17)
    root = tmp_path / "in"
    root.mkdir()
    (root / "real").write_bytes(b"real")
    (tmp_path / "secret").write_bytes(b"outside")
    os.symlink(root / "real", root / "inside")
    os.symlink(tmp_path / "secret", root / "outside")
    os.mkfifo(root / "fifo")
    (root.joinpath(os.fsdecode(b"latin1-\xe9"))).write_bytes(b"a name not in UTF-8")
    r = run_import(db, ImportRequest(str(root), follow_symlinks=True))
    assert r.files == 2
    skipped = dict(r.skipped)
    assert set(skipped) == {"outside", "fifo", "latin1-\ufffd"}, skipped
    assert sorted(los(db).values()) == [b"real", b"real"]


def test_table_rows_inserted_then_updated_old_lo_kept(
    tmp_path: Path, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    (tmp_path / "x").write_bytes(b"one")
    (tmp_path / "y").write_bytes(b"two")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id serial, path text UNIQUE, blob oid, note text)")
        conn.execute("INSERT INTO docs (path, blob, note) VALUES ('y', NULL, 'kept note')")
    rows = RowTarget("docs", "path", "blob")
    first = run_import(db, ImportRequest(str(tmp_path), rows=rows))
    assert (first.rows_inserted, first.rows_updated) == (1, 1)
    (tmp_path / "x").write_bytes(b"one, edited")
    second = run_import(db, ImportRequest(str(tmp_path), rows=rows))
    assert (second.rows_inserted, second.rows_updated) == (0, 2)
    got = los(db)
    with psycopg.connect(db) as conn:
        table = dict(conn.execute("SELECT path, blob::int8 FROM docs").fetchall())
        note = conn.execute("SELECT note FROM docs WHERE path = 'y'").fetchone()
    assert note == ("kept note",)
    assert got[table["x"]] == b"one, edited" and got[table["y"]] == b"two"
    # the LOs the rows named before are kept, and said to be unreferenced now
    assert second.unreferenced == sorted(journal_first(first))
    assert all(o in got for o in second.unreferenced)


def journal_first(r: object) -> list[int]:
    assert r.oids is not None  # type: ignore[attr-defined]
    first, last = r.oids  # type: ignore[attr-defined]
    return list(range(first, last + 1))


def test_table_refused_before_anything_is_written(
    tmp_path: Path, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    (tmp_path / "x").write_bytes(b"one")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (path text PRIMARY KEY, blob oid, n int)")
        conn.execute("CREATE ROLE reader LOGIN")
        conn.execute("GRANT SELECT ON docs TO reader")
    for target, fragment in [
        (RowTarget("nope", "path", "blob"), "no such table"),
        (RowTarget("docs", "nope", "blob"), "no such column"),
        (RowTarget("docs", "path", "n"), "must be oid or bigint"),
        (RowTarget("docs", "n", "blob"), "must be text"),
    ]:
        with pytest.raises(DatabaseError, match=fragment):
            run_import(db, ImportRequest(str(tmp_path), rows=target))
    with pytest.raises(DatabaseError, match="may not write it"):
        run_import(
            db + " user=reader",
            ImportRequest(str(tmp_path), rows=RowTarget("docs", "path", "blob")),
        )
    assert los(db) == {}


def test_a_path_column_without_a_unique_index_is_refused(
    tmp_path: Path, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Two rows with one path would both be given back one old LO by a rollback (the
    other's orphaned): a path column not unique on its own is refused, nothing written."""
    db = new_db(pg17)
    (tmp_path / "d00").mkdir()
    (tmp_path / "d00" / "0000").write_bytes(b"new")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE plain (id int PRIMARY KEY, path text, blob oid)")
        conn.execute("SELECT lo_from_bytea(77, 'a'), lo_from_bytea(78, 'b')")
        conn.execute("INSERT INTO plain VALUES (1, 'd00/0000', 77), (2, 'd00/0000', 78)")
        conn.execute("CREATE TABLE partial (path text, blob oid)")
        conn.execute("CREATE UNIQUE INDEX ON partial (path) WHERE blob IS NOT NULL")
        conn.execute("CREATE TABLE pair (tenant text, path text, blob oid, UNIQUE (tenant, path))")
        conn.execute("CREATE TABLE lowered (path text, blob oid)")
        conn.execute("CREATE UNIQUE INDEX ON lowered (lower(path))")
    for table in ("plain", "partial", "pair", "lowered"):
        with pytest.raises(DatabaseError, match="no unique index or primary key"):
            run_import(db, ImportRequest(str(tmp_path), rows=RowTarget(table, "path", "blob")))
    assert los(db) == {77: b"a", 78: b"b"}
    with psycopg.connect(db) as conn:
        kept = conn.execute("SELECT id, blob::int8 FROM plain ORDER BY id").fetchall()
    assert kept == [(1, 77), (2, 78)]
    out = run("import", str(tmp_path), "-d", db, "--table", "plain", "--path-column", "path",
              "--lo-column", "blob")  # fmt: skip
    assert_one_line_error(out, 4, "no unique index or primary key")


def test_owner_and_grants(tmp_path: Path, pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    (tmp_path / "x").write_bytes(b"one")
    with psycopg.connect(db, autocommit=True) as conn:
        for role in ("app_owner", "app_reader", "app_writer", "stranger"):
            conn.execute(f"DROP ROLE IF EXISTS {role}")
            conn.execute(f"CREATE ROLE {role} LOGIN")
    r = run_import(db, ImportRequest(str(tmp_path), owner="app_owner",
                                     grants=(("app_reader", ("SELECT",)),
                                             ("app_writer", ("SELECT", "UPDATE")))))  # fmt: skip
    assert r.oids is not None
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT pg_get_userbyid(lomowner), lomacl::text[] FROM pg_largeobject_metadata"
            " WHERE oid = %s",
            (r.oids[0],),
        ).fetchone()
    assert row is not None
    owner, acl = row
    assert owner == "app_owner"
    assert sorted(acl) == sorted(["app_owner=rw/app_owner", "app_reader=r/app_owner",
                                  "app_writer=rw/app_owner"])  # fmt: skip


def test_owner_the_role_cannot_set_is_refused(tmp_path: Path, pg17: EmbeddedCluster,
                                              new_db: NewDb) -> None:  # fmt: skip
    db = new_db(pg17)
    (tmp_path / "x").write_bytes(b"one")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS plain_importer")
        conn.execute("DROP ROLE IF EXISTS someone_else")
        conn.execute("CREATE ROLE plain_importer LOGIN")
        conn.execute("CREATE ROLE someone_else")
        conn.execute("GRANT CREATE ON SCHEMA public TO plain_importer")
        conn.execute("GRANT CREATE ON DATABASE " + conn.info.dbname + " TO plain_importer")
    as_plain = db + " user=plain_importer"
    with pytest.raises(DatabaseError, match="may not SET ROLE someone_else"):
        run_import(as_plain, ImportRequest(str(tmp_path), owner="someone_else"))
    with pytest.raises(DatabaseError, match="no such role: ghost"):
        run_import(as_plain, ImportRequest(str(tmp_path), grants=(("ghost", ("SELECT",)),)))
    with pytest.raises(UsageError, match="PUBLIC"):
        ImportRequest(str(tmp_path), grants=(("public", ("SELECT",)),))
    # the plain role imports as itself, and grants as the owner it is
    r = run_import(as_plain, ImportRequest(str(tmp_path), grants=(("someone_else", ("SELECT",)),)))
    assert r.files == 1
    assert los(db)


def test_a_file_changing_while_read_is_read_again_or_skipped(
    tmp_path: Path, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg17)
    (tmp_path / "grows-once").write_bytes(b"x" * 100)
    (tmp_path / "grows-always").write_bytes(b"y" * 100)
    (tmp_path / "big-grows-once").write_bytes(os.urandom(3 << 20))
    (tmp_path / "steady").write_bytes(b"z")
    seen: dict[str, int] = {}

    def change(key: str) -> None:  # a real append, after the bytes were read
        seen[key] = seen.get(key, 0) + 1
        if key == "grows-always" or (key.endswith("grows-once") and seen[key] == 1):
            with open(tmp_path / key, "ab") as f:
                f.write(b"+")

    r = run_import(db, ImportRequest(str(tmp_path)), after_read=change)
    assert r.skipped == [("grows-always", "changed while it was read (twice)")]
    assert r.files == 3 and r.retried == 3
    got = los(db)
    paths = journal(db)
    assert got[paths["grows-once"]] == b"x" * 100 + b"+"
    assert got[paths["big-grows-once"]] == (tmp_path / "big-grows-once").read_bytes()
    assert len(got) == 3


def test_s3_prefix(s3_url: str, pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    place = open_place(s3_url, create=True)
    data = {"a/1": b"one", "a/2": os.urandom(2 << 20), "b": b""}
    with place, place.putter() as p:
        for k, v in data.items():
            p.put(k, [(0, v)], len(v))
    r = run_import(db, ImportRequest(s3_url, jobs=2))
    assert r.files == 3
    got = los(db)
    assert {k: got[o] for k, o in journal(db).items()} == data


def test_cli_json_and_one_line_errors(tmp_path: Path, pg17: EmbeddedCluster,
                                      new_db: NewDb) -> None:  # fmt: skip
    db = new_db(pg17)
    (tmp_path / "f").write_bytes(b"file")
    result = run("import", str(tmp_path), "-d", db, "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["files"] == 1 and out["bytes"] == 4 and out["skipped"] == []
    assert out["oids"][0] == out["oids"][1]
    assert_one_line_error(run("import", str(tmp_path), "-d", db, "--table", "t"), 2,
                          "go together")  # fmt: skip
    assert_one_line_error(run("import", str(tmp_path / "nope"), "-d", db), 8, "nope")
    assert_one_line_error(run("import", str(tmp_path), "-d", db, "--resume"), 2,
                          "nothing to resume")  # fmt: skip


def test_the_listing_gives_back_what_it_was_given_across_blocks() -> None:
    from pgblobdump.files.importing.deal import Listing
    from pgblobdump.files.objects import Entry

    entries = [
        Entry(f"d{i % 7}/ñame \udcff {i:06}" + "x" * (i % 90), i * 3, 10**18 + i,
              None if i % 3 else f"etag-{i}")
        for i in range(40_000)
    ]  # fmt: skip
    listing = Listing()
    for e in entries:
        listing.add(e)
    assert listing.count == len(entries)
    assert list(listing) == entries  # over 4 MiB: from the file, in 1 MiB blocks
    listing.close()


def test_a_file_opened_out_of_the_root_through_a_swapped_directory_is_refused(
    tmp_path: Path,
) -> None:
    """--follow-symlinks: the path is checked, then opened; a directory swapped for a
    link in between would be read out of the root. The opened file's own path (as the
    kernel has it) is checked again."""
    root, out = tmp_path / "in", tmp_path / "out"
    (root / "sub").mkdir(parents=True)
    out.mkdir()
    (root / "sub" / "f").write_bytes(b"inside")
    (out / "f").write_bytes(b"secret")
    os.symlink(out, root / "via")
    real = root.resolve()
    fd = os.open(root / "via" / "f", os.O_RDONLY)  # reached through a linked directory
    try:
        with pytest.raises(FileError, match="leads out of"):
            check_inside(fd, real, "via/f")
    finally:
        os.close(fd)
    fd = os.open(root / "sub" / "f", os.O_RDONLY)
    try:
        check_inside(fd, real, "sub/f")
    finally:
        os.close(fd)

    class Swapped(Followed):
        """Checks the path, then (the race, made certain) swaps ``sub`` for a link."""

        def _path(self, key: str) -> Path | None:
            p = super()._path(key)
            os.rename(root / "sub", tmp_path / "moved")
            os.symlink(out, root / "sub")
            return p

    with open_place(str(root)) as place:
        followed = Swapped(place, root)
        with pytest.raises(FileError, match="leads out of"), followed.open("sub/f") as f:
            f.read()


def test_a_directory_changed_into_a_link_after_the_walk_is_skipped_not_fatal(
    tmp_path: Path, pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """Once a/1 is read (the walk done), directory b becomes a link, c's big file's
    directory too, and d a file: their files are skipped and said, the run goes on."""
    db = new_db(pg17)
    root = tmp_path / "in"
    big = os.urandom(3 << 20)
    for key, data in {"a/1": b"one", "b/2": b"two", "c/big": big, "d/4": b"four"}.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)

    def swap(key: str) -> None:
        if key == "a/1":
            for name in ("b", "c", "d"):
                os.rename(root / name, tmp_path / name)
            os.symlink(tmp_path / "b", root / "b")
            os.symlink(tmp_path / "c", root / "c")
            (root / "d").write_bytes(b"a file now")

    r = run_import(db, ImportRequest(str(root)), after_read=swap)
    assert r.files == 1 and sorted(los(db).values()) == [b"one"]
    skipped = dict(r.skipped)
    assert set(skipped) == {"b/2", "c/big", "d/4"}, skipped
    assert all("changed into a link" in why for why in skipped.values())
