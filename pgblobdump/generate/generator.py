"""Create LOs with set-based server statements, one batch per transaction.

Why this shape:
- OIDs are always explicit: consecutive from ``--start-oid`` or from just above the
  largest existing LO OID. ``lo_create(0)`` would make the server probe the OID index for
  a free OID per object, which costs 40% more than the create itself.
- Seed-style empty LOs (no table, owners, ACLs or comments) are one
  ``lo_create`` over ``generate_series`` per batch: the server's own fastest path.
- Otherwise each batch sends its contents as one binary ``bytea[]`` parameter to
  ``lo_from_bytea`` over ``unnest``: one round trip per batch, no staging table.
- Owners come from ``SET LOCAL ROLE`` around the create (the new LO's owner is the
  current role), not per-LO ``ALTER LARGE OBJECT``, which takes a lock per object.
- Batches commit separately and stay far below the lock table (64 x max_connections),
  so any count works at default settings; memory is one batch, whatever the count.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError, Interrupted, PgBlobDumpError
from pgblobdump.generate.content import ContentSource
from pgblobdump.generate.roles import (
    READER_ROLE,
    WRITER_ROLE,
    drop_roles,
    ensure_roles,
    owner_names,
)
from pgblobdump.generate.spec import OID_MAX, GenerateSpec
from pgblobdump.pg.connect import connect

FIRST_OID = 16384
"""FirstNormalObjectId: OIDs below it belong to initdb's objects."""
EMPTY_BATCH = 250_000
"""Empty LOs per statement on the fast path (progress granularity, not a lock limit)."""
MAX_BATCH = 1000
"""LOs per batch on the general path: bounds GRANT locks per transaction far below 6,400."""

Progress = Callable[[int, int], None]
"""Called after each batch with (LOs done, bytes done)."""


@dataclass(frozen=True)
class GenerateResult:
    """What a generate run made. ``oid_ranges`` are inclusive, in creation order."""

    count: int
    total_bytes: int
    seconds: float
    first_oid: int | None
    last_oid: int | None
    table: str | None
    owners: tuple[str, ...]
    grants: int
    comments: int

    @property
    def los_per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_second(self) -> float:
        return self.total_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def _first_oid(conn: psycopg.Connection, spec: GenerateSpec) -> int:
    """The first OID to use: the one asked for if free, else just above every LO."""
    if spec.start_oid is None:
        row = conn.execute(
            "SELECT coalesce(max(oid)::int8, %s) + 1 FROM pg_largeobject_metadata", (FIRST_OID - 1,)
        ).fetchone()
        assert row is not None
        first = max(int(row[0]), FIRST_OID)
        if first + spec.count - 1 > OID_MAX:
            raise DatabaseError(
                f"no room for {spec.count:,} consecutive OIDs above the largest LO OID {first - 1};"
                " give --start-oid"
            )
        return first
    if spec.count == 0:
        return spec.start_oid
    last = spec.start_oid + spec.count - 1
    row = conn.execute(
        "SELECT count(*), min(oid) FROM pg_largeobject_metadata"
        " WHERE oid BETWEEN %s::int8::oid AND %s::int8::oid",
        (spec.start_oid, last),
    ).fetchone()
    assert row is not None
    if row[0]:
        raise DatabaseError(
            f"{row[0]:,} large objects already exist in OIDs {spec.start_oid}..{last}"
            f" (the first is {row[1]}); choose another --start-oid"
        )
    return spec.start_oid


def _check_table(conn: psycopg.Connection, table: str | None) -> None:
    if table is None:
        return
    # quote_ident: the table is created under exactly this name (sql.Identifier).
    row = conn.execute("SELECT to_regclass(quote_ident(%s))", (table,)).fetchone()
    if row and row[0] is not None:
        raise DatabaseError(f"table {table} already exists; drop it or choose another --table")


def _create_table(conn: psycopg.Connection, table: str) -> None:
    conn.execute(
        sql.SQL(
            "CREATE TABLE {} (id bigint PRIMARY KEY, lo oid NOT NULL, size integer NOT NULL,"
            " name text NOT NULL)"
        ).format(sql.Identifier(table))
    )


