"""Finding changes from PostgreSQL 17+'s WAL summaries (pg/wal/summary.py), for ``dump
--since`` and ``sync``, on real servers with ``summarize_wal`` on: every kind of change
found equal, LO by LO, to the full pass over pg_largeobject; and each case where the
summaries cannot tell (a gap, summaries removed, a role without EXECUTE, 16) falls back
to the full pass and says why, or with ``--detect wal-summaries`` is refused."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgblobdump.cli.options import detect_option
from pgblobdump.pg.changes import DETECT, Mark
from pgblobdump.pg.wal.summary import FUNCTIONS, gap, to_block_ranges
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.sync.copy import CopyRequest, copy
from pgblobdump.sync.run import SyncRequest, sync
from tests.conftest import NewDb, _cluster
from tests.losets import state
from tests.packed.test_incremental import _cli, _first_changes, _ok, _records, _source, _sql

pytestmark = pytest.mark.pg

SUMMARIES = {"wal_level": "replica", "summarize_wal": "on"}


def _summarizing(major: int) -> Iterator[EmbeddedCluster]:
    for c in _cluster(major):
        c.configure(SUMMARIES)
        c.restart()  # wal_level needs a restart
        with psycopg.connect(c.conninfo(), autocommit=True) as conn:
            # a redo point summarized: WAL of wal_level minimal (up to the restart) never is
            conn.execute("CHECKPOINT")
        yield c


@pytest.fixture(scope="module")
def wal17() -> Iterator[EmbeddedCluster]:
    yield from _summarizing(17)


@pytest.fixture(scope="module")
def wal18() -> Iterator[EmbeddedCluster]:
    yield from _summarizing(18)


def _incremental(src: str, base: Path, out: Path, detect: str) -> tuple[dict[str, object], str]:
    """``dump --since base`` with ``--detect``: its JSON record and its manifest's detection."""
    got = _ok("dump", "-d", src, "-o", str(out), "--since", str(base), "--detect", detect)
    manifest = json.loads((out / "manifest.json").read_text())
    return got, str(manifest["incremental"]["detection"])


def _counts(got: dict[str, object]) -> tuple[object, ...]:
    return tuple(got[k] for k in ("new", "changed", "gone", "carried", "metadata_only"))


@pytest.mark.parametrize("major", [17, 18])
def test_every_kind_of_change_is_found_as_by_the_full_pass(
    major: int, request: pytest.FixtureRequest, new_db: NewDb, tmp_path: Path
) -> None:
    cluster: EmbeddedCluster = request.getfixturevalue(f"wal{major}")
    src = _source(cluster, new_db)
    full = tmp_path / "full"
    _ok("dump", "-d", src, "-o", str(full))
    _first_changes(src)
    wal, how = _incremental(src, full, tmp_path / "wal", "wal-summaries")
    assert how == "wal summaries"
    byxid, how = _incremental(src, full, tmp_path / "xid", "full-pass")
    assert how == "transaction ids"
    assert _counts(wal) == _counts(byxid) == (1, 7, 1, wal["carried"], 2)
    assert _records(tmp_path / "wal") == _records(tmp_path / "xid")
    dst = new_db(cluster)
    _ok("restore", str(tmp_path / "wal"), "-d", dst)
    assert state(dst) == state(src)

    # VACUUM FREEZE rewrites every page's tuple headers: no LO is taken for changed
    _sql(src, "VACUUM (FREEZE) pg_largeobject", "VACUUM (FREEZE) pg_largeobject_metadata")
    after, how = _incremental(src, tmp_path / "wal", tmp_path / "frozen", "wal-summaries")
    assert how == "wal summaries"
    assert (after["new"], after["changed"], after["gone"], after["los"]) == (0, 0, 0, 0)


