"""What copy and sync keep in the target database, in schema ``pgblobdump_sync`` (``sync
--forget`` drops it): which LOs they made, so that a rerun resumes and ``--delete`` and
conflicts never touch an LO they did not make.

``made`` holds, for each transaction that created or rewrote LOs, their OID ranges and the
transaction's id, entered in that very transaction (so it commits with the LOs or not at
all). An LO is *ours* when a row covers its OID and its ``pg_largeobject_metadata`` tuple
still carries that transaction's id as ``xmin``: an LO made by another session at an OID
we once used (after a clean-up removed ours), or one whose owner or ACL was changed on the
target since, is not ours any more, whatever the rows say.

What copy and sync remove themselves (sync --delete, a failed run's clean-up) leaves the
rows' ranges in the same transaction (``uncover``), and compaction keeps the OIDs of LOs
that are gone: so an OID the rows cover whose LO is missing from the target was unlinked
there, by someone else (``coverage``; sync calls it a conflict, "deleted on the target",
and copies it again only with --force).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError
from pgblobdump.pg import catalog
from pgblobdump.pg.changes import DIGEST, Mark, page_range
from pgblobdump.pg.ledger import to_ranges
from pgblobdump.pg.locks import LockBudget
from pgblobdump.pg.lostream import Selection

ALL = "all"
"""The selection key of every LO (no --oids, no --referenced-by)."""


def key_of(sel: Selection) -> str:
    """The key a selection's marks are kept under (ALL for every LO)."""
    if sel == Selection():
        return ALL
    return json.dumps([sel.first, sel.last, sorted(sel.referenced_by)])


SCHEMA = "pgblobdump_sync"
"""The target's schema of copy/sync state."""

_CREATE = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
COMMENT ON SCHEMA {SCHEMA} IS 'pgblobdump copy/sync state: which LOs they made (sync --forget drops it)';
CREATE TABLE IF NOT EXISTS {SCHEMA}.made (
    first int8 NOT NULL, last int8 NOT NULL, xid xid8 NOT NULL);
CREATE INDEX IF NOT EXISTS made_first ON {SCHEMA}.made (first, last);
CREATE TABLE IF NOT EXISTS {SCHEMA}.marks (selection text NOT NULL, mark text NOT NULL, source text);
ALTER TABLE {SCHEMA}.marks ADD COLUMN IF NOT EXISTS source text;
"""  # noqa: E501
"""``marks.source``: where the mark was read (``Recorded`` as JSON; NULL in a state made
before it was kept, which ``ensure`` brings up to date)."""

LOCK_KEY = 0x70676264
"""The advisory lock under which the schema is created (parts of one copy race for it)."""


def xid_matches(meta: str) -> str:
    """SQL: whether the metadata row ``meta`` still carries the xid of a ``made`` row
    ``d`` (xid8 folded to the 32-bit xid that ``xmin`` shows)."""
    return f"{meta}.xmin = mod(d.xid::text::int8, 4294967296)::text::xid"


def ours(meta: str = "m") -> str:
    """SQL: whether the LO of metadata row ``meta`` is one copy/sync made (see above)."""
    return (
        f"EXISTS (SELECT 1 FROM {SCHEMA}.made d WHERE d.first <= {meta}.oid::int8"
        f" AND d.last >= {meta}.oid::int8 AND {xid_matches(meta)})"
    )


def unchanged(meta: str = "m", pages: bool = True) -> str:
    """SQL: whether the LO of metadata row ``meta`` (one of ours) is as a copy/sync made
    it: no page and no comment written by another transaction, what ``held`` calls ours
    (``pages``: False for a role that may not read pg_largeobject, which cannot tell)."""
    cond = (
        f"NOT EXISTS (SELECT 1 FROM pg_catalog.pg_description c"
        f" WHERE c.classoid = 'pg_catalog.pg_largeobject'::regclass AND c.objoid = {meta}.oid"
        f" AND c.objsubid = 0 AND c.xmin <> {meta}.xmin)"
    )
    if pages:
        cond += (
            f" AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_largeobject p"
            f" WHERE p.loid = {meta}.oid AND p.xmin <> {meta}.xmin)"
        )
    return cond


def exists(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.made",)).fetchone()
    return bool(row and row[0])


def _current(conn: psycopg.Connection) -> bool:
    """Whether the state's tables exist as this version makes them."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = to_regclass(%s)"
        " AND attname = 'source' AND NOT attisdropped)",
        (f"{SCHEMA}.marks",),
    ).fetchone()
    return bool(row and row[0])


