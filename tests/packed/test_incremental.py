"""Incremental dumps (``dump --since``), chains (restore, verify, ls, cat) and ``merge``,
against a real server: every kind of change, each snapshot of a chain restored exactly,
and each bad input refused in one line with nothing written."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

from pgblobdump.cli import cli
from pgblobdump.errors import UnsupportedArchive
from pgblobdump.packed.format import spec as fmt
from pgblobdump.packed.read import source
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb
from tests.losets import fill, roles, state

BIG = 1_500_000


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _ok(*args: str) -> dict[str, object]:
    r = _cli(*args, "--json", "-q")
    assert r.exit_code == 0, r.output
    out: dict[str, object] = json.loads(r.stdout)
    return out


def _fails(code: int, *args: str) -> str:
    r = _cli(*args)
    assert r.exit_code == code, r.output
    return r.output


def _sql(db: str, *statements: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for s in statements:
            conn.execute(s)


def _count(db: str) -> int:
    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        assert row is not None
        return int(row[0])


def _records(path: Path) -> list[tuple[object, ...]]:
    """(oid, size, checksum, owner, acl, comment) of every LO an archive's index lists."""
    a = source.directory(str(path))
    return [(r.oid, r.size, r.checksum, *a.index.meta(r.meta)) for r in a.index]


def _source(pg17: EmbeddedCluster, new_db: NewDb) -> str:
    roles(pg17)
    src = new_db(pg17)
    fill(src, {
        20_000: (0, 0, 0, False), 20_001: (100, 1, 1, True), 20_002: (3000, 2, 2, False),
        20_003: (BIG, 0, 0, True), 20_004: (10, 0, 0, False), 20_005: (10, 1, 0, True),
        20_006: (10, 0, 1, False), 20_007: (10, 0, 0, True), 20_008: (2048, 0, 0, False),
        20_009: (10, 0, 0, False), 2**31 + 5: (50, 0, 0, False), 2**32 - 2: (0, 2, 0, False),
    })  # fmt: skip
    for oid in range(30_000, 30_200):  # untouched ones, in bulk
        _sql(src, f"SELECT lo_from_bytea({oid}, convert_to(repeat('x{oid}', 40), 'UTF8'))")
    _sql(src, "SELECT lo_put(20009, 1000000, 'far away')")  # a sparse LO
    return src


def _first_changes(src: str) -> None:
    """Every kind of change sync handles."""
    _sql(
        src,
        "SELECT lo_put(20001, 10, 'in place')",
        f"SELECT lo_put(20003, {BIG}, 'appended')",  # a large LO grows
        "SELECT lo_truncate(lo_open(20002, 131072), 5)",
        "SELECT lo_unlink(20004)",
        "SELECT lo_from_bytea(20_100, 'a new one')",
        "SELECT lo_unlink(20005)",
        "SELECT lo_from_bytea(20005, 'same oid, other bytes')",  # recreated
        "ALTER LARGE OBJECT 20006 OWNER TO pgbd_t_granter",
        "GRANT SELECT ON LARGE OBJECT 20000 TO pgbd_t_reader",
        "REVOKE ALL ON LARGE OBJECT 20006 FROM pgbd_t_reader",
        "COMMENT ON LARGE OBJECT 20008 IS 'added'",
        "COMMENT ON LARGE OBJECT 20001 IS 'changed'",
        "COMMENT ON LARGE OBJECT 20007 IS NULL",  # removed: leaves no tuple
        "SELECT lo_truncate(lo_open(30000, 131072), 0)",
    )
    # a write in a savepoint (a subtransaction's xid)
    with psycopg.connect(src) as conn, conn.transaction():
        conn.execute("SAVEPOINT s")
        conn.execute("SELECT lo_put(30001, 0, 'savepoint')")
        conn.execute("RELEASE SAVEPOINT s")


def _chain_of_two(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path,
                  every_kind: bool = True) -> tuple[str, Path, Path]:  # fmt: skip
    """A source, its standalone dump and an incremental after ``_first_changes`` (or one
    write): (source, full, inc1)."""
    src = _source(pg17, new_db)
    full, inc1 = tmp_path / "full", tmp_path / "inc1"
    _ok("dump", "-d", src, "-o", str(full))
    if every_kind:
        _first_changes(src)
    else:
        _sql(src, "SELECT lo_put(30003, 0, 'changed')")
    _ok("dump", "-d", src, "-o", str(inc1), "--since", str(full))
    return src, full, inc1