def test_auto_notes_the_summaries_path_and_16_always_takes_the_full_pass(
    wal17: EmbeddedCluster, pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    for cluster, how in ((wal17, "wal summaries"), (pg16, "transaction ids")):
        src = new_db(cluster)
        _sql(src, "SELECT lo_from_bytea(0, 'x') FROM generate_series(1, 50)")
        full, inc = tmp_path / f"full{cluster.tc.major}", tmp_path / f"inc{cluster.tc.major}"
        _ok("dump", "-d", src, "-o", str(full))
        _sql(src, "SELECT lo_put(min(oid), 0, 'y') FROM pg_largeobject_metadata")
        r = _cli("dump", "-d", src, "-o", str(inc), "--since", str(full))
        assert r.exit_code == 0, r.output
        manifest = json.loads((inc / "manifest.json").read_text())
        assert manifest["incremental"]["detection"] == how
        assert manifest["incremental"]["changed"] == 1
        if how == "wal summaries":
            assert "changes found from the WAL summaries" in r.stderr
        else:  # a server that keeps no summaries: the full pass as always, no note
            assert "pg_largeobject" not in r.stderr
    r = _cli("dump", "-d", src, "-o", str(tmp_path / "refused"), "--since", str(full),
             "--detect", "wal-summaries")  # fmt: skip
    assert r.exit_code == 2, r.output
    assert "--detect wal-summaries: PostgreSQL 16 keeps no WAL summaries" in r.output
    assert not (tmp_path / "refused").exists()
    assert (
        _cli("dump", "-d", src, "-o", str(tmp_path / "x"), "--detect", "full-pass").exit_code == 2
    )


def _base(cluster: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> tuple[str, Path]:
    src = new_db(cluster)
    _sql(src, "SELECT lo_from_bytea(0, 'x') FROM generate_series(1, 50)")
    full = tmp_path / "full"
    _ok("dump", "-d", src, "-o", str(full))
    _sql(src, "SELECT lo_put(max(oid), 0, 'y') FROM pg_largeobject_metadata")
    return src, full


def _falls_back(src: str, full: Path, tmp_path: Path, why: str) -> None:
    """auto takes the full pass saying ``why``, with today's result; wal-summaries is refused."""
    r = _cli("dump", "-d", src, "-o", str(tmp_path / "inc"), "--since", str(full), "--json")
    assert r.exit_code == 0, r.output
    assert f"full pass over pg_largeobject ({why}" in r.stderr, r.stderr
    assert json.loads(r.stdout)["changed"] == 1
    manifest = json.loads((tmp_path / "inc" / "manifest.json").read_text())
    assert manifest["incremental"]["detection"] == "transaction ids"
    r = _cli("dump", "-d", src, "-o", str(tmp_path / "no"), "--since", str(full),
             "--detect", "wal-summaries")  # fmt: skip
    assert r.exit_code == 2 and why in r.output, r.output


def test_a_gap_in_the_summaries_falls_back(
    wal17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src, full = _base(wal17, new_db, tmp_path)
    with psycopg.connect(wal17.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET summarize_wal = off")
        conn.execute("SELECT pg_reload_conf()")
        for _ in range(4):  # the unsummarized WAL removed: the summarizer cannot go back
            conn.execute("SELECT lo_from_bytea(0, 'z')")
            conn.execute("SELECT pg_switch_wal()")
            conn.execute("CHECKPOINT")
        conn.execute("ALTER SYSTEM SET summarize_wal = on")
        conn.execute("SELECT pg_reload_conf()")
    _falls_back(src, full, tmp_path, "the WAL summaries do not cover")


def _holding(cluster: EmbeddedCluster, lsn: int) -> list[Path]:
    """The summary files whose stretch holds ``lsn`` (named TLI, start, end in hex)."""
    out = []
    for f in (cluster.datadir / "pg_wal" / "summaries").glob("*.summary"):
        if len(f.name) != 48:  # temp.summary: one being written
            continue
        start = int(f.name[8:16], 16) << 32 | int(f.name[16:24], 16)
        end = int(f.name[24:32], 16) << 32 | int(f.name[32:40], 16)
        if start <= lsn < end:
            out.append(f)
    return out


def test_summaries_removed_fall_back(wal17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    src, full = _base(wal17, new_db, tmp_path)
    mark = Mark.from_json(
        json.dumps(json.loads((full / "manifest.json").read_text())["source"]["mark"])
    )
    assert mark.wal_from is not None
    with psycopg.connect(wal17.conninfo(), autocommit=True) as conn:
        conn.execute("CHECKPOINT")  # the summarizer writes the summary holding wal_from
    # what wal_summary_keep_time does to old ones (at a minute's granularity): the files go
    deadline = time.monotonic() + 10
    while not (holding := _holding(wal17, mark.wal_from)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert holding
    for f in holding:
        f.unlink()
    _falls_back(src, full, tmp_path, "the WAL summaries do not cover")


def test_a_role_without_execute_falls_back_saying_why(
    wal17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    src = new_db(wal17)
    role = f"pgbd_ws_{tmp_path.name[-6:].lower().replace('-', '_')}"
    with psycopg.connect(wal17.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT EXECUTE ON FUNCTION pg_control_system() TO {role}")
        conn.execute(f"GRANT EXECUTE ON FUNCTION pg_control_checkpoint() TO {role}")
    _sql(src, f"GRANT SELECT ON pg_largeobject TO {role}",  # per database: its own catalog
         *(f"REVOKE EXECUTE ON FUNCTION {f} FROM PUBLIC" for f in FUNCTIONS))  # fmt: skip
    _sql(src, f"SET ROLE {role}", "SELECT lo_from_bytea(0, 'x') FROM generate_series(1, 20)")
    as_role = f"{src} user={role}"
    full = tmp_path / "full"
    _ok("dump", "-d", as_role, "-o", str(full))
    _sql(src, "SELECT lo_put(max(oid), 0, 'y') FROM pg_largeobject_metadata")
    _falls_back(as_role, full, tmp_path, "this role may not execute pg_available_wal_summaries")


def test_a_writer_open_at_the_mark_and_one_open_at_the_dump(
    wal17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """A write made before the base's snapshot but committed after it (its WAL before the
    mark's position) is found; one not committed at the incremental's snapshot is not,
    and the next incremental finds it."""
    src = new_db(wal17)
    _sql(src, "SELECT lo_from_bytea(0, 'x') FROM generate_series(1, 200)", "CHECKPOINT")
    with psycopg.connect(src) as early, psycopg.connect(src) as late:
        early.execute("SELECT lo_put(min(oid), 0, 'early') FROM pg_largeobject_metadata")
        _ok("dump", "-d", src, "-o", str(tmp_path / "full"))
        early.commit()
        late.execute("SELECT lo_put(max(oid), 0, 'late') FROM pg_largeobject_metadata")
        wal, _ = _incremental(src, tmp_path / "full", tmp_path / "inc1", "wal-summaries")
        xid, _ = _incremental(src, tmp_path / "full", tmp_path / "inc1x", "full-pass")
        assert _records(tmp_path / "inc1") == _records(tmp_path / "inc1x")
        assert (wal["changed"], xid["changed"]) == (1, 1)
        late.commit()
    got, _ = _incremental(src, tmp_path / "inc1", tmp_path / "inc2", "wal-summaries")
    assert got["changed"] == 1
    dst = new_db(wal17)
    _ok("restore", str(tmp_path / "inc2"), "-d", dst)
    assert state(dst) == state(src)


def test_sync_through_the_summaries_equals_the_full_pass(
    wal17: EmbeddedCluster, new_db: NewDb
) -> None:
    src = _source(wal17, new_db)
    targets = {d: new_db(wal17) for d in ("wal-summaries", "full-pass")}
    for dst in targets.values():
        copy(src, dst, CopyRequest())
    _first_changes(src)
    results = {d: sync(src, dst, SyncRequest(delete=True, detect=d)) for d, dst in targets.items()}
    assert results["wal-summaries"].record()["detection"] == "wal summaries"
    assert results["full-pass"].record()["detection"] == "transaction ids"
    assert results["wal-summaries"].method.startswith("wal summaries since ")
    assert results["wal-summaries"].plan.counts() == results["full-pass"].plan.counts()
    want = state(src)
    for dst in targets.values():
        assert state(dst) == want
    again = sync(src, targets["wal-summaries"], SyncRequest(detect="wal-summaries"))
    assert again.plan.counts()["rewrite"] == 0 and again.copied == 0


def test_a_base_from_another_cluster_is_refused_as_before(
    wal17: EmbeddedCluster, wal18: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    _src, full = _base(wal17, new_db, tmp_path)
    other = new_db(wal18)
    r = _cli("dump", "-d", other, "-o", str(tmp_path / "x"), "--since", str(full),
             "--detect", "wal-summaries")  # fmt: skip
    assert r.exit_code == 2 and "an incremental dump reads the database its base read" in r.output


def test_summary_coverage_and_block_ranges() -> None:
    assert gap(100, 300, [(50, 150), (150, 320)]) is None
    assert gap(100, 300, [(50, 150), (160, 320)]) is not None  # a hole at 150
    assert gap(100, 300, [(120, 320)]) is not None  # none before 120
    assert gap(100, 300, []) is not None
    assert to_block_ranges({1, 2, 3, 7, 9, 10}, None) == [(1, 4), (7, 8), (9, 11)]
    assert to_block_ranges({1, 2, 8, 9}, 5) == [(1, 3), (5, None)]
    assert to_block_ranges({3, 4}, 5) == [(3, None)]
    assert to_block_ranges(set(), 0) == [(0, None)]


def test_marks_keep_their_wal_start_and_read_old_ones() -> None:
    m = Mark("system 1", 5, 10, 12, (11,), 1, 500, 400)
    assert Mark.from_json(m.to_json()) == m
    old = Mark("system 1", 5, 10, 12, (11,), 1, 500)
    assert json.loads(old.to_json()) == ["system 1", 5, 10, 12, [11], 1, 500]  # as before
    assert Mark.from_json(old.to_json()).wal_from is None
    assert m.union(Mark("system 1", 5, 9, 12, (), 1, 450, 300)).wal_from == 300
    assert m.union(old).wal_from is None


def test_the_option_offers_what_the_core_knows() -> None:
    opt = detect_option("x")(lambda: None).__click_params__[0]  # type: ignore[attr-defined]
    assert tuple(opt.type.choices) == DETECT
