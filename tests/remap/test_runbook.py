"""docs/remap.md's merge of two databases run as written: its bash blocks in order, in
one shell, with two tenants whose LOs have the same OIDs; then each tenant's rows must
read its own bytes, and the first tenant's LOs must be as they were."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg

from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb
from tests.losets import state

DOC = Path(__file__).resolve().parents[2] / "docs" / "remap.md"


def blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", DOC.read_text(), re.S)


def _tenant(db: str, schema: str, fill: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            f"CREATE SCHEMA {schema};"
            f" CREATE TABLE {schema}.docs (id serial PRIMARY KEY, body oid, title text);"
            f" INSERT INTO {schema}.docs (body, title) SELECT lo_from_bytea(400000 + g,"
            f" convert_to('{fill}' || g, 'UTF8')), 'doc ' || g FROM generate_series(1, 40) g"
        )


def test_the_merge_as_written(pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path) -> None:
    a, b, merged = new_db(pg17), new_db(pg17), new_db(pg17)
    _tenant(a, "ta", "A")
    _tenant(b, "tb", "B")
    a_los = state(a)
    tools = toolchain.find(17, ("psql",)).bin_dir
    env = {**os.environ, "TENANT_A": a, "TENANT_B": b, "MERGED": merged,
           "PATH": f"{tools}:{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    script = "\n".join(["set -euo pipefail", *blocks()])
    done = subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "40"  # B's rows at remapped LOs
    assert (tmp_path / "b-map.csv").read_text().count("\n") == 41
    with psycopg.connect(merged) as conn:
        for schema, fill in (("ta", "A"), ("tb", "B")):
            rows = conn.execute(f"SELECT id, lo_get(body) FROM {schema}.docs ORDER BY id")
            assert [(i, bytes(d)) for i, d in rows] == [
                (g, f"{fill}{g}".encode()) for g in range(1, 41)
            ]
    assert {o: v for o, v in state(merged).items() if o in a_los} == a_los
