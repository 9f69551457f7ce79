"""pack / unpack: a pg_dump archive's LOs into a packed archive (every byte, owner, ACL
with its grantors, comment back on restore), and a packed -Fd archive back into a
directory archive that pg_restore lists and restores as it did the original."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

from pgblobdump.cli import cli
from pgblobdump.errors import ToolchainError
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.servers.doctor import build_compression
from tests.conftest import NewDb
from tests.losets import State, fill, roles, state

LOS = {
    **{o: (o % 3000, o % 3, o % 3, o % 4 == 0) for o in range(40_000, 40_060)},
    40_100: (0, 1, 2, True),  # empty, with a grant by another grantor and a comment
    40_101: (3 << 20, 2, 1, False),  # 3 MiB: three pieces
    # one owner and ACL for ten OIDs in a row: a group whose ACL pg_restore 17+ re-issues
    # per LO (IssueACLPerBlob). (Not with a grant by another grantor: pg_restore 17 and 18
    # then fail on pg_dump 17's own archive, "SET SESSION AUTHORIZATION role<oid>(null)".)
    **{o: (10, 1, 1, o % 2 == 0) for o in range(40_200, 40_210)},
    **{o: (10, 0, 1, False) for o in range(40_300, 40_305)},
    2**31 + 5: (10, 0, 0, False),
    2**32 - 2: (100, 1, 0, True),
}


def _as_pg_dump_sees(st: State) -> State:
    """An explicit ACL equal to the default (the owner's own entry only) reads as NULL:
    pg_dump writes no ACL commands for it, so no restore of its archive brings it back."""
    out: State = {}
    for oid, (data, owner, acl, comment) in st.items():
        default = acl == [f"{owner}=rw/{owner}"]
        out[oid] = (data, owner, None if default else acl, comment)
    return out


def _cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _pg(major: int, tool: str) -> Path:
    try:
        return toolchain.find(major, (tool,)).tool(tool)
    except ToolchainError as e:
        pytest.skip(f"{tool} {major} is not installed: {e}")


@pytest.fixture(scope="module")
def source(pg16: EmbeddedCluster) -> tuple[str, State]:
    roles(pg16)
    with psycopg.connect(pg16.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS pack_src")
        conn.execute("CREATE DATABASE pack_src")
    db = pg16.conninfo("pack_src")
    fill(db, LOS)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, body oid)")
        conn.execute("INSERT INTO t SELECT o - 40000, o FROM generate_series(40000, 40059) o")
    return db, _as_pg_dump_sees(state(db))


def _round_trip(source: tuple[str, State], pg16: EmbeddedCluster, new_db: NewDb, tmp: Path,
                major: int, fmt: str, compression: str) -> Path:  # fmt: skip
    db, want = source
    pg_dump = _pg(major, "pg_dump")
    if compression not in ("none", "gzip") and compression not in build_compression(pg_dump.parent):
        compression = "gzip"
    dumped = tmp / f"pg{major}.{fmt}"
    subprocess.run([str(pg_dump), f"-F{fmt}", "-Z", compression, "-f", str(dumped), "-d", db],
                   check=True, capture_output=True)  # fmt: skip
    packed = tmp / f"pg{major}-{fmt}.pbd"
    result = _cli("pack", str(dumped), "-o", str(packed), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["los"] == len(LOS) and report["files"] <= 4
    assert _cli("verify", str(packed)).exit_code == 0
    dst = new_db(pg16)
    restored = _cli("restore", str(packed), "-d", dst)
    assert restored.exit_code == 0, restored.output
    assert state(dst) == want, (major, fmt, compression)
    return dumped


@pytest.mark.parametrize(("major", "fmt", "compression"), [(17, "d", "zstd"), (16, "c", "gzip")])
def test_pack(source: tuple[str, State], pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path,
              major: int, fmt: str, compression: str) -> None:  # fmt: skip
    _round_trip(source, pg16, new_db, tmp_path, major, fmt, compression)


@pytest.mark.scale
@pytest.mark.parametrize(
    ("major", "fmt", "compression"),
    [(16, "d", "none"), (17, "c", "lz4"), (18, "d", "gzip"), (18, "c", "none"), (17, "t", "none")],
)
def test_pack_more(source: tuple[str, State], pg16: EmbeddedCluster, new_db: NewDb,
                   tmp_path: Path, major: int, fmt: str, compression: str) -> None:  # fmt: skip
    _round_trip(source, pg16, new_db, tmp_path, major, fmt, compression)


@pytest.mark.parametrize("major", [pytest.param(16, marks=pytest.mark.scale), 17])
def test_unpack_gives_back_the_archive(
    source: tuple[str, State], pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path, major: int,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    dumped = _round_trip(source, pg16, new_db, tmp_path, major, "d", "gzip")
    back = tmp_path / "back"
    result = _cli("unpack", str(tmp_path / f"pg{major}-d.pbd"), "-o", str(back))
    assert result.exit_code == 0, result.output
    pg_restore = _pg(major, "pg_restore")

    def listing(path: Path) -> str:
        return subprocess.run([str(pg_restore), "-l", str(path)], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip

    assert listing(back) == listing(dumped)
    target: EmbeddedCluster = request.getfixturevalue(f"pg{major}")  # pg_restore N into N
    roles(target)
    dst = new_db(target)
    done = subprocess.run([str(pg_restore), "-d", dst, str(back)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert state(dst) == source[1]
    with psycopg.connect(dst) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (60,)
    # and as a custom archive: the same TOC (the header's comment lines aside), restored
    # by pg_restore with two jobs
    custom = tmp_path / "back.dump"
    result = _cli("unpack", str(tmp_path / f"pg{major}-d.pbd"), "--format", "custom", "-o",
                  str(custom))  # fmt: skip
    assert result.exit_code == 0, result.output

    def entries(path: Path) -> list[str]:
        return [line for line in listing(path).splitlines() if not line.startswith(";")]

    assert entries(custom) == entries(dumped)
    dst = new_db(target)
    done = subprocess.run([str(pg_restore), "-j", "2", "-d", dst, str(custom)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert state(dst) == source[1]
    assert _cli("unpack", str(tmp_path / f"pg{major}-d.pbd"), "--format", "custom", "-o",
                str(custom)).exit_code == 11  # fmt: skip


def test_bad_input(pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path,
                   source: tuple[str, State]) -> None:  # fmt: skip
    empty_db = new_db(pg16)
    plain = tmp_path / "nolos.dump"
    subprocess.run([str(_pg(16, "pg_dump")), "-Fc", "-f", str(plain), "-d", empty_db],
                   check=True, capture_output=True)  # fmt: skip
    result = _cli("pack", str(plain), "-o", str(tmp_path / "x"))
    assert result.exit_code == 8 and "no large objects" in result.stderr
    assert not (tmp_path / "x").exists()
    dumped = tmp_path / "a.dump"
    subprocess.run([str(_pg(16, "pg_dump")), "-Fc", "-f", str(dumped), "-d", source[0]],
                   check=True, capture_output=True)  # fmt: skip
    cut = tmp_path / "cut.dump"
    cut.write_bytes(dumped.read_bytes()[: dumped.stat().st_size - 3000])
    result = _cli("pack", str(cut), "-o", str(tmp_path / "y"))
    assert result.exit_code == 7, result.output
    assert not (tmp_path / "y").exists()
    packed = tmp_path / "p.pbd"
    assert _cli("pack", str(dumped), "-o", str(packed)).exit_code == 0
    result = _cli("unpack", str(packed), "--format", "directory", "-o", str(tmp_path / "z"))
    assert result.exit_code == 2 and "unpack it with --format custom" in result.stderr
    # Without --format: the custom archive it was packed from (it was refused, exit 2).
    back = tmp_path / "back.dump"
    assert _cli("unpack", str(packed), "-o", str(back)).exit_code == 0
    assert _cli("toc", "show", str(back)).stdout == _cli("toc", "show", str(dumped)).stdout
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "f").write_text("x")
    result = _cli("unpack", str(packed), "--format", "directory", "-o", str(busy))
    assert result.exit_code == 11 and "not an empty directory" in result.stderr


@pytest.mark.parametrize(
    ("major", "layout", "fmt"),
    [(16, None, "custom"), (17, 17, "custom"), (16, None, "directory"),
     *(pytest.param(*p, marks=pytest.mark.scale) for p in
       ((17, None, "custom"), (18, None, "custom"), (18, 18, "custom"),
        (18, 17, "directory")))],
)  # fmt: skip
def test_unpack_a_dump_as_a_pg_dump_archive(
    source: tuple[str, State], pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path, major: int,
    layout: int | None, fmt: str, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """A packed dump (no pg_dump TOC to start from) as a custom or directory archive in
    pg_dump 16's layout (pg_restore 16, 17 and 18 read it) or 17's: every LO, owner, ACL
    (grantors included) and comment back."""
    packed = tmp_path / "d.pbd"
    assert _cli("dump", "-d", source[0], "-o", str(packed)).exit_code == 0
    out = tmp_path / ("d.dump" if fmt == "custom" else "d.dir")
    more = ["--pg-dump-major", str(layout)] if layout else []
    result = _cli("unpack", str(packed), "--format", fmt, "-o", str(out), *more)
    assert result.exit_code == 0, result.output
    listing = subprocess.run([str(_pg(major, "pg_restore")), "-l", str(out)],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert ("BLOB METADATA" in listing) == (layout is not None)
    assert f"Dump Version: 1.{16 if layout else 15}-0" in listing
    target: EmbeddedCluster = request.getfixturevalue(f"pg{major}")
    roles(target)
    dst = new_db(target)
    done = subprocess.run([str(_pg(major, "pg_restore")), "-j", "2", "-d", dst, str(out)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _as_pg_dump_sees(state(dst)) == source[1]


@pytest.mark.parametrize("major", [pytest.param(16, marks=pytest.mark.scale), 17])
def test_unpack_a_packed_custom_archive(
    source: tuple[str, State], pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path, major: int,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """A custom archive packed (its TOC and table data kept as pg_dump.custom) comes back
    with the same entries, and pg_restore -j 2 of its major restores rows and LOs."""
    dumped = _round_trip(source, pg16, new_db, tmp_path, major, "c", "gzip")
    back = tmp_path / "back.dump"
    result = _cli("unpack", str(tmp_path / f"pg{major}-c.pbd"), "--format", "custom", "-o",
                  str(back))  # fmt: skip
    assert result.exit_code == 0, result.output
    pg_restore = _pg(major, "pg_restore")

    def entries(path: Path) -> list[str]:
        out = subprocess.run([str(pg_restore), "-l", str(path)], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        return [line for line in out.splitlines() if not line.startswith(";")]

    assert entries(back) == entries(dumped)
    target: EmbeddedCluster = request.getfixturevalue(f"pg{major}")
    roles(target)
    dst = new_db(target)
    done = subprocess.run([str(pg_restore), "-j", "2", "-d", dst, str(back)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert state(dst) == source[1]
    with psycopg.connect(dst) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (60,)
