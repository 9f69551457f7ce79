"""One row or one number from a query: the two shapes most catalog questions take."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from psycopg.abc import Params

Query = str | sql.SQL | sql.Composed
"""What ``Connection.execute`` runs: a statement's text or one composed with ``sql``."""


def one(conn: psycopg.Connection, query: Query, params: Params | None = None) -> tuple[Any, ...]:
    """The first row of ``query``, which always returns one (an aggregate, a function
    call); AssertionError when it returns none."""
    row = conn.execute(query, params).fetchone()
    assert row is not None, "the query returned no row"
    return row


def scalar(
    conn: psycopg.Connection, query: Query, params: Params | None = None, default: int = 0
) -> int:
    """The first column of ``query``'s first row as an int (a count, a size), or
    ``default`` when it returns no row or NULL."""
    row = conn.execute(query, params).fetchone()
    return default if row is None or row[0] is None else int(row[0])
