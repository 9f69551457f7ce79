"""bench read and bench toast against real servers (-d), small sizes: the shape of what
they report, that the figures are sane, and that nothing is left behind."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from pgblobdump.bench import read as read_bench
from pgblobdump.bench.server import server
from pgblobdump.errors import DatabaseError
from pgblobdump.pg.cluster import EmbeddedCluster
from tests.conftest import NewDb
from tests.test_cli import run


def leftovers(db: str) -> tuple[int, int]:
    with psycopg.connect(db) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'pgbd_bench%'")
        los = conn.execute("SELECT count(*) FROM pg_largeobject_metadata")
        return int(tables.fetchone()[0]), int(los.fetchone()[0])  # type: ignore[index]


def test_read_reports_every_method_and_mode(
    pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        stranger = conn.execute("SELECT lo_from_bytea(0, 'not ours')").fetchone()[0]  # type: ignore[index]
    result = run("bench", "read", "-d", db, "--sizes", "300KiB", "--chunk", "64KiB", "--repeat",
                 "2", "--content", "text", "--plot", str(tmp_path), "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    seen = {(r["method"], r["mode"]) for r in doc["rows"]}
    assert seen == {(m, d) for m in read_bench.METHODS for d in read_bench.MODES}
    for r in doc["rows"]:
        assert r["size"] == 300 * 1024 and r["seconds"]["n"] == 2 and r["mb_per_s"] > 0
        assert r["seconds"]["low"] <= r["seconds"]["median"] <= r["seconds"]["high"]
        if r["method"] == "file":
            assert r["vs_file"] == 1.0
    assert doc["server"]["settings"]["fsync"] in ("on", "off")
    assert (tmp_path / "bench-read.png").stat().st_size > 0
    assert leftovers(db) == (0, 1)  # only the LO that was there before
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT lo_get(%s)", (stranger,)).fetchone()[0] == b"not ours"  # type: ignore[index]


def test_read_cleans_up_after_a_failure(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg17)

    def broken(*args: object) -> object:
        def read() -> int:
            return 1  # a short read

        return read

    monkeypatch.setattr(read_bench, "_reader", broken)
    with server(db, 17, False) as s, pytest.raises(DatabaseError, match="read 1 of"):
        read_bench.run(s, read_bench.ReadSpec(sizes=(10_000,), repeat=1))
    assert leftovers(db) == (0, 0)


@pytest.mark.parametrize("major", [17, 18])
def test_toast_sweeps_the_threshold(major: int, request: pytest.FixtureRequest,
                                    new_db: NewDb) -> None:  # fmt: skip
    db = new_db(request.getfixturevalue(f"pg{major}"))
    result = run("bench", "toast", "-d", db, "--lengths", "500,4000", "--rows", "200", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    storages = {r["storage"] for r in doc["rows"]}
    if major == 17:
        assert storages == {"EXTENDED pglz", "EXTENDED lz4", "EXTERNAL"}
    else:
        assert storages == {"EXTENDED pglz", "EXTERNAL"}
        assert any("without lz4" in n for n in doc["notes"])
    by = {(r["length"], r["storage"]): r for r in doc["rows"]}
    assert by[(500, "EXTENDED pglz")]["compressed_share"] == 0  # under the threshold
    assert by[(4000, "EXTENDED pglz")]["compressed_share"] == 1  # text compresses
    assert by[(4000, "EXTERNAL")]["compressed_share"] == 0
    assert by[(4000, "EXTERNAL")]["toast_bytes_per_row"] > 3000
    assert by[(4000, "EXTENDED pglz")]["bytes_per_row"] < by[(4000, "EXTERNAL")]["bytes_per_row"]
    assert all(r["buffers_per_access"] > 0 and r["insert_mb_per_s"] > 0 for r in doc["rows"])
    assert leftovers(db)[0] == 0


def test_read_on_the_embedded_default_server_is_durable() -> None:
    result = run("bench", "read", "--sizes", "64KiB", "--repeat", "1", "--json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["server"]["embedded"] is True
    settings = doc["server"]["settings"]
    assert (settings["fsync"], settings["full_page_writes"], settings["synchronous_commit"]) == (
        "on", "on", "on")  # fmt: skip
    assert doc["cache"] == "warm"


@pytest.mark.slow
def test_cold_reads_drop_the_caches() -> None:
    from pgblobdump.bench.server import can_drop_caches

    why = can_drop_caches()
    if why is not None:
        pytest.skip(f"cannot drop caches here: {why}")
    result = run("bench", "read", "--sizes", "64KiB", "--repeat", "1", "--cold", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["cache"].startswith("cold")
