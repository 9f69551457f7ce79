"""Choosing LO OIDs that no other session is using, and reserving them for one run.

A run that creates LOs batch by batch commits them over minutes; another run that picks
"just above the largest LO OID" meanwhile would pick the same OIDs. So a run announces the
range it will fill with two session-level advisory locks (its first and last OID, under
two fixed tags), visible to every session in ``pg_locks`` until the run's connection ends,
and the choice of a range happens under a transaction-level advisory lock, one chooser at
a time per database. Sessions that create LOs without pgblobdump do not announce
anything: an OID one of them takes makes our batch fail, and the ledger's clean-up then
touches nothing of theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from pgblobdump.errors import DatabaseError
from pgblobdump.pg.query import one, scalar
from pgblobdump.pgconstants import FIRST_OID, OID_MAX

TAG_FIRST = 0x70676266  # 'pgbf'
"""High half of the advisory lock key that announces a reserved range's first OID."""
TAG_LAST = 0x7067626C  # 'pgbl'
"""High half of the key that announces its last OID; paired with the first by pid."""
TAG_CHOOSER = 0x70676263  # 'pgbc'
"""Key of the transaction lock that makes choosing a range one session at a time."""

_RESERVED = """
SELECT f.objid::int8, l.objid::int8, f.pid
FROM pg_locks f JOIN pg_locks l USING (pid)
WHERE f.locktype = 'advisory' AND l.locktype = 'advisory'
  AND f.objsubid = 1 AND l.objsubid = 1 AND f.granted AND l.granted
  AND f.classid = %(tf)s::int8::oid AND l.classid = %(tl)s::int8::oid
  AND f.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.database = f.database
  AND f.pid <> pg_backend_pid()
"""


@dataclass(frozen=True)
class Reservation:
    """OIDs ``first..last`` (inclusive), announced until the connection that made it ends."""

    first: int
    last: int


def _key(tag: int, oid: int) -> int:
    return (tag << 32) | oid


def reserve(
    conn: psycopg.Connection, count: int, start: int | None, above: int = 0,
    option: str = "--start-oid",
) -> Reservation:  # fmt: skip
    """Reserve ``count`` consecutive OIDs: from ``start`` if no LO and no other run's
    reservation is in the way (else DatabaseError naming it), or just above every LO,
    every reservation and ``above``. ``conn`` must stay open for as long as the OIDs are
    being filled. ``option`` is how messages name the way to choose ``start``."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_key(TAG_CHOOSER, 0),))
        others = [
            (int(a), int(b), int(pid))
            for a, b, pid in conn.execute(_RESERVED, {"tf": TAG_FIRST, "tl": TAG_LAST})
        ]
        if start is None:
            highest = scalar(
                conn,
                "SELECT coalesce(max(oid)::int8, %s) FROM pg_catalog.pg_largeobject_metadata",
                (FIRST_OID - 1,),
            )
            top = max([highest, FIRST_OID - 1, above, *(b for _, b, _ in others)])
            first = top + 1
            if first + count - 1 > OID_MAX:
                raise DatabaseError(
                    f"no room for {count:,} consecutive OIDs above OID {top} (the largest LO"
                    f" OID or one reserved by another run); give {option}"
                )
        else:
            first = start
            last = first + count - 1
            for a, b, pid in others:
                if a <= last and first <= b:
                    raise DatabaseError(
                        f"OIDs {a}..{b} are reserved by another pgblobdump run (backend {pid});"
                        f" choose another {option}"
                    )
            row = one(
                conn,
                "SELECT count(*), min(oid) FROM pg_catalog.pg_largeobject_metadata"
                " WHERE oid BETWEEN %s::int8::oid AND %s::int8::oid",
                (first, last),
            )
            if row[0]:
                raise DatabaseError(
                    f"{row[0]:,} large objects already exist in OIDs {first}..{last}"
                    f" (the first is {row[1]}); choose another {option}"
                )
        last = first + count - 1
        conn.execute(
            "SELECT pg_advisory_lock(%s), pg_advisory_lock(%s)",
            (_key(TAG_FIRST, first), _key(TAG_LAST, last)),
        )
    return Reservation(first, last)


def claim(conn: psycopg.Connection, r: Reservation, option: str = "--start-oid") -> None:
    """Announce ``r`` again (a resumed run's block, partly filled by it already): refused
    when another run's reservation is in the way, as ``reserve`` refuses it."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_key(TAG_CHOOSER, 0),))
        for a, b, pid in conn.execute(_RESERVED, {"tf": TAG_FIRST, "tl": TAG_LAST}):
            if int(a) <= r.last and r.first <= int(b):
                raise DatabaseError(
                    f"OIDs {a}..{b} are reserved by another pgblobdump run (backend {pid}),"
                    f" in the way of this run's {r.first}..{r.last}; let it finish first"
                )
        conn.execute(
            "SELECT pg_advisory_lock(%s), pg_advisory_lock(%s)",
            (_key(TAG_FIRST, r.first), _key(TAG_LAST, r.last)),
        )


def release(conn: psycopg.Connection, r: Reservation) -> None:
    """End a reservation before the connection closes (closing it ends it too)."""
    conn.execute(
        "SELECT pg_advisory_unlock(%s), pg_advisory_unlock(%s)",
        (_key(TAG_FIRST, r.first), _key(TAG_LAST, r.last)),
    )
