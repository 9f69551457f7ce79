"""A binary ``COPY ... TO STDOUT`` read at libpq's level: each row's raw bytes.

The server sends one CopyData message per row; psycopg's ``copy.rows()`` runs a generator,
a wait and a parse per message (about 10 us: a second per 100,000 LOs). Here each message
is taken straight from libpq (``PQgetCopyData``, no copy: a memoryview over libpq's
buffer) and the caller unpacks its fields with a precompiled ``struct``. psycopg still
starts the COPY and reads its final result, so errors (the server's, a lost connection)
are raised exactly as before, and an interrupt cancels the COPY as psycopg does.

Binary COPY layout (PostgreSQL's copyto.c, ``CopySendEndOfRow``): the first message starts
with the 19-byte file header, each row is ``int16`` field count then per field ``int32``
length (-1: NULL) and the bytes, and the last message is the ``int16`` -1 trailer.
"""

from __future__ import annotations

import select
from collections.abc import Generator

import psycopg
from psycopg import sql

HEADER_LEN = 19
"""``PGCOPY\\n\\377\\r\\n\\0``, flags (int32), header extension length (int32, 0)."""
TRAILER = b"\xff\xff"
WAIT = 1.0
"""Seconds per wait for the socket: Ctrl-C is seen at least that often."""


BATCH_BYTES = 1 << 20
"""A batch of rows is handed on once it holds this many bytes (or libpq has no more)."""


def rows(conn: psycopg.Connection, query: sql.Composable) -> Generator[memoryview, None, None]:
    """Each row of ``COPY (query) TO STDOUT (FORMAT binary)``, raw (field count first)."""
    for batch in batches(conn, query):
        yield from batch


def batches(
    conn: psycopg.Connection, query: sql.Composable
) -> Generator[list[memoryview], None, None]:
    """The rows of ``COPY (query) TO STDOUT (FORMAT binary)``, raw (field count first),
    in lists of those libpq has at hand (up to BATCH_BYTES): a loop over a list costs the
    caller less per row than resuming a generator. Each row owns its buffer."""
    copy_sql = sql.SQL("COPY ({}) TO STDOUT (FORMAT binary)").format(query)
    with conn.cursor() as cur, cur.copy(copy_sql) as copy:
        pg = conn.pgconn
        get = pg.get_copy_data
        first, ended = True, False
        n = 0
        while True:
            batch: list[memoryview] = []
            size = 0
            while size < BATCH_BYTES:
                n, data = get(1)
                if n <= 0:
                    break
                if first:
                    first = False
                    data = data[HEADER_LEN:]
                if n <= HEADER_LEN + 2 and data == TRAILER:  # with the header: no rows
                    ended = True
                    break
                batch.append(data)
                size += n
            if batch:
                yield batch
            if ended or n < 0:  # n < 0: the server's error or a lost connection: below
                break
            if n == 0:  # no whole message buffered yet
                select.select([pg.socket], [], [], WAIT)
                pg.consume_input()
        while copy.read():  # CopyDone and the command's result
            pass
        if not ended:
            raise psycopg.OperationalError("the COPY ended without its trailer")
