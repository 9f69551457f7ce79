"""bench read and bench toast against real servers (-d), small sizes: the shape of what
they report, that the figures are sane, and that nothing is left behind, and nothing that
was not theirs is touched."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import Result

from pgblobdump.bench import read as read_bench
from pgblobdump.bench import toast as toast_bench
from pgblobdump.bench.server import server
from pgblobdump.bench.toastspec import ToastSpec
from pgblobdump.cli.progress import Figures
from pgblobdump.errors import DatabaseError
from pgblobdump.report.reporter import Reporter
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb

STRANGER = "pgbd_bench_not_ours"
"""A table whose name looks like a benchmark's, made by someone else: it must survive."""


def leftovers(db: str) -> tuple[list[str], int]:
    """Tables named like a benchmark's, other than STRANGER, and the number of LOs."""
    with psycopg.connect(db) as conn:
        tables = conn.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE 'pgbd\\_bench%%' AND relname <> %s",
            (STRANGER,),
        )
        names = [str(r[0]) for r in tables.fetchall()]
        los = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
        return names, int(los[0]) if los else -1


def strangers(db: str) -> int:
    """A table and an LO that were there before the benchmark; returns the LO's OID."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {STRANGER} (x text)")
        conn.execute(f"INSERT INTO {STRANGER} VALUES ('still here')")
        row = conn.execute("SELECT lo_from_bytea(0, 'not ours')").fetchone()
        return int(row[0]) if row else 0


def strangers_intact(db: str, oid: int) -> None:
    with psycopg.connect(db) as conn:
        assert conn.execute(f"SELECT x FROM {STRANGER}").fetchone() == ("still here",)
        assert conn.execute("SELECT lo_get(%s)", (oid,)).fetchone() == (b"not ours",)


def assert_last_line_error(result: Result, code: int, fragment: str) -> None:
    """As assert_one_line_error, after the progress notes on stderr."""
    assert result.exit_code == code, (result.exit_code, result.output, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: ") and fragment in last, last
    assert "Traceback" not in result.output


def test_read_reports_every_method_and_mode(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    db = new_db(pg17)
    oid = strangers(db)
    plots = tmp_path / "plots"
    result = run("bench", "read", "-d", db, "--sizes", "300KiB,64KiB", "--chunk", "64KiB",
                 "--repeat", "2", "--content", "text", "--dir", str(tmp_path), "--plot",
                 str(plots), "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    seen = {(r["size"], r["method"], r["mode"]) for r in doc["rows"]}
    assert seen == {
        (s, m, d) for s in (300 * 1024, 64 * 1024) for m in read_bench.METHODS
        for d in read_bench.MODES
    }  # fmt: skip
    for r in doc["rows"]:
        assert r["bytes_read"] == r["size"] and r["seconds"]["n"] == 2 and r["mb_per_s"] > 0
        assert r["seconds"]["low"] <= r["seconds"]["median"] <= r["seconds"]["high"]
        assert r["vs_file"] > 0
        if r["method"] == "file":
            assert r["vs_file"] == 1.0
    assert doc["server"]["settings"]["fsync"] in ("on", "off")
    assert doc["cache"] == "warm" and any("warm" in n for n in doc["notes"])
    assert (plots / "bench-read.png").stat().st_size > 0
    assert list(tmp_path.iterdir()) == [plots]  # the file copy's temporary folder is gone
    assert leftovers(db) == ([], 1)  # only the LO that was there before
    strangers_intact(db, oid)


def test_read_cleans_up_after_a_failure(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg17)
    oid = strangers(db)

    def broken(*args: object) -> object:
        def read() -> int:
            return 1  # a short read

        return read

    monkeypatch.setattr(read_bench, "_reader", broken)
    with server(db, 17, False) as s, pytest.raises(DatabaseError, match="read 1 of"):
        read_bench.run(s, read_bench.ReadSpec(sizes=(10_000,), repeat=1))
    assert leftovers(db) == ([], 1)
    strangers_intact(db, oid)


def test_a_taken_table_name_fails_the_run_and_is_not_dropped(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg17)
    oid = strangers(db)
    monkeypatch.setattr(read_bench, "unique_tag", lambda: "not_ours")
    monkeypatch.setattr(toast_bench, "unique_tag", lambda: "not_ours")
    # bench read names its tables pgbd_bench_<tag>_<size>_<method>: the last one is taken
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {STRANGER} RENAME TO pgbd_bench_not_ours_100_bytea_extended")
    result = run("bench", "read", "-d", db, "--sizes", "100", "--repeat", "1")
    assert_last_line_error(result, 4, "already exists")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE pgbd_bench_not_ours_100_bytea_extended RENAME TO {STRANGER}")
        conn.execute(f"CREATE TABLE pgbd_bench_not_ours_toast AS SELECT * FROM {STRANGER}")
    result = run("bench", "toast", "-d", db, "--lengths", "100", "--rows", "10")
    assert_last_line_error(result, 4, "already exists")
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT x FROM pgbd_bench_not_ours_toast").fetchone() == (
            "still here",)  # fmt: skip
        conn.execute("DROP TABLE pgbd_bench_not_ours_toast")
    assert leftovers(db) == ([], 1)
    strangers_intact(db, oid)


@pytest.mark.parametrize("major", [17, 18])
def test_toast_sweeps_the_threshold(major: int, request: pytest.FixtureRequest,
                                    new_db: NewDb, tmp_path: Path) -> None:  # fmt: skip
    db = new_db(request.getfixturevalue(f"pg{major}"))
    oid = strangers(db)
    result = run("bench", "toast", "-d", db, "--lengths", "500,4000", "--rows", "200",
                 "--plot", str(tmp_path), "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    storages = {r["storage"] for r in doc["rows"]}
    if major == 17:
        assert storages == {"EXTENDED pglz", "EXTENDED lz4", "EXTERNAL"}
        assert doc["server"]["lz4"] is True
    else:
        assert storages == {"EXTENDED pglz", "EXTERNAL"}
        assert doc["server"]["lz4"] is False
        assert any("without lz4" in n for n in doc["notes"])
    by = {(r["length"], r["storage"]): r for r in doc["rows"]}
    assert by[(500, "EXTENDED pglz")]["compressed_share"] == 0  # under the threshold
    assert by[(4000, "EXTENDED pglz")]["compressed_share"] == 1  # text compresses
    assert by[(4000, "EXTENDED pglz")]["stored_ratio"] < 0.7
    assert by[(4000, "EXTERNAL")]["compressed_share"] == 0
    assert by[(4000, "EXTERNAL")]["stored_ratio"] >= 1
    assert by[(4000, "EXTERNAL")]["toast_bytes_per_row"] > 3000
    assert by[(4000, "EXTENDED pglz")]["bytes_per_row"] < by[(4000, "EXTERNAL")]["bytes_per_row"]
    # one access of an inline value: the index and the heap; of a TOASTed one, more
    assert by[(4000, "EXTERNAL")]["buffers_per_access"] > by[(500, "EXTERNAL")][
        "buffers_per_access"]  # fmt: skip
    for r in doc["rows"]:
        assert r["buffers_per_access"] > 0 and r["insert_mb_per_s"] > 0
        assert r["substring_rows_per_s"] > 0
        assert r["bytes_per_row"] == pytest.approx(
            r["heap_bytes_per_row"] + r["toast_bytes_per_row"]
        )
    assert (tmp_path / "bench-toast.svg").stat().st_size > 0
    assert leftovers(db) == ([], 1)
    strangers_intact(db, oid)


def test_toast_cleans_up_after_a_failure(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg17)

    def broken(*args: object) -> object:
        raise DatabaseError("measurement failed")

    monkeypatch.setattr(toast_bench, "_measure", broken)
    with server(db, 17, False) as s, pytest.raises(DatabaseError, match="measurement failed"):
        toast_bench.run(s, ToastSpec(lengths=(100,), rows=10))
    assert leftovers(db) == ([], 0)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["read", "--chunk", "0"], "--chunk 0 B is out of range"),
        (["read", "--sizes", "2GiB"], "--sizes 2.0 GiB is out of range"),
        (["read", "--sizes", ","], "--sizes needs one or more"),
        (["read", "--sizes", "12 parsecs"], "is not a size"),
        (["toast", "--lengths", "0"], "--lengths needs one or more lengths from 1"),
    ],
)
def test_bad_options_are_refused_before_any_server_starts(args: list[str], fragment: str) -> None:
    # -d names no server that exists: the options are checked first
    result = run("bench", *args, "-d", "host=/nonexistent port=1")
    assert_one_line_error(result, 2, fragment)


@pytest.mark.pg  # starts a server of its own
def test_read_on_the_embedded_default_server_is_durable() -> None:
    result = run("bench", "read", "--sizes", "64KiB", "--repeat", "1", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["server"]["embedded"] is True
    settings = doc["server"]["settings"]
    assert (settings["fsync"], settings["full_page_writes"], settings["synchronous_commit"]) == (
        "on", "on", "on")  # fmt: skip
    assert doc["cache"] == "warm"


@pytest.mark.scale
@pytest.mark.pg  # a server of its own
def test_cold_reads_drop_the_caches() -> None:
    from pgblobdump.bench.server import can_drop_caches

    why = can_drop_caches()
    if why is not None:
        pytest.skip(f"cannot drop caches here: {why}")
    result = run("bench", "read", "--sizes", "64KiB", "--repeat", "1", "--cold", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["cache"] == (
        "cold (OS page cache dropped before each read, server restarted)")  # fmt: skip


class Recorded:
    """A Reporter that keeps every task, totals and progress call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object, object]] = []

    def reporter(self) -> Reporter:
        def keep(kind: str) -> Callable[[Any, Any], None]:
            return lambda a, b: self.calls.append((kind, a, b))

        return Reporter(task=keep("task"), totals=keep("totals"), progress=keep("progress"))

    def of(self, kind: str) -> list[tuple[object, object]]:
        return [(a, b) for k, a, b in self.calls if k == kind]


