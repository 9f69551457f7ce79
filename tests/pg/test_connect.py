"""Server errors as users read them."""

from __future__ import annotations

import psycopg
import pytest

from pgblobdump.pg.connect import translate
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb


def test_a_full_lock_table_says_what_to_raise(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    """'out of shared memory' alone names no cure: the server's hint is kept."""
    db = new_db(pg17)
    with psycopg.connect(db) as conn, pytest.raises(psycopg.errors.OutOfMemory) as caught:
        conn.execute("SELECT count(pg_advisory_xact_lock(g)) FROM generate_series(1, 1000000) g")
    message = str(translate(caught.value, "restoring LOs"))
    assert message.startswith("restoring LOs: out of shared memory")
    assert "max_locks_per_transaction" in message
