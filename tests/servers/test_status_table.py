"""server status's table on a terminal: a conninfo is there to be copied, so at 100
columns it wraps onto more lines instead of being cut with an ellipsis."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from pgblobdump.cli.output import rich_table
from pgblobdump.cli.server import status_table
from pgblobdump.servers.cluster import ClusterInfo

BASE = Path("/var/tmp/pgblobdump-root")


@pytest.mark.parametrize("width", [100, 200])
def test_conninfo_and_data_directory_are_never_cut(width: int) -> None:
    info = ClusterInfo(17, "17.10", BASE / "pg17", 50565, BASE / "pg17", True)
    out = io.StringIO()
    Console(file=out, width=width).print(rich_table(status_table([info])))
    text = out.getvalue()
    assert "…" not in text
    rows = [line.split("│")[1:-1] for line in text.splitlines() if line.startswith("│")]
    conninfo = " ".join(r[4].strip() for r in rows if r[4].strip())
    datadir = "".join(r[5].strip() for r in rows)
    assert conninfo.replace(" ", "") == info.conninfo().replace(" ", "")
    assert datadir == str(info.datadir)
