"""``inspect``: an LO health report from the catalogs (no LO bytes are read): how many
LOs, how big, whose, which columns reference them and how many dangle, the orphans, the
lock budget, and what pg_dump and pg_restore will cost."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgblobdump.pg import catalog
from pgblobdump.pg.changes import Mark
from pgblobdump.pg.locks import LockBudget
from pgblobdump.pg.lostream import Selection
from pgblobdump.pg.wal.ready import WalReadiness, readiness
from pgblobdump.refs import candidates, suspects
from pgblobdump.sync import state
from pgblobdump.units import plural
from pgblobdump.vacuum.checksums import Checksums, checksums
from pgblobdump.vacuum.predict import Prediction, predict
from pgblobdump.vacuum.refs import RefColumn, References, discover

SIZES = "pgbd_inspect_sizes"
LIST_MAX = 10
GIB = 1 << 30
_LABELS = ("empty", "up to 4 KiB", "4-64 KiB", "64 KiB-1 MiB", "1-16 MiB", "16-256 MiB",
           "256 MiB-1 GiB", "over 1 GiB")  # fmt: skip


@dataclass(frozen=True)
class SizeBucket:
    label: str
    los: int
    bytes: int


@dataclass(frozen=True)
class Owner:
    role: str
    los: int


@dataclass(frozen=True)
class ColumnRefs:
    """A reference column: the OIDs it names (distinct), how many name no LO, and
    whether we saw it whole (``hidden`` says why not)."""

    column: str
    type: str
    kind: str
    references: int | None
    dangling: int | None
    hidden: str = ""
    populated: bool = True
    """False for a materialized view not populated: no rows, no references (not read)."""


@dataclass(frozen=True)
class Inspection:
    database: str
    server_version: str
    los: int
    size_bytes: int | None
    """Logical sizes added up (None: pg_largeobject not readable by this role)."""
    stored_bytes: int | None
    """Bytes the pages hold (less than ``size_bytes`` when LOs are sparse)."""
    pg_largeobject_bytes: int
    metadata_bytes: int
    histogram: tuple[SizeBucket, ...]
    over_1gib: int | None
    over_1gib_sample: tuple[int, ...]
    sparse: int | None
    sparse_sample: tuple[int, ...]
    owners: tuple[Owner, ...]
    with_acl: int
    with_comment: int
    columns: tuple[ColumnRefs, ...]
    orphans: int
    orphans_exact: bool
    """False when a column was hidden from us: then some "orphans" may be referenced."""
    dangling: int
    lock_table: int
    locks_per_batch: int
    safe_transaction_size: int
    """The largest pg_restore --transaction-size whose LO locks take at most half the
    lock table, for one job (divide by the jobs for -j)."""
    predictions: tuple[Prediction, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    checksums: Checksums | None = None
    """With ``--checksums`` only: a digest of every LO's bytes (vacuum/checksums.py)."""
    suspects: tuple[dict[str, object], ...] = ()
    """Text and integer columns found to hold OIDs of live LOs (refs/suspects.py): per
    column rows, values, live OIDs, dangling ones, the form, confidence, examples."""
    candidate_columns: int = 0
    """Text and integer columns screened for OIDs (statistics or a sample)."""
    suspects_seconds: float = 0.0
    kept_only_by_suspects: int = 0
    """LOs only suspected references name: vacuumlo (oid and lo columns alone) would
    delete them."""
    kept_only_by_suspects_bytes: int | None = None
    unreferenced: int | None = None
    """Orphans no column names, suspected references counted (``orphans`` is as vacuumlo
    counts them: oid and lo columns alone)."""
    wal_summaries: WalReadiness | None = None
    """Whether this server can find changes through WAL summaries (pg/wal/ready.py), the
    marks of a sync state in this database checked against them."""


def _one(conn: psycopg.Connection, q: sql.Composed | str) -> tuple[object, ...]:
    row = conn.execute(q).fetchone()
    assert row is not None
    return tuple(row)


def _sizes(conn: psycopg.Connection) -> tuple[object, ...]:
    conn.execute(sql.SQL("DROP TABLE IF EXISTS pg_temp.{}").format(sql.Identifier(SIZES)))
    conn.execute(catalog.lo_sizes_sql(SIZES))
    return _one(
        conn,
        sql.SQL(
            "SELECT coalesce(sum(size), 0)::int8, coalesce(sum(stored), 0)::int8,"
            " count(*) FILTER (WHERE size > {g}),"
            " (array_agg(loid::int8 ORDER BY loid) FILTER (WHERE size > {g}))[1:{k}],"
            " count(*) FILTER (WHERE pages < last_page + 1),"
            " (array_agg(loid::int8 ORDER BY loid) FILTER (WHERE pages < last_page + 1))[1:{k}]"
            " FROM pg_temp.{t}"
        ).format(g=sql.Literal(GIB), k=sql.Literal(LIST_MAX), t=sql.Identifier(SIZES)),
    )