def ensure(conn: psycopg.Connection) -> None:
    """Create the schema and its tables unless they exist (``conn`` in autocommit)."""
    if _current(conn):
        return
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
            conn.execute(_CREATE)
    except psycopg.errors.InsufficientPrivilege as e:
        raise DatabaseError(
            f"copy keeps what it made in schema {SCHEMA} of the target, and this role may"
            f" not create it ({e.diag.message_primary}); create it and grant this role"
            " CREATE and USAGE on it, or connect as its owner"
        ) from e


def record(conn: psycopg.Connection, ranges: Sequence[tuple[int, int]], xid: str) -> None:
    """Enter LO ranges made by transaction ``xid`` (run inside that transaction)."""
    if not ranges:
        return
    conn.execute(
        f"INSERT INTO {SCHEMA}.made SELECT f, l, %s::xid8"
        " FROM unnest(%s::int8[], %s::int8[]) AS u(f, l)",
        (xid, [lo for lo, _ in ranges], [hi for _, hi in ranges]),
    )


def existing(conn: psycopg.Connection, oids: Sequence[int]) -> tuple[list[int], list[int]]:
    """Which of ``oids`` exist on the target: (ours, others), each ascending."""
    if not exists(conn):
        rows = conn.execute(
            "SELECT oid::int8, false FROM pg_catalog.pg_largeobject_metadata m"
            " WHERE oid = ANY(%s::int8[]::oid[]) ORDER BY 1",
            (list(oids),),
        ).fetchall()
    else:
        rows = conn.execute(
            sql.SQL(
                "SELECT m.oid::int8, {} FROM pg_catalog.pg_largeobject_metadata m"
                " WHERE m.oid = ANY(%s::int8[]::oid[]) ORDER BY 1"
            ).format(sql.SQL(ours("m"))),
            (list(oids),),
        ).fetchall()
    mine = [int(o) for o, is_ours in rows if is_ours]
    others = [int(o) for o, is_ours in rows if not is_ours]
    return mine, others


def forget(conn: psycopg.Connection) -> bool:
    """Drop the schema (``sync --forget``); False when there was none."""
    if not exists(conn):
        return False
    conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    return True


# -- marks: the source snapshots the target's LOs were read under ------------------------
@dataclass(frozen=True)
class Recorded:
    """The source database a mark was read from, as recorded with it: ``name`` as
    messages give it (``pg.connect.describe``: database, host and port, never a
    password) and ``datname``, its name on its server. None: not recorded (a state made
    before they were). ``replaced``: a copy told that the source changed
    (--source-changed) replaced the marks of another source here; the LOs copied from
    that one may still be there (a copy keeps the LOs an earlier copy made, as a
    resumed copy does), so the next sync of them compares digests."""

    name: str | None = None
    datname: str | None = None
    replaced: bool = False

    def to_json(self) -> str:
        d: dict[str, object] = {"name": self.name, "datname": self.datname}
        if self.replaced:
            d["replaced"] = True
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str | None) -> Recorded:
        if text is None:
            return cls()
        d = json.loads(text)
        return cls(d.get("name"), d.get("datname"), bool(d.get("replaced", False)))


@dataclass(frozen=True)
class Marked:
    """One row of the marks: selection ``key``, ``mark``, the ``source`` it was read
    from, and the row as stored (``stored``: to remove exactly that row)."""

    key: str
    mark: Mark
    source: Recorded
    stored: tuple[str, str | None]


def _span(key: str) -> tuple[int, int]:
    """The OID range a selection key covers (ALL: every OID)."""
    if key == ALL:
        return Selection().first, Selection().last
    first, last, _refs = json.loads(key)
    return int(first), int(last)


def _rows(conn: psycopg.Connection) -> list[Marked]:
    # ORDER BY: whatever reads them gets them in one order, run after run
    rows = conn.execute(  # (to_jsonb: a state made before the column was has none)
        f"SELECT k.selection, k.mark, to_jsonb(k) ->> 'source' FROM {SCHEMA}.marks k"
        " ORDER BY 1, 2, 3"
    ).fetchall()
    return [Marked(str(k), Mark.from_json(m), Recorded.from_json(s), (str(m), s))
            for k, m, s in rows]  # fmt: skip


