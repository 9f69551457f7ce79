"""toc summary's table for people: the entries by type sit under the TOC entries' count
(they sat under "archive size", as if they were sizes), and "listed" says by what."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from pgblobdump.cli import cli

DUMP = Path(__file__).parents[1] / "corpus" / "archives" / "pg17-custom-none.dump"


def test_entries_by_type_follow_their_count() -> None:
    r = CliRunner().invoke(cli, ["toc", "summary", str(DUMP)])
    assert r.exit_code == 0, r.output
    fields = [line.split("│")[1].rstrip() for line in r.stdout.splitlines()
              if line.startswith("│")]  # fmt: skip
    at = next(i for i, f in enumerate(fields) if f.strip() == "TOC entries")
    by_type = [f for f in fields if f.startswith("   ")]  # "  TYPE" in its cell
    assert by_type and fields[at + 1 : at + 1 + len(by_type)] == by_type, fields
    assert "in pg_restore -l)" in r.stdout
