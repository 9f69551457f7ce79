"""The command line as a user meets it: real servers, bad input gives one-line errors."""

from __future__ import annotations

import json

import psycopg
import pytest

from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb


def test_doctor_finds_16_17_18() -> None:
    result = run("doctor", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    majors = {i["major"] for i in report["installs"] if i["server"] and i["client"]}
    assert {16, 17, 18} <= majors
    assert report["missing"] == []


def test_generate_reports_rates_as_json(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    result = run(
        "generate",
        "-d",
        db,
        "-n",
        "2k",
        "--size",
        "4KiB",
        "--table",
        "docs",
        "--owners",
        "2",
        "--grants",
        "0.1",
        "--comments",
        "0.01",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["count"] == 2000 and out["total_bytes"] == 2000 * 4096
    assert out["grants"] == 200 and out["comments"] == 20
    assert out["table"] == "docs" and len(out["owners"]) == 2


def test_connection_options_like_psql(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    info = pg16.status()
    name = db.split("dbname=")[1]
    result = run(
        "generate",
        "-h",
        str(info.socket_dir),
        "-p",
        str(info.port),
        "-U",
        "postgres",
        "-d",
        name,
        "-n",
        "10",
        "--json",
    )
    assert result.exit_code == 0, result.stderr
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (10,)


def test_pg_environment_variables(
    pg16: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = new_db(pg16)
    info = pg16.status()
    monkeypatch.setenv("PGHOST", str(info.socket_dir))
    monkeypatch.setenv("PGPORT", str(info.port))
    monkeypatch.setenv("PGUSER", "postgres")
    monkeypatch.setenv("PGDATABASE", db.split("dbname=")[1])
    assert run("generate", "-n", "5", "--json").exit_code == 0
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (5,)


def test_bad_connection_string() -> None:
    assert_one_line_error(
        run("generate", "-d", "hostx=nowhere", "-n", "1"), 2, "invalid connection string"
    )


def test_unreachable_server() -> None:
    assert_one_line_error(
        run("generate", "-h", "127.0.0.1", "-p", "1", "-n", "1"), 3, "cannot connect to database"
    )


def test_embedded_excludes_connection_options() -> None:
    assert_one_line_error(
        run("generate", "--embedded", "16", "-d", "x", "-n", "1"), 2, "give it no -d"
    )


@pytest.mark.pg  # starts named clusters of its own
def test_server_refuses_bad_names_and_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile
    from pathlib import Path

    home = Path(tempfile.mkdtemp(prefix="pgbd-home-"))
    monkeypatch.setenv("PGBLOBDUMP_HOME", str(home))
    assert_one_line_error(run("server", "start", "--name", "../escape"), 2, "--name")
    assert_one_line_error(run("server", "start", "--port", "99999"), 2, "not a TCP port")
    assert_one_line_error(
        run("server", "start", "--datadir", "/proc/nope/data"), 11, "cannot create"
    )
    assert list(home.iterdir()) == []
    home.rmdir()


def test_server_that_cannot_start_says_why_and_leaves_nothing(
    pg16: EmbeddedCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile
    from pathlib import Path

    home = Path(tempfile.mkdtemp(prefix="pgbd-home-"))
    home.chmod(0o755)
    monkeypatch.setenv("PGBLOBDUMP_HOME", str(home))
    taken = str(pg16.status().port)
    result = run("server", "start", "--name", "clash", "--port", taken)
    assert_one_line_error(result, 6, "could not")
    assert "removed the new cluster" in result.stderr
    assert list(home.iterdir()) == []
    home.rmdir()


def test_unknown_major() -> None:
    assert_one_line_error(
        run("generate", "--embedded", "99", "-n", "1"), 2, "unknown PostgreSQL major version 99"
    )
    assert_one_line_error(run("server", "start", "--major", "99"), 2, "unknown PostgreSQL major")


@pytest.mark.parametrize(
    ("count", "fragment"),
    [
        ("-5", "not a whole number"),
        ("5G", "more LOs than a database can hold"),
        ("many", "not a whole number"),
    ],
)
def test_negative_or_absurd_count(count: str, fragment: str) -> None:
    assert_one_line_error(run("generate", "-d", "dbname=x", "-n", count), 2, fragment)


def test_bad_size() -> None:
    assert_one_line_error(
        run("generate", "-d", "dbname=x", "--size", "4XB"), 2, "--size '4XB' is not a size"
    )


def test_existing_owning_table(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (x int)")
    assert_one_line_error(
        run("generate", "-d", db, "--table", "docs", "-n", "5"), 4, "table docs already exists"
    )
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone() == (0,)


def test_existing_oid(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg16)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT lo_create(3000000005)")
    assert_one_line_error(
        run("generate", "-d", db, "--start-oid", "3000000000", "-n", "10"),
        4,
        "already exist in OIDs 3000000000..3000000009",
    )


@pytest.mark.pg  # starts named clusters of its own
def test_server_start_status_stop(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile
    from pathlib import Path

    home = Path(tempfile.mkdtemp(prefix="pgbd-home-"))
    home.chmod(0o755)
    monkeypatch.setenv("PGBLOBDUMP_HOME", str(home))
    started = run("server", "start", "--major", "17")
    assert started.exit_code == 0, started.stderr
    conninfo = started.stdout.strip()
    try:
        with psycopg.connect(conninfo) as conn:
            assert conn.execute("SHOW server_version_num").fetchone()[0].startswith("17")  # type: ignore[index]
        status = json.loads(run("server", "status", "--json").stdout)
        assert [(s["name"], s["version"][:2], s["running"]) for s in status] == [
            ("pg17", "17", True)
        ]
        # Asking for another major than the cluster's is an error, not a silent start.
        assert_one_line_error(
            run("server", "start", "--major", "16", "--name", "pg17"), 2, "not 16"
        )
    finally:
        stopped = run("server", "stop", "--major", "17", "--remove")
    assert stopped.exit_code == 0, stopped.stderr
    assert not (home / "pg17").exists()
    assert_one_line_error(run("server", "stop", "--major", "17"), 8, "no cluster in")
    home.rmdir()


def test_generate_csv_has_raw_values(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    import csv
    import io

    db = new_db(pg16)
    result = run("generate", "-d", db, "-n", "1500", "--size", "2KiB", "--csv")
    assert result.exit_code == 0, result.stderr
    (row,) = list(csv.DictReader(io.StringIO(result.stdout)))
    assert (row["count"], row["total_bytes"]) == ("1500", str(1500 * 2048))
    assert int(row["last_oid"]) - int(row["first_oid"]) == 1499


@pytest.mark.parametrize("flag", ["-d", "-h", "-p", "-U"])
def test_an_empty_connection_option_is_a_usage_error(flag: str) -> None:
    """``-d ""`` (what ``$(failed command)`` gives) must not mean libpq's default server."""
    assert_one_line_error(run("generate", flag, "", "-n", "5"), 2, f"{flag} is empty")


@pytest.mark.parametrize(
    "dsn",
    [
        "user=u password=s3cr3t bogus",
        "host=127.0.0.1 port=1 user=u password=s3cr3t",
        "postgresql://u:s3cr3t@127.0.0.1:1/db",
        "host=127.0.0.1 port=1 password='s3cr3t with space'",
    ],
)
def test_no_password_in_any_message(dsn: str) -> None:
    result = run("generate", "-d", dsn, "-n", "1")
    assert result.exit_code in (2, 3)
    assert "s3cr3t" not in result.output + result.stderr


def test_usage_errors_are_one_line() -> None:
    assert_one_line_error(run("generate", "--bogus"), 2, "No such option '--bogus'")
    assert_one_line_error(run("toc", "summary"), 2, "Missing argument 'ARCHIVE'")


def test_counts_and_sizes_are_quoted_as_given() -> None:
    assert_one_line_error(
        run("generate", "-d", "dbname=x", "-n", "99999999999999999999999999"),
        2,
        "count 99,999,999,999,999,999,999,999,999 is more LOs",
    )
    assert_one_line_error(
        run("generate", "-d", "dbname=x", "--size", "-5"), 2, "--size '-5' is negative"
    )
    assert_one_line_error(
        run("generate", "-d", "dbname=x", "--size", "1KiB-x"), 2, "--size '1KiB-x' is not a"
    )
