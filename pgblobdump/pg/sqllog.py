"""Which kinds of SQL statement a run issues, for ``-v`` (like ``pg_dump -v``).

Every connection that ``pg.connect`` opens uses ``LoggingCursor``: with the ``pgblobdump``
logger at INFO, each statement class (the statement's head, values left out) is logged
the first time it is issued; at DEBUG, every statement's class. Nothing is computed
when neither is on.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any

import psycopg
from psycopg import sql

from pgblobdump.pg.target import run_number

log = logging.getLogger(__name__)

HEAD = 72
"""Characters of a statement that name its class."""

_seen: set[tuple[int, str]] = set()
_lock = threading.Lock()

_QUOTED = re.compile(r"'(?:[^']|'')*'?")
_NUMBERS = re.compile(r"\b\d+\b")
_SPACE = re.compile(r"\s+")


def statement_class(query: Any, conn: psycopg.Connection | None = None) -> str:
    """``COPY (SELECT m.oid, ... FROM pg_catalog.pg_largeobject_metadata m WHERE m.oid
    BETWEEN N::int8::oid ...``: the head of ``query``, literals as ``?`` and ``N``."""
    if isinstance(query, bytes):
        text = query[: HEAD * 4].decode(errors="replace")
    elif isinstance(query, sql.Composable):
        text = query.as_string(conn)[: HEAD * 4]
    else:
        text = str(query)[: HEAD * 4]
    text = _SPACE.sub(" ", _NUMBERS.sub("N", _QUOTED.sub("?", text))).strip()
    return text if len(text) <= HEAD else text[: HEAD - 3].rstrip() + "..."


def note(query: Any, conn: psycopg.Connection | None) -> None:
    """Log ``query``'s class: the first time at INFO, every time at DEBUG."""
    if not log.isEnabledFor(logging.INFO):
        return
    kind = statement_class(query, conn)
    key = (run_number(), kind)
    with _lock:
        first = key not in _seen
        _seen.add(key)
    if first:
        log.info("SQL: %s", kind)
    else:
        log.debug("SQL: %s", kind)


class LoggingCursor(psycopg.Cursor[Any]):
    """psycopg's cursor, telling ``note`` what it runs."""

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        note(query, self.connection)
        return super().execute(query, params, **kwargs)

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
        note(query, self.connection)
        super().executemany(query, params_seq, **kwargs)

    def copy(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        note(statement, self.connection)
        return super().copy(statement, params, **kwargs)

    def stream(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        note(query, self.connection)
        return super().stream(query, params, **kwargs)
