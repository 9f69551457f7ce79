"""The dump's two read paths (pages for a role that may read pg_largeobject, lo_get for
any other) give the same archive, byte for byte; LOs over lostream.BIG are read in
ranges with their size known first, under the dump's snapshot even when another session
rewrites them between two ranges; --jobs 2 splits the LOs between two workers."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgblobdump.packed import DumpRequest, RestoreRequest, open_source
from pgblobdump.packed.dump.run import dump
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.manifest import DumpSource
from pgblobdump.packed.restore.restorer import restore
from pgblobdump.packed.write.writer import ArchiveWriter
from pgblobdump.pg import lostream
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from tests.conftest import NewDb
from tests.losets import fill, roles, state

DUMPER = "pgbd_t_dumper"
"""A role that may read the test's LOs (a grant on each) but not pg_largeobject."""


def _corpus(db: str) -> dict[int, bytes]:
    """LOs around every edge of the two paths: empty ones in runs, small ones, holes in a
    small LO, exactly BIG bytes, BIG + 1, a big one with a hole, a big one that is all
    hole but its last page (no page under BIG), and pages ending short mid-LO."""
    big = lostream.BIG
    los: dict[int, bytes] = {}
    with psycopg.connect(db, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (DUMPER,)).fetchone():
            conn.execute(f"CREATE ROLE {DUMPER} LOGIN")

        def put(oid: int, *parts: tuple[int, bytes]) -> None:
            conn.execute("SELECT lo_create(%s::int8::oid)", (oid,))
            for off, data in parts:
                conn.execute("SELECT lo_put(%s::int8::oid, %s, %s)", (oid, off, data))
            los[oid] = bytes(conn.execute("SELECT lo_get(%s::int8::oid)", (oid,)).fetchone()[0])

        for oid in range(30_000, 30_040):
            put(oid)  # a run of empties
        for oid in range(30_040, 30_100):
            put(oid, (0, os.urandom(oid % 5000 + 1)))
        put(30_100, (0, b"head"), (9000, b"after a hole"))
        put(30_101, (0, os.urandom(big)))
        put(30_102, (0, os.urandom(big + 1)))
        put(30_103, (0, os.urandom(3000)), (3 * big, os.urandom(5000)))
        put(30_104, (5 * big + 17, b"only the end"))
        put(30_105, (0, b"short"), (2048 * 3, os.urandom(100)), (2 * big, b"x"))
        put(30_106)
        put(30_107, (0, b"text " * 3000))
        for oid in range(30_108, 30_120):
            put(oid, (0, os.urandom(7000)))
        conn.execute(f"GRANT SELECT ON LARGE OBJECT {', '.join(map(str, los))} TO {DUMPER}")
    return los


def _as(db: str, role: str | None) -> str:
    return db if role is None else f"{db} user={role}"


def _dump(db: str, path: Path, jobs: int = 1) -> dict[str, object]:
    dump(db, DumpRequest(jobs=jobs), storage=LocalDirectory(path, create=True))
    manifest: dict[str, object] = json.loads((path / "manifest.json").read_text())
    return manifest


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.name != "manifest.json"}


@pytest.fixture
def source(pg17: EmbeddedCluster, new_db: NewDb) -> Iterator[tuple[str, dict[int, bytes]]]:
    db = new_db(pg17)
    yield db, _corpus(db)


def _pages_readable(db: str) -> bool:
    with psycopg.connect(db) as conn:
        return bool(
            conn.execute("SELECT has_table_privilege('pg_largeobject', 'SELECT')").fetchone()[0]
        )


@pytest.mark.parametrize("jobs", [1, 2])
def test_pages_and_lo_get_paths_write_the_same_archive(
    source: tuple[str, dict[int, bytes]], pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path,
    jobs: int,
) -> None:  # fmt: skip
    db, los = source
    assert _pages_readable(db) and not _pages_readable(_as(db, DUMPER))
    m1 = _dump(db, tmp_path / "pages", jobs)
    m2 = _dump(_as(db, DUMPER), tmp_path / "lo_get", jobs)
    assert (
        (m1["los"], m1["bytes"])
        == (m2["los"], m2["bytes"])
        == (len(los), sum(map(len, los.values())))
    )
    assert _files(tmp_path / "pages") == _files(tmp_path / "lo_get")
    dst = new_db(pg17)
    with open_source(str(tmp_path / "lo_get")) as s:
        restore(dst, s.items, RestoreRequest(), index=s.index, metas=s.metas)
    assert state(dst) == state(db)


@pytest.mark.parametrize("role", [None, DUMPER], ids=["pages", "lo_get"])
def test_small_ranges_and_a_big_lo_rewritten_mid_read(
    source: tuple[str, dict[int, bytes]], pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, role: str | None,
) -> None:  # fmt: skip
    """With BIG at 8 KiB most LOs are read in ranges; after the first range of 30_102,
    another session truncates it and writes other bytes past the old end (committed):
    the archive still holds the snapshot's bytes, and every range was BIG long."""
    db, los = source
    monkeypatch.setattr(lostream, "BIG", 8192)
    ranges = lostream.read_ranges
    seen: list[tuple[int, int]] = []

    def rewritten(conn: psycopg.Connection, oid: int, start: int, size: int) -> Iterator[bytes]:
        for i, chunk in enumerate(ranges(conn, oid, start, size)):
            seen.append((oid, len(chunk)))
            yield chunk
            if oid == 30_102 and i == 0:
                with psycopg.connect(db, autocommit=True) as other:
                    other.execute("SELECT lo_truncate(lo_open(30102, x'60000'::int), 100)")
                    other.execute("SELECT lo_put(30102, %s, %s)", (2 << 20, b"later"))

    monkeypatch.setattr(lostream, "read_ranges", rewritten)
    _dump(_as(db, role), tmp_path / "a")
    assert {oid for oid, _ in seen} >= {30_101, 30_102, 30_103, 30_104, 30_105, 30_107}
    assert all(n <= 8192 for _, n in seen)
    dst = new_db(pg17)
    with open_source(str(tmp_path / "a")) as s:
        restore(dst, s.items, RestoreRequest(), index=s.index, metas=s.metas)
    got = state(dst)
    assert {oid: got[oid][0] for oid in got} == los  # the snapshot's bytes, 30_102 whole
    assert state(db)[30_102][0] == los[30_102][:100] + bytes((2 << 20) - 100) + b"later"


