"""The BLOB-run fast paths (blobruns, lodata) give exactly what the field-by-field path gives.

A pg_dump 16 archive of a few thousand LOs whose OIDs have 1 to 10 digits (some >= 2^31),
three owners, comments and ACL entries interleaved with the BLOB entries, and LO data of
a few shapes (empty, equal small, varied); custom (none, gzip) and directory. Each view is
computed twice, once with the fast paths and once with them turned off, and compared.
"""

from __future__ import annotations

import dataclasses
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgblobdump.errors import ArchiveError, NotFound
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.toc import blobruns, diff, show, summary
from pgblobdump.toc import lo as los
from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.entry import blobs_oid
from pgblobdump.toc.lo import blockwalk, data, streams
from pgblobdump.toc.reader import open_archive
from tests.toc import build

SQL = """
DO $$BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'run_carol') THEN
    CREATE ROLE run_carol;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'run_dave') THEN
    CREATE ROLE run_dave;
  END IF;
END$$;
SELECT lo_create(id) FROM generate_series(1, 1200) id;
SELECT lo_create(id) FROM generate_series(999999000, 999999300) id;
SELECT lo_create(id) FROM generate_series(2147483000, 2147484000) id;
SELECT lo_create(id) FROM generate_series(4294967000, 4294967295) id;
SELECT lo_put(id, 0, 'same') FROM generate_series(100, 400) id;
SELECT lo_put(id, 0, convert_to(repeat('v', id % 7 + 1), 'UTF8')) FROM generate_series(500, 600) id;
SELECT lo_put(id, 0, 'x') FROM generate_series(2147483500, 2147483600) id;
"""


