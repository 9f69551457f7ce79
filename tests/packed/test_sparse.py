"""Sparse LOs stay sparse (issue 27): an LO's holes (pages never written) are not stored,
and restore leaves them missing, so each LO has as many pages in pg_largeobject after
restore as at the source, the same length and the same bytes; ``cat``, ``verify -d``,
pack and unpack of pg_dump archives agree byte for byte."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import xxhash
from click.testing import CliRunner

from pgblobdump.cli import cli
from pgblobdump.errors import ToolchainError
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.pg.lo import Batch
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from tests.clirun import run
from tests.conftest import NewDb

OWNER = "pgbd_sparse_owner"
RANDOM = os.urandom(6000)
LARGE = os.urandom(1_500_000)
SPARSE = {
    # a hole at the start: 300,000 bytes of pages never written, then 10 bytes
    61001: ["SELECT lo_create(61001)", "SELECT lo_put(61001, 300000, 'start hole')"],
    # a hole in the middle
    61002: ["SELECT lo_from_bytea(61002, %(random)s)", "SELECT lo_put(61002, 400000, 'mid')"],
    # a hole at the end: lo_truncate past the last page (the server writes the page the
    # length ends in, zeros up to it)
    61003: [
        "SELECT lo_from_bytea(61003, 'data, then a truncate')",
        "SELECT lo_truncate(lo_open(61003, 131072), 500000)",
    ],
    # all hole, the length inside a page, and on a page boundary
    61004: ["SELECT lo_create(61004)", "SELECT lo_truncate(lo_open(61004, 131072), 3000001)"],
    61005: ["SELECT lo_create(61005)", "SELECT lo_truncate64(lo_open(61005, 131072), 409600)"],
    # a large LO (pieces over several frames) with a hole between and after its bytes
    61006: [
        "SELECT lo_from_bytea(61006, %(large)s)",
        "SELECT lo_put(61006, 5 << 20, %(random)s)",
        "SELECT lo_truncate64(lo_open(61006, 131072), (9 << 20) + 5)",
    ],
    # no hole
    61007: ["SELECT lo_from_bytea(61007, %(random)s)"],
    61008: ["SELECT lo_create(61008)"],
}
ZEROS_WRITTEN = 61009
"""A hundred pages of zeros written on purpose, then a byte: they read the same, and come
back as a hole (fewer pages than the source)."""
SMALL_HOLE = 61010
"""A hole of 16 pages in an LO under 1 MiB: left out too (packer.SMALL_HOLE_PAGES 1; it
was kept as zeros while such an LO was restored in a transaction of its own), so the
source's 4 pages after restore, not 21."""


def build(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (OWNER,)).fetchone():
            conn.execute(f"CREATE ROLE {OWNER} LOGIN")
        conn.execute(f"SET ROLE {OWNER}")
        for steps in SPARSE.values():
            with conn.transaction():  # lo_open's descriptor lives in its transaction
                for step in steps:
                    conn.execute(step, {"random": RANDOM, "large": LARGE})
        conn.execute("SELECT lo_from_bytea(%s, %s)", (ZEROS_WRITTEN, bytes(204800) + b"x"))
        conn.execute("SELECT lo_from_bytea(%s, %s)", (SMALL_HOLE, RANDOM))
        conn.execute("SELECT lo_put(%s, 40960, 'x')", (SMALL_HOLE,))


def pages(db: str) -> dict[int, int]:
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT loid::int8, count(*) FROM pg_largeobject GROUP BY 1").fetchall()
    return dict(rows)


def contents(db: str) -> dict[int, tuple[int, str]]:
    """Every LO's length (from lo_lseek64 to its end, not from the bytes) and md5."""
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT oid::int8, lo_lseek64(lo_open(oid, 262144), 0, 2), md5(lo_get(oid))"
            " FROM pg_largeobject_metadata"
        ).fetchall()
    return {o: (n, h) for o, n, h in rows}


