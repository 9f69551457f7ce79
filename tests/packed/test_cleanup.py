"""restore's writer thread and its clean-up, against a real server and real signals: a
Ctrl-C that lands while the main thread waits for a batch must not make the clean-up
forget that batch (it would close the connection under the writer thread)."""

from __future__ import annotations

import signal
import threading
import time

import psycopg
import pytest

from pgblobdump.packed.restore.request import RestoreRequest
from pgblobdump.packed.restore.restorer import Restorer, _in_thread
from pgblobdump.pg.ledger import Ledger
from pgblobdump.report.reporter import QUIET
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.conftest import NewDb


def test_a_batch_interrupted_while_waited_for_is_stopped_before_clean_up(
    pg16: EmbeddedCluster, new_db: NewDb
) -> None:
    db = new_db(pg16)
    with psycopg.connect(db, autocommit=True) as conn:
        r = Restorer(conn, Ledger(db, "restore"), RestoreRequest(), QUIET)

        def batch() -> None:  # a batch the server takes long over
            conn.execute("SELECT pg_sleep(30)")

        job = _in_thread(batch)
        r._job = job
        ctrl_c = threading.Timer(
            0.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT)
        )
        ctrl_c.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            r.wait()  # Ctrl-C lands here, the batch still running
        ctrl_c.join()
        assert not job.done()
        assert r.stop() is True  # cancelled, and waited for
        assert job.done() and isinstance(job.exception(), psycopg.errors.QueryCanceled)
        assert time.monotonic() - t0 < 10
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection is free again