class _Run:
    """State of one generate run: what exists so far, for the report or for clean-up."""

    def __init__(self, conn: psycopg.Connection, spec: GenerateSpec, first: int):
        self.conn = conn
        self.first = first
        self.spec = spec
        self.owners = owner_names(spec)
        self.roles_created: list[str] = []
        self.made = 0  # LOs known created: OIDs first .. first + made - 1
        # OIDs first .. reach - 1 may exist: a batch interrupted after its COMMIT reached
        # the server is in the database though ``made`` was not yet raised.
        self.reach = first
        self.bytes = 0
        self.grants = 0
        self.comments = 0
        self.table_created = False
        self.next_id = 1
        self.source = ContentSource(spec.size, spec.content, spec.seed)
        self._grant_acc = 0.0
        self._comment_acc = 0.0

    # -- the seed's fast path ---------------------------------------------------------
    def empty_batch(self, n: int) -> None:
        first = self.first + self.made
        self.reach = first + n
        self.conn.execute(
            "SELECT count(lo_create(g::oid)) FROM generate_series(%s::int8, %s::int8) g",
            (first, first + n - 1),
        )
        self.made += n

    # -- the general path -------------------------------------------------------------
    def batch(self, n: int, batch_no: int) -> None:
        datas = [self.source.data(self.source.next_size()) for _ in range(n)]
        with self.conn.transaction():
            owner = self.owners[batch_no % len(self.owners)] if self.owners else None
            if owner:
                self.conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(owner)))
            first = self.first + self.made
            self.reach = first + n
            oids = list(range(first, first + n))
            self.conn.execute(
                "SELECT count(lo_from_bytea(o, d)) FROM unnest(%b::oid[], %b::bytea[]) AS u(o, d)",
                (oids, datas),
            )
            if owner:
                self.conn.execute("RESET ROLE")
            self._decorate(oids, datas)
        self.made += n
        self.bytes += sum(len(d) for d in datas)

    def _take(self, fraction: float, acc: float, n: int) -> tuple[int, float]:
        """How many of the next ``n`` LOs get a decoration, spreading the fraction evenly."""
        acc += fraction * n
        k = int(acc)
        return min(k, n), acc - k

    def _decorate(self, oids: list[int], datas: list[bytes]) -> None:
        spec = self.spec
        if spec.table:
            ids = range(self.next_id, self.next_id + len(oids))
            with self.conn.cursor().copy(
                sql.SQL("COPY {} (id, lo, size, name) FROM STDIN").format(
                    sql.Identifier(spec.table)
                )
            ) as copy:
                for i, oid, d in zip(ids, oids, datas, strict=True):
                    copy.write_row((i, oid, len(d), f"object-{i}.bin"))
            self.next_id += len(oids)
        k, self._grant_acc = self._take(spec.grant_fraction, self._grant_acc, len(oids))
        if k:
            # One GRANT statement lists many LOs; two ACL shapes so pg_dump 17 makes groups.
            half = oids[:k]
            readers, writers = half[: (k + 1) // 2], half[(k + 1) // 2 :]
            for role, priv, group in (
                (READER_ROLE, "SELECT", readers),
                (WRITER_ROLE, "UPDATE", writers),
            ):
                if group:
                    self.conn.execute(
                        sql.SQL("GRANT {} ON LARGE OBJECT {} TO {}").format(
                            sql.SQL(priv),
                            sql.SQL(", ").join(sql.Literal(o) for o in group),
                            sql.Identifier(role),
                        )
                    )
            self.grants += k
        k, self._comment_acc = self._take(spec.comment_fraction, self._comment_acc, len(oids))
        if k:
            step = max(1, len(oids) // k)
            chosen = oids[::step][:k]
            with self.conn.pipeline():
                for o in chosen:
                    self.conn.execute(
                        sql.SQL("COMMENT ON LARGE OBJECT {} IS {}").format(
                            sql.Literal(o), sql.Literal(f"generated by pgblobdump, object {o}")
                        )
                    )
            self.comments += len(chosen)

    # -- clean-up ---------------------------------------------------------------------
    def cleanup(self) -> str:
        """Remove what this run created; returns what was removed, for the message."""
        removed = 0
        for lo in range(self.first, self.reach, MAX_BATCH):
            hi = min(lo + MAX_BATCH, self.reach) - 1
            # Batches of MAX_BATCH: unlinking takes a lock per LO until commit.
            row = self.conn.execute(
                "SELECT count(lo_unlink(oid)) FROM pg_largeobject_metadata"
                " WHERE oid BETWEEN %s::int8::oid AND %s::int8::oid",
                (lo, hi),
            ).fetchone()
            removed += row[0] if row else 0
        parts = [f"{removed:,} LOs"]
        if self.table_created and self.spec.table:
            self.conn.execute(
                sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(self.spec.table))
            )
            parts.append(f"table {self.spec.table}")
        if self.roles_created:
            drop_roles(self.conn, self.roles_created)
            parts.append(f"roles {', '.join(self.roles_created)}")
        return " and ".join(parts)

    def left(self) -> str:
        """What may remain when clean-up is off or impossible."""
        parts = []
        if self.reach > self.first:
            parts.append(
                f"up to {self.reach - self.first:,} LOs (OIDs {self.first}..{self.reach - 1})"
            )
        if self.table_created:
            parts.append(f"table {self.spec.table}")
        if self.roles_created:
            parts.append(f"roles {', '.join(self.roles_created)}")
        return " and ".join(parts)


def generate(
    conninfo: str, spec: GenerateSpec, progress: Progress | None = None, cleanup: bool = True
) -> GenerateResult:
    """Create ``spec.count`` LOs in the database at ``conninfo``.

    On any failure (or Ctrl-C) the LOs, table and roles this run created are removed
    (unless ``cleanup`` is False) and the error says what was removed or left.
    """
    with connect(conninfo, autocommit=True) as conn:
        try:
            first = _first_oid(conn, spec)
            _check_table(conn, spec.table)
        except psycopg.Error as e:
            raise DatabaseError(f"generate failed: {_reason(e)}") from e
        run = _Run(conn, spec, first)
        t0 = time.perf_counter()
        try:
            run.roles_created = ensure_roles(conn, spec)
            if spec.table:
                _create_table(conn, spec.table)
                run.table_created = True
            _fill(run, progress)
        except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt) as e:
            raise _failed(run, e, cleanup) from e
        seconds = time.perf_counter() - t0
    return GenerateResult(
        count=run.made,
        total_bytes=run.bytes,
        seconds=seconds,
        first_oid=run.first if run.made else None,
        last_oid=run.first + run.made - 1 if run.made else None,
        table=spec.table,
        owners=run.owners,
        grants=run.grants,
        comments=run.comments,
    )


