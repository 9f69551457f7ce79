"""Tables on a terminal too narrow for them (issue 41's walk at 100 columns): migrate
plan's and bench toast's were cut (``publ…``, ``EXTEND…``, headings alike); now nothing
is cut at 100 columns, and at 200 they are drawn as before."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from pgblobdump.bench.toast import ToastResult, ToastRow
from pgblobdump.cli import output
from pgblobdump.cli.bench import toast_table
from pgblobdump.cli.migrate import plan_narrow_table, plan_table
from pgblobdump.cli.output import Format, emit, show_table
from pgblobdump.migrate.advice import Storage
from pgblobdump.migrate.planning import ColumnPlan, Plan
from pgblobdump.migrate.reach.access import Widening
from pgblobdump.migrate.refs import RefStats
from pgblobdump.report import Column, Table
from pgblobdump.report.narrow import legend, stacked
from pgblobdump.report.stream import fit, write_aligned

NAMES = ["public.task_comment.text", "public.documents.lo",
         "accounting.invoice_attachments.scan_oid"]  # fmt: skip


def _stats(rows: int, present: int, total: int, largest: int) -> RefStats:
    return RefStats(rows, 0, present, present, 3, (1,), 0, (), 2, total, largest, (), 1)


def _plan() -> Plan:
    cols = [
        ColumnPlan(NAMES[0], "text", False, 100, 40, ["id"],
                   _stats(12_000, 11_000, 3_400_000_000, 1_300_000_000),
                   Widening(5, (1,), ("bob",)),
                   storage=Storage("EXTENDED", "lz4", "compresses 3.1x"),
                   space_needed=5_000_000_000),
        ColumnPlan(NAMES[1], "lo", True, 100, 100, ["id"],
                   _stats(1_234_567, 1_200_000, 45_000_000_000, 900_000_000),
                   storage=Storage("EXTERNAL", None, "incompressible"),
                   space_needed=46_000_000_000),
        ColumnPlan(NAMES[2], "oid", True, 100, 100, ["id"], _stats(50, 50, 5_000, 400)),
    ]  # fmt: skip
    return Plan("mydb", "17.2", True, 1_300_000, 12, cols)


def _toast() -> ToastResult:
    storages = ("EXTENDED pglz", "EXTENDED lz4", "EXTERNAL")
    rows = [ToastRow(n, s, 140_123.0, 800.0, 139_323.0, 0.5, 600.0, 0.45, 123.4, 45_678, 3)
            for n in (500, 128_000) for s in storages]  # fmt: skip
    return ToastResult(rows, {"embedded": True, "settings": {"fsync": "on"}})


def _drawn(table: Table, width: int, narrow: Table | None = None) -> list[str]:
    out = io.StringIO()
    show_table(
        Console(file=out, width=width, color_system=None, force_terminal=True), table, narrow
    )
    return [line.rstrip() for line in out.getvalue().splitlines()]


def _plan_drawn(width: int) -> list[str]:
    table = plan_table(_plan())
    return _drawn(table, width, plan_narrow_table(table))


def test_migrate_plan_fits_100_columns_without_a_cut() -> None:
    lines = _plan_drawn(100)
    text = "\n".join(lines)
    assert all(len(line) <= 100 for line in lines), text
    assert "…" not in text
    for name in NAMES:  # each name whole, on a line of its own with its type and storage
        assert any(line.startswith(f"{name}  (type ") for line in lines), text
    assert f"{NAMES[0]}  (type text; LOs? no (40/100 sampled); storage EXTENDED lz4)" in lines
    for word in ["rows", "LOs", "dangling", "bytes", "largest", ">1GB", "shared", "widens",
                 "space", "needed"]:  # fmt: skip
        assert re.search(rf"(^| ){re.escape(word)}( |$)", text, re.M), word
    # the figures under their name, right-aligned under their headings
    at = lines.index(next(line for line in lines if line.startswith(NAMES[1])))
    assert lines[at + 1].split() == ["1,234,567", "1,200,000", "3", "41.9", "GiB", "858.3",
                                     "MiB", "1", "2", "42.8", "GiB"]  # fmt: skip
    assert lines[0].startswith("oid/lo columns of mydb")


def test_migrate_plan_at_200_columns_is_the_table_it_was() -> None:
    lines = _plan_drawn(200)
    text = "\n".join(lines)
    assert all(len(line) <= 200 for line in lines) and "…" not in text
    assert re.search(r"┃ column +┃ type ┃ LOs\? +┃ +rows ┃", text), text
    assert "┃ space needed ┃" in text
    for name in NAMES:
        assert f"│ {name} " in text


def test_bench_toast_fits_100_columns_without_a_cut() -> None:
    lines = _drawn(toast_table(_toast(), "text"), 100)
    text = "\n".join(lines)
    assert all(len(line) <= 100 for line in lines), text
    assert "…" not in text
    for storage in ("EXTENDED pglz", "EXTENDED lz4", "EXTERNAL"):  # whole, on one line
        assert sum(f" {storage} " in line for line in lines) == 2, text
    rows = [line for line in lines if line.lstrip().startswith(("500 ", "128,000 "))]
    assert len(rows) == 6, text
    for row in rows:  # every figure whole, after the storage
        assert row.split()[-8:] == ["140,123", "800", "139,323", "50%", "0.45", "123.4",
                                    "45,678", "3"], row  # fmt: skip
    for word in ["bytes/", "heap/", "toast/", "stored/", "length", "insert", "MB/s",
                 "substring", "rows/s", "buffers/", "access", "compr."]:  # fmt: skip
        assert re.search(rf"(^| ){re.escape(word)}( |$)", text, re.M), word
    assert "compr.: compressed" in lines  # the legend of the one abbreviation


def test_bench_toast_at_200_columns_is_the_table_it_was() -> None:
    text = "\n".join(_drawn(toast_table(_toast(), "text"), 200))
    assert "┃ storage       ┃ bytes/row ┃ heap/row ┃" in text
    assert "┃ substring rows/s ┃ buffers/access ┃" in text
    assert "…" not in text and "compr." not in text


@pytest.mark.parametrize("width", [100, 200])
def test_emit_draws_the_narrow_table_where_the_wide_one_does_not_fit(
    monkeypatch: pytest.MonkeyPatch, width: int
) -> None:
    """The command's path: ``emit`` on a terminal ``width`` columns wide."""
    out = io.StringIO()
    terminal = Console(file=out, width=width, color_system=None, force_terminal=True)
    monkeypatch.setattr(output, "stdout_console", lambda: terminal)
    table = plan_table(_plan())
    emit(table, Format.TABLE, narrow=plan_narrow_table(table))
    assert ("┃ column" in out.getvalue()) is (width == 200)
    assert (f"\n{NAMES[2]}  (type oid; LOs? yes)\n" in out.getvalue()) is (width == 100)