@pytest.fixture(scope="module")
def source(pg17: EmbeddedCluster) -> str:
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS sparse_src WITH (FORCE)")
        conn.execute("CREATE DATABASE sparse_src")
    db = pg17.conninfo("sparse_src")
    build(db)
    want = pages(db)
    assert want[61001] == want[61004] == want[61005] == 1  # the server's own sparseness
    assert want[61006] == 733 + 3 + 1 and 61008 not in want
    return db


def _check_restored(src: str, dst: str) -> None:
    have, want = pages(dst), pages(src)
    assert {o: have.get(o) for o in SPARSE} == {o: want.get(o) for o in SPARSE}
    assert have[ZEROS_WRITTEN] == 1 < want[ZEROS_WRITTEN]
    assert have[SMALL_HOLE] == want[SMALL_HOLE] == 4
    assert contents(dst) == contents(src)
    with psycopg.connect(src) as a, psycopg.connect(dst) as b:
        for oid, at, n in [(61001, 299_990, 30), (61002, 5990, 3000), (61003, 499_000, 5000),
                           (61004, 2_999_000, 10), (61006, 1_499_000, 4 << 20)]:  # fmt: skip
            q = "SELECT lo_get(%s, %s, %s)"
            assert b.execute(q, (oid, at, n)).fetchone() == a.execute(q, (oid, at, n)).fetchone()


@pytest.mark.parametrize("how", ["directory", "stream", "jobs 2", "lo_get"])
def test_dump_and_restore_keep_holes(
    source: str, pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, how: str
) -> None:
    """Whichever way the LOs are read (pg_largeobject's pages as a superuser, lo_get as
    their owner) and restored (a directory, a stream, two connections)."""
    dsn = source.replace("user=postgres", f"user={OWNER}") if how == "lo_get" else source
    dst = new_db(pg17)
    if how == "stream":
        dumped = CliRunner().invoke(cli, ["dump", "-d", dsn, "-o", "-"])
        assert dumped.exit_code == 0, dumped.stderr
        assert len(dumped.stdout_bytes) < 2 << 20
        done = CliRunner().invoke(cli, ["restore", "-", "-d", dst], input=dumped.stdout_bytes)
        assert done.exit_code == 0, done.output
        _check_restored(source, dst)
        return
    archive = tmp_path / "a.pbd"
    result = run("dump", "-d", dsn, "-o", str(archive))
    assert result.exit_code == 0, result.output
    assert sum(f.stat().st_size for f in archive.iterdir()) < 2 << 20  # 12 MB of LOs
    jobs = ["--jobs", "2"] if how == "jobs 2" else []
    result = run("restore", str(archive), "-d", dst, *jobs)
    assert result.exit_code == 0, result.output
    _check_restored(source, dst)
    result = run("verify", str(archive), "-d", source)
    assert result.exit_code == 0, result.output
    with psycopg.connect(source) as conn:
        for oid in (61001, 61003, 61004, 61006, ZEROS_WRITTEN):
            out = tmp_path / f"{oid}.lo"
            assert run("cat", str(archive), str(oid), "-o", str(out)).exit_code == 0
            row = conn.execute("SELECT lo_get(%s)", (oid,)).fetchone()
            assert row is not None and out.read_bytes() == bytes(row[0])


def _pg(major: int, tool: str) -> Path:
    try:
        return toolchain.find(major, (tool,)).tool(tool)
    except ToolchainError as e:
        pytest.skip(f"{tool} {major} is not installed: {e}")