def _histogram(conn: psycopg.Connection, los: int) -> tuple[SizeBucket, ...]:
    """LOs and bytes by size; LOs with no page (empty) are the ones the sizes table lacks."""
    bounds = [b + 1 if b else 1 for b in catalog.SIZE_BUCKETS[1:]]
    rows = conn.execute(
        sql.SQL(
            "SELECT pg_catalog.width_bucket(s.size, %s::int8[]) AS b, count(*),"
            " coalesce(sum(s.size), 0)::int8 FROM pg_temp.{} s GROUP BY 1 ORDER BY 1"
        ).format(sql.Identifier(SIZES)),
        (bounds,),
    ).fetchall()
    got = {int(r[0]): (int(r[1]), int(r[2])) for r in rows}
    with_pages = sum(n for n, _ in got.values())
    got[0] = (got.get(0, (0, 0))[0] + max(los - with_pages, 0), 0)
    return tuple(SizeBucket(lab, *got.get(k, (0, 0))) for k, lab in enumerate(_LABELS))


def _column_refs(conn: psycopg.Connection, c: RefColumn, hidden: str) -> ColumnRefs:
    if not c.readable:
        return ColumnRefs(c.qualified, c.type, c.kind, None, None, hidden, c.populated)
    row = _one(
        conn,
        sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE m.oid IS NULL)"
            " FROM (SELECT DISTINCT o FROM ({}) x) r"
            " LEFT JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = r.o"
        ).format(c.oids()),
    )
    return ColumnRefs(c.qualified, c.type, c.kind, int(row[0]), int(row[1]), hidden,  # type: ignore[call-overload]
                      c.populated)  # fmt: skip