def test_stacked_and_legend_are_plain_text() -> None:
    table = Table([Column("name"), Column("n", numeric=True, short="count of things"),
                   Column("what", short="w")],
                  [{"name": "a name longer than the rest", "n": 1234, "what": "x"}])  # fmt: skip
    assert stacked(table, 40) == [
        "name",
        "   count",
        "      of",
        "  things  w",  # headings wrapped at words, bottom-aligned, a number's to the right
        "  ------  -",
        "a name longer than the rest",
        "   1,234  x",
    ]
    assert stacked(table, 5) is None
    assert legend(table) == "count of things: n, w: what"


def test_aligned_listing_within_a_width() -> None:
    """``write_aligned`` at a width: the widest text column narrowed (a narrower one kept
    whole), numbers never cut, a later wider cell cut too; no width: as before."""
    rows = [{"oid": 1, "owner": "alice", "acl": "x" * 60, "comment": "short"},
            {"oid": 123456, "owner": "bob", "acl": "", "comment": "y" * 40}]  # fmt: skip
    cols = ["oid", "owner", "acl", "comment"]
    out = io.StringIO()
    cut = write_aligned(out, cols, iter(rows), numeric=["oid"], width=50)
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 50 for line in lines), lines
    assert lines[2].startswith("     1  alice  xxx") and lines[2].endswith("…  short")
    assert lines[3].startswith("123456  bob") and lines[3].endswith("…")
    assert cut == 2
    whole = io.StringIO()
    assert write_aligned(whole, cols, iter(rows), numeric=["oid"]) == 0
    assert "x" * 60 in whole.getvalue() and "y" * 40 in whole.getvalue()
    assert fit([6, 5, 60, 40], [True, False, False, False], [3, 5, 3, 7], 44) == [6, 5, 16, 16]
    assert fit([6, 5, 9], [True, False, False], [3, 5, 3], 44) == [6, 5, 9]