def test_pack_and_unpack_of_pg_dump_archives_keep_holes(
    source: str, pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """pg_dump stores a hole as zeros; pack leaves them out, restore leaves the pages
    missing, and unpack gives pg_restore the zeros back."""
    dumped = tmp_path / "d"
    subprocess.run([str(_pg(17, "pg_dump")), "-Fd", "-f", str(dumped), "-d", source],
                   check=True, capture_output=True)  # fmt: skip
    packed = tmp_path / "p.pbd"
    result = run("pack", str(dumped), "-o", str(packed))
    assert result.exit_code == 0, result.output
    assert (packed / "data-1-000001.pbd").stat().st_size < 2 << 20
    assert run("verify", str(packed), "-d", source).exit_code == 0
    dst = new_db(pg17)
    result = run("restore", str(packed), "-d", dst)
    assert result.exit_code == 0, result.output
    _check_restored(source, dst)
    out = tmp_path / "61006.lo"
    assert run("cat", str(packed), "61006", "-o", str(out)).exit_code == 0
    assert hashlib.md5(out.read_bytes()).hexdigest() == contents(source)[61006][1]
    back = tmp_path / "back"
    result = run("unpack", str(packed), "-o", str(back))
    assert result.exit_code == 0, result.output
    again = new_db(pg17)
    done = subprocess.run([str(_pg(17, "pg_restore")), "-d", again, str(back)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert contents(again) == contents(source)  # pg_restore writes the zeros: more pages


def test_a_gigabyte_hole_stays_a_hole(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    """13 bytes written at offset 10^9: one page at the source, one after restore (not
    488,282), the same length and bytes; the archive a few hundred bytes."""
    src, dst = new_db(pg17), new_db(pg17)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("SELECT lo_create(62000)")
        conn.execute("SELECT lo_put(62000, 1000000000, 'thirteen byte')")
    archive = tmp_path / "a.pbd"
    assert run("dump", "-d", src, "-o", str(archive)).exit_code == 0
    assert (archive / "data-1-000001.pbd").stat().st_size < 1000
    result = run("restore", str(archive), "-d", dst)
    assert result.exit_code == 0, result.output
    assert pages(dst) == pages(src) == {62000: 1}
    with psycopg.connect(src) as a, psycopg.connect(dst) as b:
        for at, n in [(0, 4096), (999_999_000, 2000), (1_000_000_005, 100)]:
            q = "SELECT lo_get(62000, %s, %s), lo_lseek64(lo_open(62000, 262144), 0, 2)"
            assert b.execute(q, (at, n)).fetchone() == a.execute(q, (at, n)).fetchone()
    h = xxhash.xxh3_64()
    n = 0
    for piece in PackedDirectory(LocalDirectory(archive)).read_lo(62000):  # what cat writes
        h.update(piece)
        n += len(piece)
    want = xxhash.xxh3_64()
    for _ in range(1000):
        want.update(bytes(1_000_000))
    want.update(b"thirteen byte")
    assert (n, h.intdigest()) == (1_000_000_013, want.intdigest())
    assert run("verify", str(archive), "-d", src).exit_code == 0


def test_a_foreign_lo_is_kept_and_a_failed_restore_leaves_nothing(
    source: str, pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """``--on-conflict skip`` keeps a foreign LO where the archive has a sparse one; damage
    met after sparse LOs were written (the small ones in batches, 61006 in a transaction
    of its own) removes exactly them, the foreign LO stays."""
    archive = tmp_path / "a.pbd"
    assert run("dump", "-d", source, "-o", str(archive)).exit_code == 0
    dst = new_db(pg17)
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(61001, 'foreign')")
    result = run("restore", str(archive), "-d", dst, "--on-conflict", "skip")
    assert result.exit_code == 0, result.output
    have, want = pages(dst), pages(source)
    assert have[61001] == 1 and {o: have.get(o) for o in SPARSE if o != 61001} == {
        o: want.get(o) for o in SPARSE if o != 61001
    }
    with psycopg.connect(dst) as conn:
        assert conn.execute("SELECT lo_get(61001)").fetchone() == (b"foreign",)
    # cut the volume inside the large LO 61006's frames, after the small sparse LOs'
    volume = archive / "data-1-000001.pbd"
    data = volume.read_bytes()
    volume.write_bytes(data[: len(data) * 3 // 4])
    again = new_db(pg17)
    with psycopg.connect(again, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(70001, 'foreign')")
    result = run("restore", str(archive), "-d", again)
    assert result.exit_code == 7 and "truncated" in result.stderr, result.output
    assert pages(again) == {70001: 1}


# -- small LOs with holes in restore's batches ----------------------------------------------
def build_many(db: str, first: int, n: int, repeats: int) -> None:
    """``n`` small LOs with holes from OID ``first``, four kinds by OID modulo 4: a hole at
    the start, in the middle, at the end (lo_truncate64 past the last page), all hole;
    ``repeats`` x 16 bytes of md5 in each run of bytes (never a whole zero page)."""
    g = f"FROM generate_series({first}, {first + n - 1}) o WHERE o % 4"
    data = f"decode(repeat(md5(o::text), {repeats}), 'hex')"
    with psycopg.connect(db, autocommit=True) as conn, conn.transaction():
        conn.execute(f"SELECT count(lo_create(o)) {g} IN (0, 3)")
        conn.execute(f"SELECT count(lo_from_bytea(o, {data})) {g} IN (1, 2)")
        conn.execute(f"SELECT count(lo_put(o, 16 * {repeats} + 6144, {data})) {g} = 0")
        conn.execute(f"SELECT count(lo_put(o, 16 * {repeats} + 8192, 'tail')) {g} = 1")
        conn.execute(
            f"SELECT count(lo_truncate64(lo_open(o, 131072), 32 * {repeats} + 9000 + o % 7))"
            f" {g} IN (2, 3)"
        )


def metadata(db: str) -> list[tuple[object, ...]]:
    """Every LO's owner, ACL and comment."""
    with psycopg.connect(db) as conn:
        return conn.execute(
            "SELECT oid::int8, lomowner::regrole::text, lomacl::text,"
            " obj_description(oid, 'pg_largeobject') FROM pg_largeobject_metadata ORDER BY 1"
        ).fetchall()


def transactions(db: str) -> int:
    """How many transactions made the LOs there (their catalog rows' distinct xmin)."""
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT count(DISTINCT xmin::text) FROM pg_largeobject_metadata"
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.fixture(scope="module")
def many(pg17: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """1,000 small LOs with holes (about 3 MB of bytes, one batch), dumped."""
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS sparse_many WITH (FORCE)")
        conn.execute("CREATE DATABASE sparse_many")
    db = pg17.conninfo("sparse_many")
    build_many(db, 90_000, 1000, 128)
    with psycopg.connect(db, autocommit=True) as conn:  # metadata on LOs with holes
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (OWNER,)).fetchone():
            conn.execute(f"CREATE ROLE {OWNER} LOGIN")
        conn.execute("COMMENT ON LARGE OBJECT 90001 IS 'a hole in the middle'")
        conn.execute(f"ALTER LARGE OBJECT 90002 OWNER TO {OWNER}")
        conn.execute(f"ALTER LARGE OBJECT 90004 OWNER TO {OWNER}")
        conn.execute("GRANT SELECT ON LARGE OBJECT 90003, 90004 TO PUBLIC")
    archive = tmp_path_factory.mktemp("many") / "a.pbd"
    result = run("dump", "-d", db, "-o", str(archive))
    assert result.exit_code == 0, result.output
    return db, archive


@pytest.mark.parametrize("jobs", [1, 2])
def test_many_small_sparse_los_share_a_batch(
    many: tuple[str, Path], pg17: EmbeddedCluster, new_db: NewDb, jobs: int
) -> None:
    """Each LO with holes is not a transaction of its own: the 1,000 are written in one
    batch per connection, and each has the source's pages, length and bytes."""
    src, archive = many
    want = pages(src)
    assert len(want) == 1000 and sum(want.values()) < 1000 * 6  # holes at the source
    dst = new_db(pg17)
    result = run("restore", str(archive), "-d", dst, "--jobs", str(jobs), "--json")
    assert result.exit_code == 0, result.output
    assert pages(dst) == want
    assert contents(dst) == contents(src)
    assert transactions(dst) == jobs
    assert metadata(dst) == metadata(src)
    assert run("verify", str(archive), "-d", dst).exit_code == 0


def test_lo_descriptors_of_a_batch_close_at_commit(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """``truncate_many`` opens a descriptor per LO in a SELECT; they close with the
    transaction, without a warning, and the lengths and pages are the server's own."""
    db = new_db(pg17)
    notices: list[str] = []
    with psycopg.connect(db, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
        with conn.transaction():
            b = Batch(conn, 1000)
            b.create_many_empty(range(500, 600))
            b.put_many([500, 501], [4096, 0], [b"x", b"yz"])
            b.truncate_many(range(500, 600), [20_000 + o for o in range(500, 600)])
        row = conn.execute("SELECT lo_open(500, 262144)").fetchone()
        assert row == (0,)  # the first descriptor of a transaction with none open
    assert notices == []
    got = pages(db)
    assert got[500] == 2 and got[501] == 2 and got[502] == 1 and len(got) == 100
    with psycopg.connect(db) as conn:
        rows = conn.execute("SELECT lo_lseek64(lo_open(o, 262144), 0, 2) FROM"
                            " generate_series(500, 599) o").fetchall()  # fmt: skip
    assert [r[0] for r in rows] == [20_000 + o for o in range(500, 600)]


@pytest.fixture(scope="module")
def bigger(pg17: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """4,000 small LOs with holes, about 30 MB of bytes: several batches."""
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS sparse_bigger WITH (FORCE)")
        conn.execute("CREATE DATABASE sparse_bigger")
    db = pg17.conninfo("sparse_bigger")
    build_many(db, 100_000, 4000, 640)
    archive = tmp_path_factory.mktemp("bigger") / "a.pbd"
    result = run("dump", "-d", db, "-o", str(archive), "--level", "0")
    assert result.exit_code == 0, result.output
    return db, archive


def test_damage_after_sparse_los_in_a_batch_leaves_nothing(
    bigger: tuple[str, Path], pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """The archive cut after batches of LOs with holes were written and while the next
    was being gathered: exactly nothing of this run is left, a foreign LO stays."""
    _src, archive = bigger
    cut = tmp_path / "cut.pbd"
    shutil.copytree(archive, cut)
    volume = cut / "data-1-000001.pbd"
    data = volume.read_bytes()
    volume.write_bytes(data[: len(data) * 3 // 4])
    dst = new_db(pg17)
    with psycopg.connect(dst, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(70001, 'foreign')")
    result = run("restore", str(cut), "-d", dst)
    assert result.exit_code == 7 and "truncated" in result.stderr, result.output
    assert "removed the" in result.stderr, result.stderr
    assert pages(dst) == {70001: 1}


def test_killed_mid_batch_then_resume(
    bigger: tuple[str, Path], pg17: EmbeddedCluster, new_db: NewDb
) -> None:
    """kill -9 while batches of LOs with holes are written: what is there is whole LOs
    (a batch commits whole), and --resume completes the rest, pages and bytes equal."""
    src, archive = bigger
    dst = new_db(pg17)
    argv = [sys.executable, "-m", "pgblobdump", "restore", str(archive), "-d", dst]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        deadline = time.monotonic() + 60
        while not pages(dst):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        proc.kill()
        proc.communicate(timeout=60)
    want, left = pages(src), pages(dst)
    assert 0 < len(left) < len(want)
    assert left == {o: want[o] for o in left}
    result = run("restore", str(archive), "-d", dst)
    assert result.exit_code == 4 and "--resume" in result.stderr, result.output
    result = run("restore", str(archive), "-d", dst, "--resume")
    assert result.exit_code == 0, result.output
    assert pages(dst) == want
    assert contents(dst) == contents(src)