def load_marks(conn: psycopg.Connection, key: str) -> list[Marked]:
    """The marks of selection ``key`` (else of every LO, which covers any selection):
    several rows (copy --part, a resumed copy) are several snapshots, all of which a
    sync's changes must be counted from (``combine``)."""
    if not exists(conn):
        return []
    rows = _rows(conn)
    for k in (key, ALL):
        if mine := [r for r in rows if r.key == k]:
            return mine
    return []


def overlapping(conn: psycopg.Connection, sel: Selection) -> list[Marked]:
    """The marks of every selection whose OID range meets ``sel``'s (ALL's too): the
    LOs they read may be among those a copy or sync of ``sel`` makes, keeps or
    removes, so each must have been read from the same source."""
    if not exists(conn):
        return []
    out = []
    for r in _rows(conn):
        first, last = _span(r.key)
        if first <= sel.last and sel.first <= last:
            out.append(r)
    return out


def combine(rows: Sequence[Marked]) -> Mark | None:
    """One mark before which nothing is counted that any of ``rows`` counts as after
    (``Mark.union``), or None when they are not all of one cluster and database as their
    marks name them (one source read before and after a restart by a role that may not
    run pg_control_system(): no one mark is exact, so the caller compares digests)."""
    if not rows:
        return None
    out = rows[0].mark
    for r in rows[1:]:
        if (r.mark.cluster, r.mark.database) != (out.cluster, out.database):
            return None
        out = out.union(r.mark)
    return out


def add_mark(conn: psycopg.Connection, key: str, mark: Mark, source: Recorded,
             replace: bool = False, drop: Sequence[Marked] = ()) -> None:  # fmt: skip
    """Record that selection ``key`` was read under ``mark`` from ``source`` (``replace``:
    a sync that finished: the earlier ones of the key are no longer needed; ``drop``:
    rows to remove with it, another source's that --source-changed replaces)."""
    with conn.transaction():
        if replace:
            conn.execute(f"DELETE FROM {SCHEMA}.marks WHERE selection = %s", (key,))
        for r in drop:
            conn.execute(
                f"DELETE FROM {SCHEMA}.marks k WHERE selection = %s AND mark = %s"
                " AND (to_jsonb(k) ->> 'source') IS NOT DISTINCT FROM %s",
                (r.key, *r.stored),
            )
        conn.execute(f"INSERT INTO {SCHEMA}.marks VALUES (%s, %s, %s)",
                     (key, mark.to_json(), source.to_json()))  # fmt: skip


# -- the target's LOs as a sync sees them -------------------------------------------------
OURS, CHANGED, REPLACED, FOREIGN = "ours", "changed", "replaced", "foreign"


@dataclass(frozen=True, slots=True)
class Held:
    """One LO of the target: ``kind`` OURS (made by copy/sync, unchanged since), CHANGED
    (its metadata row still the one a copy/sync made, its pages or comment written on
    the target since: what --force may overwrite), REPLACED (at an OID a copy/sync made,
    but its metadata row is not the one made: its owner or ACL changed on the target, or
    it was unlinked and made again there, perhaps by someone else: never overwritten), or
    FOREIGN (no copy or sync made it); ``comment``: md5 of its comment; ``digest`` as
    changes.DIGEST (digest scans only)."""

    oid: int
    kind: str
    comment: str | None
    digest: str | None = None


_HELD = """
COPY (
  WITH bad AS ({bad}),
  made AS MATERIALIZED ({made})
  SELECT * FROM (
  SELECT m.oid::int8,
         CASE WHEN {mine} AND m.oid NOT IN (SELECT loid FROM bad)
                   AND coalesce(d.xmin = m.xmin, true) THEN 'ours'
              WHEN {mine} THEN 'changed'
              WHEN {covered} THEN 'replaced'
              ELSE 'foreign' END,
         md5(d.description), {digest}
  FROM pg_catalog.pg_largeobject_metadata m
  {comment_join}
  WHERE m.oid BETWEEN {first}::int8::oid AND {last}::int8::oid
) s (oid, kind, comment, digest) {sparse}
  ORDER BY oid
) TO STDOUT (FORMAT binary)
"""

_BAD_PAGES = """SELECT DISTINCT p.loid FROM pg_catalog.pg_largeobject p
    JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = p.loid
    WHERE {page_range} p.xmin <> m.xmin"""