def _fill(run: _Run, progress: Progress | None) -> None:
    spec = run.spec
    done = 0
    if not spec.decorated:
        while done < spec.count:
            n = min(EMPTY_BATCH, spec.count - done)
            run.empty_batch(n)
            done += n
            if progress:
                progress(done, 0)
        return
    avg = max(1, (spec.size.low + spec.size.high) // 2)
    per_batch = max(1, min(MAX_BATCH, spec.batch_bytes // avg))
    if spec.owners > 1:
        # Owners take batches in turn: small enough batches that every owner gets a share.
        per_batch = max(1, min(per_batch, -(-spec.count // spec.owners)))
    batch_no = 0
    while done < spec.count:
        n = min(per_batch, spec.count - done)
        run.batch(n, batch_no)
        batch_no += 1
        done += n
        if progress:
            progress(done, run.bytes)


def _reason(e: psycopg.Error) -> str:
    diag = getattr(e, "diag", None)
    text = diag.message_primary if diag and diag.message_primary else str(e)
    return text.splitlines()[0] if text else type(e).__name__


def _failed(run: _Run, e: BaseException, cleanup: bool) -> PgBlobDumpError:
    if isinstance(e, psycopg.Error):
        base: PgBlobDumpError = DatabaseError(f"generate failed: {_reason(e)}")
    elif isinstance(e, KeyboardInterrupt):
        base = Interrupted("generate interrupted")
    else:
        assert isinstance(e, PgBlobDumpError)
        base = e
    if run.reach == run.first and not run.table_created and not run.roles_created:
        return base
    if not cleanup or run.conn.closed or run.conn.broken:
        return type(base)(f"{base}; left in place: {run.left()}")
    try:
        removed = run.cleanup()
    except (psycopg.Error, KeyboardInterrupt):
        return type(base)(f"{base}; clean-up failed too, left in place: {run.left()}")
    return type(base)(f"{base}; removed the {removed} this run created")