def inspect(
    conn: psycopg.Connection,
    database: str,
    references: Sequence[tuple[str, str]] = (),
    with_checksums: bool = False,
    not_references: Sequence[tuple[str, str]] = (),
) -> Inspection:
    """The report for the database ``conn`` is connected to (autocommit); LO bytes are
    read (on the server) only ``with_checksums``."""
    notes: list[str] = []
    rows = conn.execute(
        "SELECT pg_catalog.pg_get_userbyid(lomowner), count(*), count(lomacl)"
        " FROM pg_catalog.pg_largeobject_metadata GROUP BY lomowner ORDER BY 2 DESC, 1"
    ).fetchall()
    owners = tuple(Owner(str(r[0]), int(r[1])) for r in rows)
    los, acl = sum(o.los for o in owners), sum(int(r[2]) for r in rows)
    version, comments = _one(
        conn,
        "SELECT current_setting('server_version'), (SELECT count(*) FROM"
        " pg_catalog.pg_description d WHERE d.classoid = 'pg_catalog.pg_largeobject'::regclass"
        " AND d.objsubid = 0)",
    )
    pages_bytes, meta_bytes = catalog.space(conn)
    size = stored = big = sparse = None
    big_sample: tuple[int, ...] = ()
    sparse_sample: tuple[int, ...] = ()
    histogram: tuple[SizeBucket, ...] = ()
    if catalog.pages_readable(conn):
        s = _sizes(conn)
        size, stored, big, sparse = int(s[0]), int(s[1]), int(s[2]), int(s[4])  # type: ignore[call-overload]
        big_sample, sparse_sample = tuple(s[3] or ()), tuple(s[5] or ())  # type: ignore[arg-type]
        histogram = _histogram(conn, los)
    else:
        notes.append("sizes need SELECT on pg_largeobject (a superuser): not shown")
    refs = discover(conn, references)
    hidden = {r.column: r.why for r in refs.refusals}
    seen = References(tuple(c for c in refs.columns if c.readable))
    orphans, dangling, referenced = (
        int(v)  # type: ignore[call-overload]
        for v in _one(
            conn,
            sql.SQL(
                "SELECT count(*) FILTER (WHERE r.o IS NULL), count(*) FILTER (WHERE m.oid IS NULL),"
                " count(r.o) FROM pg_catalog.pg_largeobject_metadata m"
                " FULL JOIN (SELECT DISTINCT o FROM ({u}) x) r ON r.o = m.oid"
            ).format(u=seen.union()),
        )
    )
    if len(refs.columns) == 1 and seen.columns:  # the one column's figures are the union's
        c = refs.columns[0]
        one = ColumnRefs(c.qualified, c.type, c.kind, referenced, dangling,
                         hidden.get(c.qualified, ""), c.populated)  # fmt: skip
        columns: tuple[ColumnRefs, ...] = (one,)
    else:
        columns = tuple(_column_refs(conn, c, hidden.get(c.qualified, "")) for c in refs.columns)
    if hidden:
        notes.append(f"{plural(len(hidden), 'column')} not seen whole: some orphans may be"
                     " referenced")  # fmt: skip
    notes += refs.notes()
    cands = candidates.candidates(
        conn, skip={(c.relid, c.attnum) for c in refs.columns}, dismissed=not_references
    )
    found = suspects.screen(conn, [c for c in cands if c.populated])
    unread = found.unread
    if unread:
        notes.append(
            f"{len(unread)} text or integer columns could not be read whole for OIDs"
            f" ({', '.join(f.column.qualified for f in unread[:5])}"
            f"{' ...' if len(unread) > 5 else ''}): vacuum refuses until they can be, or are"
            " dismissed with --not-references"
        )
    only, only_bytes = _only_suspects(conn, seen, found, size is not None)
    if only:
        notes.append(
            f"vacuumlo would delete {only:,} referenced LOs"
            + (f" ({only_bytes:,} bytes)" if only_bytes is not None else "")
            + ": only text or integer columns name them (suspected references)"
        )
    budget = LockBudget.read(conn)
    safe = max(1, budget.total // 2)
    return Inspection(
        database=database, server_version=str(version), los=los,
        size_bytes=size, stored_bytes=stored, pg_largeobject_bytes=pages_bytes,
        metadata_bytes=meta_bytes, histogram=histogram, over_1gib=big,
        over_1gib_sample=big_sample, sparse=sparse, sparse_sample=sparse_sample,
        owners=owners, with_acl=int(acl), with_comment=int(comments), columns=columns,  # type: ignore[call-overload]
        orphans=orphans, orphans_exact=not hidden, dangling=dangling,
        lock_table=budget.total, locks_per_batch=budget.per_transaction,
        safe_transaction_size=safe,
        predictions=tuple(predict(los, size or 0)),
        notes=tuple(notes),
        checksums=checksums(conn) if with_checksums else None,
        suspects=tuple(f.summary() for f in found.hits), candidate_columns=len(cands),
        suspects_seconds=round(found.seconds, 3), kept_only_by_suspects=only,
        kept_only_by_suspects_bytes=only_bytes, unreferenced=orphans - only,
        wal_summaries=readiness(conn, _sync_marks(conn)),
    )  # fmt: skip


def _sync_marks(conn: psycopg.Connection) -> list[tuple[str, Mark]]:
    """The marks a sync state in this database keeps (``sync/state.py``: the snapshots of
    its source that copy and sync read), each named for messages; none when there is no
    state or this role may not read it."""
    try:
        rows = state.overlapping(conn, Selection())
    except psycopg.errors.InsufficientPrivilege:
        return []
    return [(f"the sync state's mark of {r.source.name or 'its source'}", r.mark) for r in rows]


def _only_suspects(
    conn: psycopg.Connection, typed: References, found: suspects.Suspects, sized: bool
) -> tuple[int, int | None]:
    """LOs the suspected references name and no typed column does, and their bytes (when
    the sizes were read)."""
    hits = [f.column for f in found.hits]
    if not hits:
        return 0, 0 if sized else None
    size = (
        sql.SQL(
            "coalesce(sum(s.size), 0)::int8 FROM pg_temp.{} s"
            " WHERE s.loid IN (SELECT o FROM pgbd_only)"
        ).format(sql.Identifier(SIZES))
        if sized
        else sql.SQL("NULL::int8")
    )
    row = _one(
        conn,
        sql.SQL(
            "WITH pgbd_only AS (SELECT DISTINCT m.oid AS o FROM ({s}) x"
            " JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = x.o"
            " WHERE NOT EXISTS (SELECT 1 FROM ({t}) y WHERE y.o = x.o))"
            " SELECT (SELECT count(*) FROM pgbd_only), (SELECT {size})"
        ).format(s=candidates.union(hits), t=typed.union(), size=size),
    )
    return int(row[0]), (int(row[1]) if row[1] is not None else None)  # type: ignore[call-overload]
