"""docs/out-and-back.md's step-by-step run as written: its last section's bash blocks in
order, in one shell, on PostgreSQL 17 and SeaweedFS; then every row must read its own
bytes, in the copy (through the manifest's paths) and in the application database after
the column went to object storage and back."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg

from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.servers.seaweed import BUCKET, LocalS3
from tests.conftest import NewDb

DOC = Path(__file__).resolve().parents[2] / "docs" / "out-and-back.md"
ROWS = 30


def blocks() -> list[str]:
    section = DOC.read_text().split("## Out and back, step by step", 1)[1]
    return re.findall(r"```bash\n(.*?)```", section, re.S)


def test_out_and_back_as_written(
    pg17: EmbeddedCluster, new_db: NewDb, local_s3: LocalS3, tmp_path: Path
) -> None:
    app, copy = new_db(pg17), new_db(pg17)
    with psycopg.connect(app, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, tenant text, title text, body oid)")
        conn.execute(
            "INSERT INTO docs SELECT g, 't' || g %% 3, 'doc ' || g,"
            "  lo_from_bytea(0, convert_to(repeat('x', g * 100) || g, 'UTF8'))"
            " FROM generate_series(1, %s) g",
            (ROWS,),
        )
    want = {g: (b"x" * (g * 100) + str(g).encode()) for g in range(1, ROWS + 1)}
    tools = toolchain.find(17, ("psql",)).bin_dir
    env = {**os.environ, **local_s3.env(), "APP": app, "COPY": copy, "BUCKET": BUCKET,
           "PATH": f"{tools}:{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    script = "\n".join(["set -euo pipefail", *blocks()])
    done = subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    out = done.stdout.strip().splitlines()
    counts = [line for line in out if line.isdigit()]
    assert counts[-3:] == [str(ROWS), "0", str(ROWS)], done.stdout[-3000:]  # files, LOs, LOs
    with psycopg.connect(copy) as conn:
        got = dict(conn.execute("SELECT path, lo_get(blob) FROM files").fetchall())
    assert {p: bytes(b) for p, b in got.items()} == {
        f"t{g % 3}/doc {g}.txt": data for g, data in want.items()
    }
    with psycopg.connect(app) as conn:
        rows = conn.execute("SELECT id, lo_get(body) FROM docs ORDER BY id").fetchall()
    assert {i: bytes(b) for i, b in rows} == want