def held(
    conn: psycopg.Connection, first: int, last: int, digest: bool, sparse: bool = False
) -> Iterator[Held]:
    """The target's LOs with OIDs in ``first..last``, in OID order (one COPY); ``sparse``:
    only those not ours or with a comment (the others are ours, unchanged, with none). An LO
    whose pages were written since a copy made it has a page ``xmin`` other than its
    metadata's (a copy writes both in one transaction): only a role that may read
    pg_largeobject sees that (``pages_checked``)."""
    bad = _BAD_PAGES if catalog.pages_readable(conn) else "SELECT 0::oid AS loid WHERE false"
    covered = "EXISTS (SELECT 1 FROM made c WHERE c.first <= m.oid::int8 AND c.last >= m.oid::int8"
    mine = f"{covered} AND c.x = m.xmin)"
    made = (  # the xids as ``xmin`` shows them, worked out once per row, not per LO
        f"SELECT first, last, mod(xid::text::int8, 4294967296)::text::xid AS x FROM {SCHEMA}.made"
        if exists(conn)
        else "SELECT 0::int8 AS first, -1::int8 AS last, '0'::xid AS x WHERE false"
    )
    query = sql.SQL(_HELD).format(
        bad=sql.SQL(bad).format(page_range=page_range("p.loid", first, last)),
        made=sql.SQL(made), covered=sql.SQL(covered + ")"), mine=sql.SQL(mine),
        sparse=sql.SQL("WHERE kind <> 'ours' OR comment IS NOT NULL" if sparse else ""),
        digest=sql.SQL(DIGEST if digest else "NULL::text"),
        comment_join=sql.SQL(catalog.COMMENT_JOIN),
        first=sql.Literal(first), last=sql.Literal(last),
    )  # fmt: skip
    with conn.cursor().copy(query) as cp:
        cp.set_types(["int8", "text", "text", "text"])
        for oid, kind, comment, dig in cp.rows():
            yield Held(int(oid), kind, comment, dig)


def unlink(conn: psycopg.Connection, oids: Sequence[int], done: list[int] | None = None) -> int:
    """Remove the LOs ``oids`` (sync --delete: gone from the source) that are still ours
    and unchanged here (checked again in the same statement as ``held`` checks it,
    metadata, pages and comment: a writer on the target meanwhile keeps its LO). Batches
    sized from the lock table (lo_unlink holds a lock per LO), each committed: ``done``
    gets each batch's count as it commits (what an interrupt leaves removed). Returns
    how many were."""
    per = LockBudget.read(conn).per_transaction
    removed = 0
    pages = catalog.pages_readable(conn)
    group = list(oids)
    for i in range(0, len(group), per):
        with conn.transaction():
            gone = replace(conn, group[i : i + per], (), pages)
            uncover(conn, to_ranges(gone))
        n = len(gone)
        removed += n
        if done is not None:
            done.append(n)
    return removed


def replace(
    conn: psycopg.Connection, oids: Sequence[int], forced: Sequence[int], pages: bool
) -> list[int]:
    """In the caller's transaction: remove the LOs ``oids`` that are still ours and
    unchanged here (as ``unlink`` checks them; ``pages``: whether this role may read
    pg_largeobject), and ``forced`` ones whose metadata row is still the one a copy made
    (sync --force: their pages or comment changed here; an LO made again at the OID, or
    given another owner or ACL, is never removed). Returns the OIDs removed, ascending.
    (A rewrite writes the new copy in the same transaction: a failure rolls back to the
    old one.)"""
    out: list[int] = []
    same = f"{ours('m')} AND {unchanged('m', pages)}"
    for group, cond in ((oids, same), (forced, ours("m"))):
        if group:
            rows = conn.execute(
                "SELECT m.oid::int8, lo_unlink(m.oid) FROM pg_catalog.pg_largeobject_metadata m"
                f" WHERE m.oid = ANY(%s::int8[]::oid[]) AND {cond}",
                (list(group),),
            ).fetchall()
            out += (int(r[0]) for r in rows)
    return sorted(out)


_FORGET = f"""
WITH r AS (SELECT lo, hi FROM unnest(%s::int8[], %s::int8[]) AS u(lo, hi)),
hit AS (DELETE FROM {SCHEMA}.made d USING r WHERE r.lo <= d.last AND r.hi >= d.first
        RETURNING d.first, d.last, d.xid),
cut AS (SELECT h.first, h.last, h.xid, r.lo, r.hi
        FROM (SELECT DISTINCT first, last, xid FROM hit) h
        JOIN r ON r.lo <= h.last AND r.hi >= h.first),
keep AS (SELECT xid, coalesce(lag(hi) OVER w + 1, first) AS f, lo - 1 AS l FROM cut
         WINDOW w AS (PARTITION BY first, last, xid ORDER BY lo)
         UNION ALL
         SELECT xid, max(hi) + 1, last FROM cut GROUP BY first, last, xid)
INSERT INTO {SCHEMA}.made SELECT f, l, xid FROM keep WHERE f <= l
"""
"""Each ``made`` row that meets the ranges ``r`` (ascending, disjoint) replaced by its
parts outside them: the gaps between the ranges it meets, and what is left at its ends."""


