"""``precheck``: before a restore writes anything, whether an archive's OIDs already exist
on the target (and whether an interrupted run of the same restore made them)."""

from __future__ import annotations

import psycopg

from pgblobdump.errors import DatabaseError
from pgblobdump.packed.format.index import Index
from pgblobdump.packed.restore.journal import Journal
from pgblobdump.packed.restore.request import RestoreRequest
from pgblobdump.pg import catalog
from pgblobdump.pgconstants import OID_MAX


def precheck(
    conn: psycopg.Connection,
    index: Index,
    req: RestoreRequest,
    part: tuple[int, int] | None = None,
    journal: Journal | None = None,
) -> None:
    """Refuse before writing anything when an archive's OID already exists on the target.
    When the ``journal`` says an earlier, interrupted run of this restore made it, the
    error says --resume (and ``req``'s resume command), which finishes that run.

    One query asks which of the index's blocks (4,096 LOs each, by first and last OID)
    overlap an existing LO; only those blocks are read and their OIDs looked up: a target
    with no LOs in the archive's range costs one statement, whatever the LO count.
    """
    lo, hi = part or (0, OID_MAX)
    blocks = [b for b in index.blocks if b.last >= lo and b.first <= hi]
    firsts = [max(b.first, lo) for b in blocks]
    lasts = [min(b.last, hi) for b in blocks]
    if not firsts:
        return
    for first in catalog.overlapping(conn, firsts, lasts):
        last = lasts[firsts.index(first)]
        oids = [r.oid for r in index.range(first, last)]
        rows = [(o,) for o in sorted(catalog.existing(conn, oids))[:5]]
        if rows:
            more = f" (and {', '.join(str(r[0]) for r in rows[1:])}...)" if len(rows) > 1 else ""
            if journal is not None and journal.made_earlier(int(rows[0][0])):
                raise DatabaseError(
                    f"LO {rows[0][0]} already exists in the target{more}: an earlier restore"
                    " of this archive into this database was interrupted and left"
                    f" {journal.describe_earlier(conn)}{req.resume_hint}"
                )
            raise DatabaseError(
                f"LO {rows[0][0]} already exists in the target{more}; restore with"
                " --on-conflict skip to keep what is there, with --remap to restore them at new"
                " OIDs, or into another database"
            )
