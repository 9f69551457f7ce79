"""Walk a table in primary-key order, one short transaction per batch of rows.

Batches are key ranges ``(after, upto]`` found with one index probe (``OFFSET n-1 LIMIT
1`` past the last key), so rows inserted behind the cursor are the sync trigger's, not
ours, and a resume starts from the key stored in the state row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.migrate.columns import Key


@dataclass(frozen=True)
class Range:
    after: list[str] | None
    """The last key of the previous batch (None: from the start)."""
    upto: list[str] | None
    """The last key of this batch (None: to the end)."""

    def where(self, key: Key) -> sql.Composed:
        """The condition selecting this range; its parameters come from ``params``."""
        parts: list[sql.Composed] = []
        if self.after is not None:
            parts.append(sql.SQL("{} > {}").format(key.row(), key.from_text("after")))
        if self.upto is not None:
            parts.append(sql.SQL("{} <= {}").format(key.row(), key.from_text("upto")))
        return sql.SQL(" AND ").join(parts) if parts else sql.Composed([sql.SQL("true")])

    def params(self) -> dict[str, list[str]]:
        out = {}
        if self.after is not None:
            out["after"] = self.after
        if self.upto is not None:
            out["upto"] = self.upto
        return out


def next_range(
    conn: psycopg.Connection, table: sql.Composable, key: Key, after: list[str] | None, rows: int
) -> Range:
    """The range of the next ``rows`` rows after key ``after``."""
    cond = sql.Composed([])
    if after:
        cond = sql.SQL("WHERE {} > {}").format(key.row(), key.from_text("after"))
    row = conn.execute(
        sql.SQL("SELECT {kt} FROM {t} {w} ORDER BY {k} OFFSET %(off)s LIMIT 1").format(
            kt=key.as_text(), t=table, w=cond, k=key.columns()
        ),
        {"after": after, "off": rows - 1} if after else {"off": rows - 1},
    ).fetchone()
    return Range(after, list(row[0]) if row else None)


def walk(
    conn: psycopg.Connection, table: sql.Composable, key: Key, after: list[str] | None, rows: int
) -> Iterator[Range]:
    """Ranges from ``after`` to the end; the caller runs each in its own transaction and
    stores ``upto`` as the new ``after``. The last range has ``upto`` None."""
    while True:
        r = next_range(conn, table, key, after, rows)
        yield r
        if r.upto is None:
            return
        after = r.upto
