"""docs/upgrade-with-logical-replication.md run as written: its bash blocks in order, in
one shell, from a 16 server (wal_level logical) to an 18 one, with the application
writing tables and LOs between the steps until the cut-over; the runbook's own check
must find both sides equal, and so must this test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.losets import state

pytestmark = [pytest.mark.scale, pytest.mark.pg]

RUNBOOK = Path(__file__).resolve().parents[2] / "docs" / "upgrade-with-logical-replication.md"


def blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", RUNBOOK.read_text(), re.S)


APP = textwrap.dedent(
    """
    import sys, psycopg
    step = int(sys.argv[1])
    with psycopg.connect(sys.argv[2], autocommit=True) as c:
        if step in (2, 3, 4):  # the application writes until the cut-over (step 5)
            base = 100_000 * step
            c.execute("INSERT INTO docs (body, note) SELECT lo_from_bytea(0, convert_to("
                      "repeat(g::text, g), 'UTF8')), 'step' FROM generate_series(1, 50) g")
            c.execute("SELECT lo_put(body, 0, 'changed') FROM docs WHERE id %% 7 = %s", (step,))
            c.execute("SELECT lo_unlink(body) FROM docs WHERE id = %s", (step * 3,))
            c.execute("DELETE FROM docs WHERE id = %s", (step * 3,))
            c.execute("UPDATE docs SET note = 'updated' WHERE id %% 5 = %s", (step,))
            top, bottom = c.execute("SELECT max(body), min(body) FROM docs").fetchone()
            c.execute(f"COMMENT ON LARGE OBJECT {top} IS 'step {step}'")
            c.execute(f"ALTER LARGE OBJECT {bottom} OWNER TO pgbd_app")
        if step == 4:
            import time
            time.sleep(4)  # a few rounds of sync --watch 1
    """
)


@pytest.fixture
def old() -> Iterator[EmbeddedCluster]:
    settings = {"wal_level": "logical", "max_wal_senders": "10", "max_replication_slots": "10"}
    with EmbeddedCluster(16, settings=settings) as c:
        yield c


def test_the_runbook_as_written(old: EmbeddedCluster, pg18: EmbeddedCluster,
                                tmp_path: Path) -> None:  # fmt: skip
    for c in (old, pg18):
        with psycopg.connect(c.conninfo(), autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS app WITH (FORCE)")
            conn.execute("CREATE DATABASE app")
    with psycopg.connect(pg18.conninfo(), autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS pgbd_app")
    src = old.conninfo("app", tcp=True)
    with psycopg.connect(src, autocommit=True) as conn:
        conn.execute("CREATE ROLE pgbd_app")
        conn.execute("CREATE TABLE docs (id serial PRIMARY KEY, body oid, note text)")
        conn.execute("INSERT INTO docs (body, note) SELECT lo_from_bytea(0, convert_to("
                     "repeat(g::text, g * 10), 'UTF8')), 'first'"
                     " FROM generate_series(1, 500) g")  # fmt: skip
        conn.execute("GRANT SELECT ON LARGE OBJECT"
                     " " + ", ".join(str(r[0]) for r in conn.execute(
                         "SELECT body FROM docs WHERE id % 10 = 0")) + " TO pgbd_app")  # fmt: skip
        conn.execute("SELECT lo_create(0)")  # an LO no row references
    dst = pg18.conninfo("app", tcp=True)
    app = tmp_path / "app.py"
    app.write_text(APP)
    script = ["set -euo pipefail"]
    for i, block in enumerate(blocks(), start=1):
        script.append(block.replace("--watch 60", "--watch 1"))
        script.append(f'"{sys.executable}" "{app}" {i} "$OLD"')
    tools = toolchain.find(18, ("pg_dump", "pg_dumpall", "psql")).bin_dir
    env = {**os.environ, "OLD": src, "NEW": dst,
           "PATH": f"{tools}:{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip
    done = subprocess.run(["/bin/bash", "-c", "\n".join(script)], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    assert done.stdout.strip().endswith("equal"), done.stdout[-2000:]
    assert state(dst) == state(src)