def _populate(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(SQL)
        for oid in (*range(700, 760), 999999100, 2147483700, 4294967100):
            conn.execute(f"ALTER LARGE OBJECT {oid} OWNER TO run_carol")
        for oid in range(3, 1200, 97):
            conn.execute(f"ALTER LARGE OBJECT {oid} OWNER TO run_dave")
        for oid in (*range(10, 1200, 50), 2147483647, 4294967295):
            conn.execute(f"COMMENT ON LARGE OBJECT {oid} IS 'note {oid}'")
        for oid in (*range(20, 1200, 150), 999999200, 2147483648):
            conn.execute(f"GRANT SELECT ON LARGE OBJECT {oid} TO run_carol")


PLAN = ((16, "custom", "none"), (16, "custom", "gzip"), (16, "directory", "gzip"))
NAMES = [f"{m}-{f}-{c}" for m, f, c in PLAN] + ["16-custom-plain"]


@pytest.fixture(scope="session")
def run_archives(
    pg16: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("blobruns")
    with psycopg.connect(pg16.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS toc_runs")
        conn.execute("CREATE DATABASE toc_runs")
    conninfo = pg16.conninfo("toc_runs")
    _populate(conninfo)
    built = {f"{m}-{f}-{c}": build.dump(conninfo, out, m, f, c, False).path for m, f, c in PLAN}
    # Default owner only, no ACL or comment: the rows of a data run need no lookups.
    with psycopg.connect(pg16.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS toc_runs_plain")
        conn.execute("CREATE DATABASE toc_runs_plain")
    with psycopg.connect(pg16.conninfo("toc_runs_plain"), autocommit=True) as conn:
        conn.execute("SELECT lo_create(id) FROM generate_series(1, 1500) id")
        conn.execute("SELECT lo_put(id, 0, 'ab') FROM generate_series(1, 700) id")
    plain = out / "plain"
    plain.mkdir()
    built["16-custom-plain"] = build.dump(
        pg16.conninfo("toc_runs_plain"), plain, 16, "custom", "gzip", False
    ).path
    return built


def _views(path: Path) -> dict[str, Any]:
    """Every consumer's result for one archive."""
    with open_archive(path) as a:
        return {
            "raw": list(a.iter_raw()),
            "summary": dataclasses.asdict(summary.summarize(a)),
            "rows": list(los.iter_rows(a)),
            "rows_no_sizes": list(los.iter_rows(a, with_sizes=False)),
            "stored": list(streams.iter_sizes(a)),
            "data_start": a.data_start() if a.kind == "custom" else None,
            "show": list(show.lines(a)),
            "show_all": list(show.lines(a, show_all=True)),
        }


def _generic_views(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """_views with every entry and LO decoded field by field (no family, no data run)."""
    with monkeypatch.context() as m:
        m.setattr(blobruns, "MAX_FAMILIES", 0)
        m.setattr(blockwalk, "MAX_CHUNK", -1)
        return _views(path)


@pytest.mark.parametrize("name", NAMES)
def test_fast_equals_generic(
    run_archives: dict[str, Path], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = run_archives[name]
    fast = _views(path)
    slow = _generic_views(path, monkeypatch)
    assert fast == slow
    if name.endswith("plain"):
        assert fast["summary"]["lo_owners"] == {"postgres": 1500}
        return
    oids = {lo[0] for lo in fast["rows"]}
    assert {9, 10} <= {len(str(o)) for o in oids} and max(oids) == 2**32 - 1
    owners = fast["summary"]["lo_owners"]
    assert set(owners) == {"postgres", "run_carol", "run_dave"}
    assert fast["summary"]["los_with_comment"] > 20 and fast["summary"]["los_with_acl"] > 5


@pytest.mark.parametrize("name", NAMES)
def test_runs_engage(run_archives: dict[str, Path], name: str) -> None:
    """The fast path is really taken, and runs agree with their own expansion."""
    with open_archive(run_archives[name]) as a:
        runs = [x for x in a.iter_items() if isinstance(x, BlobRun)]
        assert sum(r.count for r in runs) > 1400 and max(r.count for r in runs) > 100
        for r in runs:
            entries = list(r.entries())
            assert len(entries) == r.count
            assert list(r.oids()) == [blobs_oid(e) for e in entries]
            assert list(r.dump_ids()) == [e[0] for e in entries]
            assert all(e[14] == r.owner for e in entries)
        if a.kind == "custom":
            sizes = list(streams.iter_size_runs(a))
            assert any(isinstance(x, data.SizeRun) and len(x.oids) > 100 for x in sizes)


def test_diff_equal(run_archives: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [run_archives[n] for n in ("16-custom-none", "16-custom-plain")]
    with open_archive(paths[0]) as a, open_archive(paths[1]) as b:
        fast = diff.diff(a, b)
        with monkeypatch.context() as m:
            m.setattr(blobruns, "MAX_FAMILIES", 0)
            slow = diff.diff(a, b)
    assert fast == slow


def _outcome(path: Path) -> tuple[list[Any], str | None]:
    """What a reader makes of ``path``: the items it got, then the error that stopped it."""
    got: list[Any] = []
    try:
        with open_archive(path) as a:
            got.extend(a.iter_raw())
            got.append(summary.summarize(a))
            got.extend(los.iter_rows(a))
    except (ArchiveError, NotFound) as e:
        return got, type(e).__name__
    return got, None


FUZZ = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.mark.parametrize("name", ["16-custom-none", "16-custom-gzip"])
@FUZZ
@given(
    cut=st.floats(0.3, 1),
    changes=st.lists(st.tuples(st.integers(0, 2**32), st.integers(0, 255)), max_size=4),
    toc_bias=st.booleans(),
)
def test_fuzz_fast_never_accepts_more(
    run_archives: dict[str, Path],
    name: str,
    cut: float,
    changes: list[tuple[int, int]],
    toc_bias: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Damaged archives: the fast path reads exactly the entries and LOs the generic path
    reads, and stops with the same kind of error (only ours) at the same place."""
    src = run_archives[name].read_bytes()
    out = bytearray(src[: int(len(src) * cut)])
    span = min(len(out), 600_000) if toc_bias else len(out)  # most damage in the TOC
    for where, value in changes:
        out[where % span] = value
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "a.dump"
        path.write_bytes(bytes(out))
        fast = _outcome(path)
        with monkeypatch.context() as m:
            m.setattr(blobruns, "MAX_FAMILIES", 0)
            m.setattr(blockwalk, "MAX_CHUNK", -1)
            slow = _outcome(path)
    assert fast == slow


@FUZZ
@given(cut=st.floats(0.5, 1), changes=st.lists(st.integers(0, 2**32), max_size=3))
def test_fuzz_directory_toc(
    run_archives: dict[str, Path],
    cut: float,
    changes: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A directory's toc.dat (filename Str instead of an Offset), bits flipped, alone in a
    directory: the data files are missing, which both paths must report alike."""
    toc = (run_archives["16-directory-gzip"] / "toc.dat").read_bytes()
    raw = bytearray(toc[: int(len(toc) * cut)])
    for where in changes:
        raw[where % len(raw)] ^= 1 << (where % 8)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "toc.dat"
        path.write_bytes(bytes(raw))
        fast = _outcome(path)
        with monkeypatch.context() as m:
            m.setattr(blobruns, "MAX_FAMILIES", 0)
            slow = _outcome(path)
    assert fast == slow


@pytest.mark.parametrize("name", NAMES)
def test_show_from_runs_equals_pg_restore_l(run_archives: dict[str, Path], name: str) -> None:
    """`toc show` formats runs from their template: still pg_restore -l line for line."""
    pg_restore = toolchain.find(16).tool("pg_restore")
    listed = subprocess.run(
        [str(pg_restore), "-l", str(run_archives[name])], capture_output=True, text=True, check=True
    ).stdout
    expected = [x for x in listed.splitlines() if x and not x.startswith(";")]
    with open_archive(run_archives[name]) as a:
        assert list(show.lines(a)) == expected