def uncover(conn: psycopg.Connection, ranges: Sequence[tuple[int, int]]) -> None:
    """Leave the OID ranges ``ranges`` (ascending, disjoint) out of ``made``: LOs copy or
    sync removed (sync --delete, a failed run's clean-up), in the removing transaction. A
    missing LO that a row still covers was unlinked by someone else (``coverage``)."""
    if ranges:
        conn.execute(_FORGET, ([lo for lo, _ in ranges], [hi for _, hi in ranges]))


class Coverage:
    """OIDs as ascending, disjoint, merged inclusive ranges, asked about one by one."""

    def __init__(self, ranges: list[tuple[int, int]]) -> None:
        self.firsts = [lo for lo, _ in ranges]
        self.lasts = [hi for _, hi in ranges]

    def __contains__(self, oid: int) -> bool:
        i = bisect.bisect_right(self.firsts, oid) - 1
        return i >= 0 and oid <= self.lasts[i]


_COVERAGE = f"""
SELECT min(first), max(last) FROM (
  SELECT first, last, count(*) FILTER (WHERE brk) OVER (ORDER BY first, last) AS grp FROM (
    SELECT first, last, coalesce(first > max(last) OVER (ORDER BY first, last ROWS BETWEEN
                                 UNBOUNDED PRECEDING AND 1 PRECEDING) + 1, true) AS brk
    FROM {SCHEMA}.made WHERE last >= %s AND first <= %s) a) b
GROUP BY grp ORDER BY 1
"""
"""The rows' ranges meeting first..last, merged where they overlap or touch."""


def coverage(conn: psycopg.Connection, first: int, last: int) -> Coverage:
    """The OIDs in ``first..last`` of LOs a copy or sync made and did not remove since:
    the target should hold each, and one it does not was unlinked there by someone else."""
    if not exists(conn):
        return Coverage([])
    rows = conn.execute(_COVERAGE, (first, last)).fetchall()
    return Coverage([(int(lo), int(hi)) for lo, hi in rows])


def compact(conn: psycopg.Connection, at_least: int = 10_000) -> None:
    """Rewrite ``made`` as the ranges of LOs that are ours now and of those gone from the
    target (consecutive OIDs of one transaction): rows of LOs since rewritten, made again
    or given another owner or ACL on the target go, and a missing LO stays covered (it
    was unlinked there: ``coverage``). Only past ``at_least`` rows."""
    row = conn.execute(f"SELECT count(*) FROM {SCHEMA}.made").fetchone()
    if not row or int(row[0]) < at_least:
        return
    with conn.transaction():
        conn.execute(f"LOCK TABLE {SCHEMA}.made")
        conn.execute(
            f"""CREATE TEMP TABLE pgbd_made ON COMMIT DROP AS
            WITH kept AS (
                SELECT DISTINCT ON (m.oid) m.oid::int8 AS o, d.xid AS x
                FROM pg_catalog.pg_largeobject_metadata m JOIN {SCHEMA}.made d
                  ON d.first <= m.oid::int8 AND d.last >= m.oid::int8 AND {xid_matches("m")}
                ORDER BY m.oid),
            gone AS (
                SELECT DISTINCT ON (g.o) g.o, d.xid AS x
                FROM {SCHEMA}.made d, generate_series(d.first, d.last) g(o)
                WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_largeobject_metadata m
                                  WHERE m.oid = g.o::oid)
                ORDER BY g.o, d.xid DESC)
            SELECT min(o) AS first, max(o) AS last, x AS xid FROM (
              SELECT o, x, o - row_number() OVER (PARTITION BY x ORDER BY o) AS g FROM (
                SELECT o, x FROM kept UNION ALL SELECT o, x FROM gone) s) t
            GROUP BY x, g"""
        )
        conn.execute(f"DELETE FROM {SCHEMA}.made")
        conn.execute(f"INSERT INTO {SCHEMA}.made SELECT first, last, xid FROM pgbd_made")