def test_jobs_2_splits_the_los_between_two_workers(
    source: tuple[str, dict[int, bytes]], tmp_path: Path
) -> None:
    db, los = source
    manifest = _dump(db, tmp_path / "a", jobs=2)
    assert manifest["workers"] == 2
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert any(n.startswith("data-1-") for n in names) and any(
        n.startswith("data-2-") for n in names
    )
    from pgblobdump.packed.read.source import directory

    archive = directory(str(tmp_path / "a"))
    assert [r.oid for r in archive.index] == sorted(los)


def test_empties_in_bulk_are_the_records_added_one_by_one(tmp_path: Path) -> None:
    """add_empties builds directory and index records a frame at a time (strided slice
    assignments): the same bytes as one add() per LO, across frames and index blocks,
    with metadata changing inside a run and OIDs past 2^31."""
    oids = [*range(100, 40_000, 2), *range(2**31, 2**31 + 5000), 2**32 - 1]
    metas = [("a", None, None) if o % 7 else ("b", ("x=r/b",), "c") for o in oids]
    for name in ("bulk", "one"):
        with ArchiveWriter(LocalDirectory(tmp_path / name, create=True)) as w:
            p = w.worker()
            p.add(50, lostream_meta("z"), b"bytes first")
            if name == "bulk":
                p.add_empties(oids[:20_001], metas[:20_001])
                p.add_empties(oids[20_001:], metas[20_001:])
            else:
                for o, m in zip(oids, metas, strict=True):
                    p.add(o, lostream_meta(*m), b"")
            w.finish(DumpSource())
    assert _files(tmp_path / "bulk") == _files(tmp_path / "one")


def lostream_meta(
    owner: str, acl: tuple[str, ...] | None = None, comment: str | None = None
) -> Meta:
    return Meta(owner, acl, comment)


COMPAT = "pgbd_t_compat_reader"
"""A role that may read every LO (``lo_compat_privileges``) but not pg_largeobject."""


def test_windows_of_empties_are_handed_on_whole_with_exact_metadata(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows of 50 LOs: those with no page in their OID range go to the packer as one
    run of empties (no pages COPY), the one with bytes by the pages path; owners, ACLs
    (by the owner and another grantor) and comments (quotes, a backslash, a tab, non-ASCII)
    scattered over both kinds, OIDs past 2^31. The archive is byte for byte the one
    written with one window (no empty window: the per-LO path) and the lo_get path's,
    and restores to the same state."""
    roles(pg17)
    db = new_db(pg17)
    specs: dict[int, tuple[int, int, int, bool]] = {}
    for i, oid in enumerate([*range(40_000, 40_230), *range(2**31 + 7, 2**31 + 90)]):
        size = 10 + i * 13 if 40_120 <= oid < 40_125 else 0
        specs[oid] = (size, i % 23 == 0, 1 if i % 17 == 0 else 2 if i % 41 == 0 else 0, i % 11 == 0)
    fill(db, specs)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("COMMENT ON LARGE OBJECT 40001 IS E'tab\\t \"q\" \\\\ caf\\u00e9 ''s'")
        if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (COMPAT,)).fetchone():
            conn.execute(f"CREATE ROLE {COMPAT} LOGIN")
            conn.execute(f"ALTER ROLE {COMPAT} SET lo_compat_privileges = on")
    whole = tmp_path / "one-window"
    _dump(db, whole)
    monkeypatch.setattr(lostream, "WINDOW", 50)
    by_pages = lostream._window_by_pages
    windows: list[tuple[int, int]] = []

    def counted(conn: psycopg.Connection, window: list[tuple[int, object]], sel: object) -> object:
        windows.append((window[0][0], window[-1][0]))
        return by_pages(conn, window, sel)  # type: ignore[arg-type]

    monkeypatch.setattr(lostream, "_window_by_pages", counted)
    _dump(db, tmp_path / "pages")
    assert windows == [(40_100, 40_149)]  # the other six windows: runs of empties
    _dump(_as(db, COMPAT), tmp_path / "lo_get")
    assert _files(tmp_path / "pages") == _files(whole) == _files(tmp_path / "lo_get")
    dst = new_db(pg17)
    with open_source(str(tmp_path / "pages")) as s:
        restore(dst, s.items, RestoreRequest(), index=s.index, metas=s.metas)
    got, want = state(dst), state(db)
    assert got == want
    assert want[40_001][3] == 'tab\t "q" \\ caf\u00e9 \'s'
    assert {a is not None for _, _, a, _ in want.values()} == {True, False}
    assert len({w for _, w, _, _ in want.values()}) == 2