def test_a_chain_restores_each_snapshot_and_merges(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src = _source(pg17, new_db)
    owner = f"pgbd_inc_{uuid.uuid4().hex[:8]}"
    _sql(src, f"CREATE ROLE {owner}", f"ALTER LARGE OBJECT 30002 OWNER TO {owner}")
    full, inc1, inc2, inc3 = (tmp_path / n for n in ("full", "inc1", "inc2", "inc3"))
    _ok("dump", "-d", src, "-o", str(full))
    states = [state(src)]

    _first_changes(src)
    got = _ok("dump", "-d", src, "-o", str(inc1), "--since", str(full))
    states.append(state(src))
    # bytes: 20001 20002 20003 20005 (recreated) 30000 30001, and 20000 (a GRANT, but it
    # has no page to tell its bytes are old: empty, dumped again for nothing); 20100 new.
    # 20006 (owner, REVOKE) and 20008 (a comment): their pages are all older than the
    # base, so only their metadata is new; 20007's comment removal leaves no tuple at all:
    # all three carried, their metadata read now
    assert (got["new"], got["changed"], got["gone"]) == (1, 7, 1)
    assert got["metadata_only"] == 2
    assert got["los_at_snapshot"] == len(states[1])
    for path, want in ((full, states[0]), (inc1, states[1])):  # before the role's rename
        dst = new_db(pg17)
        assert _ok("restore", str(path), "-d", dst)["los"] == len(want)
        assert state(dst) == want, path

    _sql(src, f"ALTER ROLE {owner} RENAME TO {owner}_b",  # no LO tuple changes
         "SELECT lo_put(30003, 0, 'second round')", "SELECT lo_unlink(20_100)",
         "SELECT lo_put(20003, 0, 'large again')")  # fmt: skip
    got = _ok("dump", "-d", src, "-o", str(inc2), "--since", str(inc1), "--jobs", "2")
    assert (got["new"], got["changed"], got["gone"]) == (0, 2, 1)
    states.append(state(src))
    assert states[2][30002][1] == f"{owner}_b"

    got = _ok("dump", "-d", src, "-o", str(inc3), "--since", str(inc2))  # nothing changed
    assert (got["new"], got["changed"], got["gone"], got["los"]) == (0, 0, 0, 0)
    assert got["chain_length"] == 4

    manifests = [json.loads((p / "manifest.json").read_text()) for p in (full, inc2)]
    assert [m["version"] for m in manifests] == [2, 3]
    assert manifests[1]["incremental"]["chain"][0]["where"] == str(full)

    for path, want in ((inc2, states[2]), (inc3, states[2])):
        dst = new_db(pg17)
        done = _ok("restore", str(path), "-d", dst)
        assert done["los"] == len(want)
        assert state(dst) == want, path
    dst = new_db(pg17)
    _ok("restore", str(inc2), "-d", dst, "--jobs", "2")
    assert state(dst) == states[2]
    dst = new_db(pg17)
    for k in (1, 2):
        _ok("restore", str(inc2), "-d", dst, "--part", f"{k}/2")
    assert state(dst) == states[2]

    assert _ok("verify", str(inc3))["bases_checked"] == 3
    assert _cli("verify", str(inc3), "-d", src).exit_code == 0
    listed = {r["oid"]: r["archive"] for r in json.loads(_cli("ls", str(inc2), "--json").stdout)}
    assert listed[30003] == str(inc2) and listed[20001] == str(inc1)
    assert listed[30100] == str(full)
    assert _cli("cat", str(inc3), "30100").stdout_bytes == states[2][30100][0]
    assert _cli("cat", str(inc3), "20003").stdout_bytes == states[2][20003][0]

    merged, fresh = tmp_path / "merged", tmp_path / "fresh"
    _ok("merge", str(inc3), "-o", str(merged))
    _ok("dump", "-d", src, "-o", str(fresh))  # the same snapshot: nothing changed since
    assert _records(merged) == _records(fresh)
    _ok("merge", str(inc3), "-o", str(tmp_path / "merged2"), "--jobs", "2")
    assert _records(tmp_path / "merged2") == _records(fresh)
    assert _ok("verify", str(merged))["los"] == len(states[2])
    assert json.loads((merged / "manifest.json").read_text())["version"] == 2
    dst = new_db(pg17)
    _ok("restore", str(merged), "-d", dst)
    assert state(dst) == states[2]
    # the merged archive is a base: a chain of one again
    _sql(src, "SELECT lo_put(30004, 0, 'after the merge')")
    again = _ok("dump", "-d", src, "-o", str(tmp_path / "inc4"), "--since", str(merged))
    assert (again["changed"], again["chain_length"]) == (1, 2)


def test_bad_bases_are_refused_before_anything_is_written(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src, full, inc1 = _chain_of_two(pg17, new_db, tmp_path)
    inc2 = tmp_path / "inc2"
    _sql(src, "SELECT lo_put(30003, 0, 'second round')")
    _ok("dump", "-d", src, "-o", str(inc2), "--since", str(inc1))

    # another database of the same cluster
    other = new_db(pg17)
    fill(other, {20_000: (10, 0, 0, False)})
    out = _fails(2, "dump", "-d", other, "-o", str(tmp_path / "x"), "--since", str(full))
    assert "was dumped from database" in out and "this is database" in out
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").iterdir())
    # --since writes a directory; --base is only for incremental archives
    assert "--since writes a directory" in _fails(2, "dump", "-d", src, "-o", "-", "--since",
                                                  str(full))  # fmt: skip
    assert "--base goes with" in _fails(2, "restore", str(full), "-d", other, "--base", str(inc1))
    assert "merge its chain" in _fails(2, "unpack", str(inc1), "-o", str(tmp_path / "u"))

    # PREV without its manifest (an interrupted dump), with a damaged index, or no mark
    broken = tmp_path / "broken"
    shutil.copytree(full, broken)
    (broken / "manifest.json").unlink()
    assert "interrupted dump" in _fails(7, "dump", "-d", src, "-o", str(tmp_path / "y"),
                                        "--since", str(broken))  # fmt: skip
    shutil.rmtree(broken)
    shutil.copytree(full, broken)
    index = bytearray((broken / "index.pbi").read_bytes())
    index[5] ^= 0xFF
    (broken / "index.pbi").write_bytes(bytes(index))
    assert "damaged" in _fails(7, "dump", "-d", src, "-o", str(tmp_path / "z"), "--since",
                               str(broken))  # fmt: skip
    shutil.rmtree(broken)
    shutil.copytree(full, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    del manifest["source"]["mark"]
    (broken / "manifest.json").write_text(json.dumps(manifest))
    assert "records no snapshot" in _fails(2, "dump", "-d", src, "-o", str(tmp_path / "w"),
                                           "--since", str(broken))  # fmt: skip

    # a chain with a gap: inc1 moved away; named, then given with --base
    moved = tmp_path / "moved"
    inc1.rename(moved)
    dst = new_db(pg17)
    out = _fails(8, "restore", str(inc2), "-d", dst)
    assert "base 2 of 2" in out and str(inc1) in out and "--base" in out
    assert _count(dst) == 0
    assert _fails(8, "verify", str(inc2)).count("missing") == 1
    _ok("restore", str(inc2), "-d", dst, "--base", str(moved))
    assert state(dst) == state(src)
    assert _cli("verify", str(inc2), "--base", str(moved)).exit_code == 0
    assert "not a base" in _fails(2, "restore", str(inc2), "-d", dst, "--base", str(broken))

    # a base altered after the incremental was made: its manifest checksum
    (full / "manifest.json").write_text((full / "manifest.json").read_text() + " ")
    dst = new_db(pg17)
    out = _fails(7, "restore", str(inc2), "-d", dst, "--base", str(moved))
    assert "base 1 of 2" in out and "not the one the chain names" in out
    assert _count(dst) == 0


def test_an_incremental_into_a_database_holding_its_base(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src, full, inc1 = _chain_of_two(pg17, new_db, tmp_path)
    dst = new_db(pg17)
    _ok("restore", str(full), "-d", dst)
    before = state(dst)
    out = _fails(4, "restore", str(inc1), "-d", dst)
    assert "already exists" in out
    assert state(dst) == before  # refused before anything was written
    done = _ok("restore", str(inc1), "-d", dst, "--on-conflict", "skip")
    assert done["los"] == 1  # 20100, the one new LO; the others are kept as they are
    assert done["skipped"] == len(state(src)) - 1


def test_since_with_full_and_an_interrupted_incremental(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _source(pg17, new_db)
    _sql(src, "CREATE TABLE docs (id int PRIMARY KEY, body oid)",
         "INSERT INTO docs VALUES (1, 20001), (2, 20003)")  # fmt: skip
    full, inc1 = tmp_path / "full", tmp_path / "inc1"
    _ok("dump", "-d", src, "-o", str(full), "--full")
    _first_changes(src)
    _sql(src, "INSERT INTO docs VALUES (3, 20100)")
    # --since with --full: the LOs incremental, the rest of the database whole
    _ok("dump", "-d", src, "-o", str(inc1), "--since", str(full), "--full")
    dst = new_db(pg17)
    _ok("restore", str(inc1), "-d", dst, "--full")
    assert state(dst) == state(src)
    with psycopg.connect(dst) as conn:
        assert conn.execute("SELECT count(*) FROM docs").fetchone() == (3,)
    merged = tmp_path / "merged"
    _ok("merge", str(inc1), "-o", str(merged))
    assert (merged / "database.dump").read_bytes() == (inc1 / "database.dump").read_bytes()

    # a failure in the middle of packing leaves no archive under the name
    from pgblobdump.packed.write import packer

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(packer.LoPacker, "add_run", broken)
    _sql(src, "SELECT lo_put(30005, 0, 'one more')")
    out = tmp_path / "inc2"
    r = _cli("dump", "-d", src, "-o", str(out), "--since", str(inc1))
    assert r.exit_code == 10, r.output
    assert not out.exists() or not [p for p in out.iterdir() if not p.name.startswith(".")]


def test_old_readers_refuse_an_incremental_and_read_a_full_one(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _src, full, inc1 = _chain_of_two(pg17, new_db, tmp_path, every_kind=False)
    monkeypatch.setattr(fmt, "READABLE_VERSIONS", (1, 2))  # a pgblobdump before version 3
    monkeypatch.setattr(fmt, "FORMAT_VERSION", 2)
    assert source.directory(str(full)).manifest is not None
    with pytest.raises(UnsupportedArchive, match="format version 3, written by a newer"):
        source.directory(str(inc1))


COMPAT = "pgbd_t_compat_reader"
"""A role that may read every LO (``lo_compat_privileges``) but not pg_largeobject."""


def test_without_transaction_ids_every_lo_is_compared_by_checksum(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """A role that may not read pg_largeobject's transaction ids: the incremental reads
    every LO the base holds and keeps only those whose checksum differs (an LO over
    1 MiB hashed as it comes, read again when it differs)."""
    src = _source(pg17, new_db)
    _sql(src, f"SELECT lo_from_bytea(20_050, convert_to(repeat('y', {BIG}), 'UTF8'))")
    with psycopg.connect(src, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (COMPAT,)).fetchone():
            conn.execute(f"CREATE ROLE {COMPAT} LOGIN")
            conn.execute(f"ALTER ROLE {COMPAT} SET lo_compat_privileges = on")
    as_compat = f"{src} user={COMPAT}"
    full, inc1, inc2 = tmp_path / "full", tmp_path / "inc1", tmp_path / "inc2"
    _ok("dump", "-d", as_compat, "-o", str(full))
    _first_changes(src)
    r = _cli(
        "dump", "-d", as_compat, "-o", str(inc1), "--since", str(full), "--json", "--jobs", "2"
    )
    assert r.exit_code == 0, r.output
    assert "compared by checksum" in r.stderr and "pg_largeobject" in r.stderr
    got = json.loads(r.stdout)
    # the LOs whose bytes changed: 20001 20002 20003 20005 30000 30001; 20000, 20006 and
    # 20008 (a GRANT, an owner, a comment) keep their bytes: carried, with their new metadata
    assert (got["new"], got["changed"], got["gone"]) == (1, 6, 1)
    manifest = json.loads((inc1 / "manifest.json").read_text())
    assert manifest["incremental"]["detection"].startswith("checksums (")
    dst = new_db(pg17)
    _ok("restore", str(inc1), "-d", dst)
    assert state(dst) == state(src)
    _sql(src, "SELECT lo_put(20_050, 5, 'x')")  # the large LO differs now
    got = _ok("dump", "-d", as_compat, "-o", str(inc2), "--since", str(inc1))
    assert (got["new"], got["changed"], got["gone"]) == (0, 1, 0)
    dst = new_db(pg17)
    _ok("restore", str(inc2), "-d", dst, "--jobs", "2")
    assert state(dst) == state(src)


def test_another_history_is_compared_by_checksum(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """A database created again from its template under the same OID: its LO tuples are
    the template's, older than the base's mark, so transaction ids would call a changed
    LO unchanged; the database's own row tells, and every LO is compared instead."""
    roles(pg17)
    template, db = f"tmpl_{uuid.uuid4().hex[:6]}", f"app_{uuid.uuid4().hex[:6]}"
    admin = pg17.conninfo()
    _sql(admin, f"CREATE DATABASE {template}")
    _sql(pg17.conninfo(template), "SELECT lo_from_bytea(17000, 'template')",
         "SELECT lo_from_bytea(17001, 'other')")  # fmt: skip
    try:
        _sql(admin, f"CREATE DATABASE {db} TEMPLATE {template}")
        with psycopg.connect(admin) as conn:
            row = conn.execute("SELECT oid FROM pg_database WHERE datname = %s", (db,)).fetchone()
        assert row is not None
        _sql(pg17.conninfo(db), "SELECT lo_put(17000, 0, 'MODIFIED')")
        prev, new = tmp_path / "prev", tmp_path / "new"
        _ok("dump", "-d", pg17.conninfo(db), "-o", str(prev))
        _sql(admin, f"DROP DATABASE {db} WITH (FORCE)",
             f"CREATE DATABASE {db} TEMPLATE {template} OID = {row[0]}")  # fmt: skip
        r = _cli("dump", "-d", pg17.conninfo(db), "-o", str(new), "--since", str(prev), "--json")
        assert r.exit_code == 0, r.output
        assert "created again or altered" in r.stderr
        assert json.loads(r.stdout)["changed"] == 1  # 17000: 'template' again
        assert _cli("cat", str(new), "17000").stdout_bytes == b"template"
        assert _cli("verify", str(new), "-d", pg17.conninfo(db)).exit_code == 0
    finally:
        _sql(admin, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)",
             f"DROP DATABASE IF EXISTS {template} WITH (FORCE)")  # fmt: skip


def test_marks_of_another_timeline_or_an_earlier_wal_position_are_not_trusted(
    pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """A failover or a point-in-time recovery (another timeline) and a restored copy
    (the WAL position went back) reuse transaction ids for other writes."""
    import dataclasses

    from pgblobdump.pg import changes

    src = new_db(pg17)
    with psycopg.connect(src) as conn:
        now = changes.mark(conn)
        assert now.timeline is not None and now.lsn is not None
        assert changes.unusable(conn, now, now, "PREV") is None
        other = dataclasses.replace(now, timeline=now.timeline + 1)
        assert "timeline changed" in (changes.unusable(conn, other, now, "PREV") or "")
        ahead = dataclasses.replace(now, lsn=now.lsn + (1 << 20))
        assert "went back" in (changes.unusable(conn, ahead, now, "PREV") or "")
    assert changes.Mark.from_json(now.to_json()) == now
    old = json.dumps([now.cluster, now.database, now.xmin, now.xmax, []])  # before timelines
    assert changes.Mark.from_json(old).timeline is None


def test_cat_checks_the_bytes_and_writes_over_no_file_of_the_chain(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src = new_db(pg17)
    _sql(src, "SELECT lo_from_bytea(10001, 'original-10001')",
         "SELECT lo_from_bytea(12000, 'twelve')")  # fmt: skip
    full, inc, other = tmp_path / "full", tmp_path / "inc", tmp_path / "other"
    _ok("dump", "-d", src, "-o", str(full), "--level", "0")
    _sql(src, "SELECT lo_put(12000, 0, 'TWELVE')")
    _ok("dump", "-d", src, "-o", str(inc), "--since", str(full))
    out = _fails(2, "cat", str(inc), "12000", "-o", str(full / "data-1-000001.pbd"))
    assert "would overwrite the input" in out
    # a base's volume swapped for one of the same size holding other bytes
    _sql(src, "SELECT lo_put(10001, 0, 'TAMPERED-10001')")
    _ok("dump", "-d", src, "-o", str(other), "--level", "0")
    volume = "data-1-000001.pbd"
    assert (other / volume).stat().st_size == (full / volume).stat().st_size
    shutil.copy(other / volume, full / volume)
    r = _cli("cat", str(inc), "10001")
    assert r.exit_code == 7 and b"TAMPERED" not in r.stdout_bytes, r.output
    assert "not the one the index names" in r.stderr


def test_an_incremental_is_not_read_as_a_whole_archive_and_prev_chain_is_checked(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    from pgblobdump.errors import CorruptArchive, UsageError
    from pgblobdump.packed.read.source import open_source

    src, full, inc1 = _chain_of_two(pg17, new_db, tmp_path, every_kind=False)
    with pytest.raises(UsageError, match="incremental archive"), open_source(str(inc1)) as s:
        list(s.items)
    # PREV whose own base changed: refused at dump time, not at a later restore
    (full / "manifest.json").write_text((full / "manifest.json").read_text() + " ")
    out = _fails(7, "dump", "-d", src, "-o", str(tmp_path / "inc2"), "--since", str(inc1))
    assert "not the one the chain names" in out
    with pytest.raises(CorruptArchive):
        from pgblobdump.packed.chain.archives import Chain

        Chain.open(str(inc1))
