"""migrate through the command line: JSON on stdout, one-line errors, exit codes."""

from __future__ import annotations

import io
import json
import re
from datetime import datetime

import psycopg
import pytest
from rich.console import Console

from pgblobdump.cli import output
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb


def test_plan_and_run_as_json(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE files (id int PRIMARY KEY, data oid NOT NULL)")
        conn.execute(
            "INSERT INTO files SELECT g, lo_from_bytea(0, decode(repeat(md5(g::text), 100),"
            " 'hex')) FROM generate_series(1, 20) g"
        )
    plan = run("migrate", "plan", "-d", db, "--json")
    assert plan.exit_code == 0, plan.stderr
    cols = json.loads(plan.stdout)["columns"]
    assert [c["column"] for c in cols] == ["public.files.data"]
    assert cols[0]["stats"]["present"] == 20 and cols[0]["stats"]["total_bytes"] == 20 * 1600
    done = run("migrate", "run", "-d", db, "files.data", "--unlink", "--json")
    assert done.exit_code == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["phase"] == "done" and result["unlinked"] == 20 and result["rows"] == 20
    # Before: "dropped the old column data_lo", a name the user never gave it.
    assert "dropped column public.files.data_lo (the old data, renamed at the switch)\n" in (
        done.stderr
    ), done.stderr
    status = run("migrate", "status", "-d", db, "--json")
    (raw,) = json.loads(status.stdout)
    assert raw["phase"] == "done" and raw["rows_done"] == 20
    assert re.fullmatch(r"\S+T\d\d:\d\d:\d\d\.\d+\S*", raw["updated"])  # raw: to the microsecond
    # For people: words for headings, timestamps to the second.
    shown = run("migrate", "status", "-d", db)
    assert shown.exit_code == 0, shown.stderr
    assert "20 of 20" in shown.stdout and "public.files.data" in shown.stdout
    assert "table_name" not in shown.stdout and "rows_done" not in shown.stdout
    assert "_" not in "".join(line for line in shown.stdout.splitlines()[:4])
    updated = datetime.fromisoformat(raw["updated"]).astimezone()
    assert updated.strftime("%Y-%m-%d %H:%M:%S") in shown.stdout
    assert updated.strftime("%H:%M:%S.%f") not in shown.stdout


def test_bad_input_gets_one_line_errors(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, b oid, s text, j jsonb)")
        conn.execute("INSERT INTO t VALUES (1, NULL, 'inline text', NULL)")
    assert_one_line_error(run("migrate", "run", "-d", db, "t.j"), 2, "--to bytea takes oid")
    # A text column may hold OIDs: what does not name one is refused by example.
    assert_one_line_error(run("migrate", "run", "-d", db, "t.s"), 4, "'inline text'")
    as_text = run("migrate", "run", "-d", db, "t.b", "--to", "text")
    assert_one_line_error(as_text, 2, "--to text takes")
    assert_one_line_error(run("migrate", "run", "-d", db, "nope.b"), 8, "no table nope")
    assert_one_line_error(run("migrate", "run", "-d", db, "t"), 2, "[schema.]table.column")
    assert_one_line_error(run("migrate", "abort", "-d", db, "t.b"), 8, "no migration")


def test_plan_on_a_terminal_100_columns_wide_cuts_no_name(
    pg17: EmbeddedCluster, new_db: NewDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 100 columns each column's name on a line of its own (rich cut it to ``publ…``)."""
    db = new_db(pg17)
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA accounting")
        conn.execute("CREATE TABLE accounting.invoice_attachments (id int PRIMARY KEY,"
                     " scan_oid oid)")  # fmt: skip
        conn.execute("INSERT INTO accounting.invoice_attachments"
                     " SELECT g, lo_from_bytea(0, 'a') FROM generate_series(1, 3) g")  # fmt: skip
    out = io.StringIO()
    terminal = Console(file=out, width=100, color_system=None, force_terminal=True)
    monkeypatch.setattr(output, "stdout_console", lambda: terminal)
    plan = run("migrate", "plan", "-d", db)
    assert plan.exit_code == 0, plan.stderr
    lines = out.getvalue().splitlines()
    assert all(len(line.rstrip()) <= 100 for line in lines), lines
    assert "…" not in out.getvalue()
    name = "accounting.invoice_attachments.scan_oid  (type oid; LOs? yes"
    assert any(line.startswith(name) for line in lines), lines
