"""benchmarks/RESULTS.md opens with one table, a row per target: checked against the scripts
it names and the commits it cites, so a renamed script, a dropped option or a mistyped commit
fails here. No server, no benchmark run: the scripts are read, not started."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "RESULTS.md"

HEADING = "## Today's figures, one row per target"
COLUMNS = ["target (what, and the bar)", "anchor", "today's figure", "measured on", "status"]
COLUMNS += ["command"]
STATUSES = {"met", "missed", "not measured"}

HARNESS = ".venv/bin/pgblobdump compare"
"""The one command of the package that is itself a benchmark (compare's harness); its options
are the click command's."""

NOT_TARGETS = {
    "scratch.py": "a helper module the scripts import (say(), scratch databases); measures nothing",
    "s3_clients.py": "chose the S3 client (obstore against boto3, issue 17); no target",
    "storage_seeds.py": "checks the seed articles' claims (holds / does not hold); no target",
    "migrate_access_cost.py": "what migrate's access check costs (issue 25, item 1); no bar set",
}
"""benchmarks/*.py that need no row, each with the reason."""

SCRIPT = re.compile(r"benchmarks/([\w-]+\.py)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
"""A commit as this file cites one: 7 to 40 hex digits, at least one a letter (so a count such
as 1000000 is not taken for one)."""


@dataclass(frozen=True)
class Row:
    """One row of the table, its cells by column name."""

    line: int
    cells: dict[str, str]

    @property
    def command(self) -> str:
        return self.cells["command"]

    def scripts(self) -> list[str]:
        return SCRIPT.findall(self.command)


def cells(line: str) -> list[str]:
    """The cells of a Markdown table line; ``\\|`` is a pipe inside a cell."""
    inner = line.strip()
    assert inner.startswith("|") and inner.endswith("|"), line
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner[1:-1])]


def table(text: str) -> list[Row]:
    """The rows of the table under HEADING; AssertionError if it is not there or malformed."""
    lines = text.splitlines()
    assert HEADING in lines, f"RESULTS.md has no {HEADING!r}"
    at = lines.index(HEADING) + 1
    while not lines[at].startswith("|"):
        assert not lines[at].startswith("#"), f"no table under {HEADING!r}"
        at += 1
    assert cells(lines[at]) == COLUMNS, f"line {at + 1}: columns {cells(lines[at])}"
    assert set(cells(lines[at + 1])) <= {"---"}, f"line {at + 2}: not the separator"
    rows = []
    for n in range(at + 2, len(lines)):
        if not lines[n].startswith("|"):
            break
        got = cells(lines[n])
        assert len(got) == len(COLUMNS), f"line {n + 1}: {len(got)} cells, not {len(COLUMNS)}"
        rows.append(Row(n + 1, dict(zip(COLUMNS, got, strict=True))))
    return rows


def harness_options() -> set[str]:
    """Every option ``pgblobdump compare`` takes, as click knows it."""
    from pgblobdump.cli.compare import compare

    return {o for p in compare.params for o in [*p.opts, *p.secondary_opts]}


def problems(rows: list[Row], bench: Path) -> list[str]:
    """What is wrong with the rows against the scripts in ``bench``, one line each."""
    out = []
    for row in rows:
        where = f"line {row.line}"
        status = row.cells["status"]
        if status not in STATUSES:
            out.append(f"{where}: status {status!r} is not one of {sorted(STATUSES)}")
        if not row.cells["target (what, and the bar)"]:
            out.append(f"{where}: no target")
        if status != "not measured" and not row.cells["today's figure"]:
            out.append(f"{where}: {status} with no figure")
        if status != "not measured" and not COMMIT.search(row.cells["measured on"]):
            out.append(f"{where}: {status} with no commit it was measured on or recorded in")
        scripts = row.scripts()
        harness = row.command.startswith(f"`{HARNESS} ")
        if status != "not measured" and not scripts and not harness:
            out.append(f"{where}: the command names no script in benchmarks/: {row.command}")
        for name in scripts:
            path = bench / name
            if not path.is_file():
                out.append(f"{where}: benchmarks/{name} does not exist")
                continue
            source = path.read_text()
            tail = row.command.split(f"benchmarks/{name}", 1)[1]
            for flag in FLAG.findall(tail):
                if f'"{flag}"' not in source and f"'{flag}'" not in source:
                    out.append(f"{where}: benchmarks/{name} has no option {flag}")
        if harness:
            for flag in sorted(set(FLAG.findall(row.command)) - harness_options()):
                out.append(f"{where}: pgblobdump compare has no option {flag}")
    return out


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return table(RESULTS.read_text())


def test_every_row_names_a_script_that_is_there_with_its_options_and_a_known_status(
    rows: list[Row],
) -> None:
    assert rows
    assert problems(rows, BENCH) == []


def test_a_row_naming_a_missing_script_or_option_fails() -> None:
    """The check above catches what it is for: the table with one script renamed, one option
    dropped and one status mistyped."""
    text = RESULTS.read_text()
    real = table(text)
    first = next(r for r in real if r.scripts())
    line = text.splitlines()[first.line - 1]
    name = first.scripts()[0]
    broken = line.replace(f"benchmarks/{name}", "benchmarks/no_such_bench.py", 1)
    broken = broken.replace(f"| {first.cells['status']} |", "| met, mostly |", 1)
    got = problems(table(text.replace(line, broken, 1)), BENCH)
    assert f"line {first.line}: benchmarks/no_such_bench.py does not exist" in got
    assert any(p.startswith(f"line {first.line}: status 'met, mostly'") for p in got)
    assert line.endswith("` |")
    flagged = line[: -len("` |")] + " --no-such-option` |"
    got = problems(table(text.replace(line, flagged, 1)), BENCH)
    assert got == [f"line {first.line}: benchmarks/{name} has no option --no-such-option"]


def test_every_script_that_measures_a_target_has_a_row(rows: list[Row]) -> None:
    named = {name for row in rows for name in row.scripts()}
    scripts = {p.name for p in BENCH.glob("*.py")}
    assert scripts - named - set(NOT_TARGETS) == set(), "scripts with no row in the table"
    assert set(NOT_TARGETS) <= scripts, "NOT_TARGETS names a script that is gone"
    assert named & set(NOT_TARGETS) == set(), "a script both in the table and in NOT_TARGETS"


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_every_commit_the_table_names_is_in_the_history(rows: list[Row]) -> None:
    named = sorted({c for row in rows for cell in row.cells.values() for c in COMMIT.findall(cell)})
    assert named
    missing = [
        c
        for c in named
        if subprocess.run(
            ["git", "cat-file", "-e", f"{c}^{{commit}}"], cwd=ROOT, capture_output=True
        ).returncode
        != 0
    ]
    assert missing == []