def test_toast_progress_weighs_each_table_by_its_bytes(pg17: EmbeddedCluster, new_db: NewDb
                                                      ) -> None:  # fmt: skip
    """The long values take most of the time: counted by tables alone, the bar sat at
    24/27 with an ETA of 2 s for most of a minute. The bytes loaded count too."""
    rec = Recorded()
    with server(new_db(pg17), 17, False) as s:
        toast_bench.run(s, ToastSpec(lengths=(100, 1000), rows=10), rec.reporter())
    kinds = 3  # EXTENDED pglz and lz4, EXTERNAL on 17
    assert rec.of("totals") == [(2 * kinds, 10 * 1100 * kinds)]
    assert rec.of("progress") == [(1, 1000), (2, 2000), (3, 3000), (4, 13000), (5, 23000),
                                  (6, 33000)]  # fmt: skip
    done = Figures(3, 2 * kinds, 3000, 33000, 1.0, "tables")
    assert done.fraction is not None and done.fraction < 0.3  # half the tables, 9% the bytes


def test_read_progress_counts_on_across_sizes(pg17: EmbeddedCluster, new_db: NewDb,
                                              tmp_path: Path) -> None:  # fmt: skip
    """One task over every size (it started again from 0 at each size, below a total of
    --repeat), with the bytes each round reads."""
    rec = Recorded()
    spec = read_bench.ReadSpec(sizes=(1000, 3000), chunk=1000, repeat=2, directory=tmp_path)
    with server(new_db(pg17), 17, False) as s:
        read_bench.run(s, spec, rec.reporter())
    per_round = len(read_bench.METHODS) * len(read_bench.MODES)
    assert rec.of("task") == [("reading", 4)]
    assert rec.of("totals") == [(4, 2 * per_round * 4000)]
    assert rec.of("progress") == [(1, 1000 * per_round), (2, 2000 * per_round),
                                  (3, 5000 * per_round), (4, 8000 * per_round)]  # fmt: skip


@pytest.mark.pg  # starts a server of its own
def test_the_embedded_server_starts_and_stops_as_tasks_of_their_own() -> None:
    """Nothing was shown while the durable server started, nor for the seconds its
    shutdown checkpoint took after the last table."""
    rec = Recorded()
    with server(None, 17, False, rec.reporter()):
        assert rec.of("task") == [("starting a PostgreSQL 17 server", 0)]
    assert rec.of("task") == [("starting a PostgreSQL 17 server", 0), ("stopping the server", 0)]
