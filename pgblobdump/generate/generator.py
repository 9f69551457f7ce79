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

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import psycopg.errors
from psycopg import sql

from pgblobdump import logs
from pgblobdump.errors import DatabaseError, PgBlobDumpError
from pgblobdump.generate.content import ContentSource, Planned
from pgblobdump.generate.roles import READER_ROLE, WRITER_ROLE, ensure_roles, owner_names
from pgblobdump.generate.spec import GenerateSpec
from pgblobdump.pg.connect import connect
from pgblobdump.pg.failure import failed
from pgblobdump.pg.ledger import Ledger
from pgblobdump.pg.lo import Batch, Grant, LoWriter
from pgblobdump.pg.oidspace import reserve
from pgblobdump.report.reporter import QUIET, Reporter

log = logging.getLogger(__name__)

EMPTY_BATCH = 250_000
"""Empty LOs per statement on the fast path (progress granularity, not a lock limit)."""
MAX_BATCH = 1000
"""LOs per batch on the general path: bounds GRANT locks per transaction far below 6,400."""


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
    sparse: int = 0

    @property
    def los_per_second(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_second(self) -> float:
        return self.total_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


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
            "CREATE TABLE {} (id bigint PRIMARY KEY, lo oid NOT NULL, size bigint NOT NULL,"
            " name text NOT NULL)"
        ).format(sql.Identifier(table))
    )


class _Run:
    """State of one generate run: what it made so far (the writer's ledger) and what next."""

    def __init__(self, writer: LoWriter, spec: GenerateSpec, first: int):
        self.writer = writer
        self.conn = writer.conn
        self.first = first
        self.spec = spec
        self.owners = owner_names(spec)
        self.made = 0  # LOs created and committed: OIDs first .. first + made - 1
        self.bytes = 0
        self.grants = 0
        self.comments = 0
        self.sparse = 0
        self.next_id = 1
        self.source = ContentSource(
            spec.size, spec.content, spec.seed, spec.size_dist, spec.sparse_fraction
        )
        self._grant_acc = 0.0
        self._comment_acc = 0.0

    def _oids(self, n: int) -> tuple[int, int]:
        first = self.first + self.made
        return first, first + n - 1

    # -- the seed's fast path ---------------------------------------------------------
    def empty_batch(self, n: int) -> None:
        lo, hi = self._oids(n)
        with self.writer.batch(lo, hi) as b:
            b.create_empty(lo, hi)
        self.made += n

    # -- the general path -------------------------------------------------------------
    def batch(self, limit: int, batch_no: int) -> None:
        """One transaction: up to ``limit`` LOs, ending early once ``batch_bytes`` are
        planned. Small LOs go in one ``lo_from_bytea`` statement per run of them; big and
        sparse ones are streamed in pieces between, in OID order."""
        plans: list[Planned] = []
        planned = 0
        while len(plans) < limit and planned < self.spec.batch_bytes:
            p = self.source.plan()
            plans.append(p)
            planned += p.size
        n = len(plans)
        lo, hi = self._oids(n)
        with self.writer.batch(lo, hi) as b:
            owner = self.owners[batch_no % len(self.owners)] if self.owners else None
            oids = list(range(lo, hi + 1))
            run_oids: list[int] = []
            run_datas: list[bytes] = []
            for oid, p in zip(oids, plans, strict=True):
                if not p.streamed:
                    run_oids.append(oid)
                    run_datas.append(self.source.data(p.size, p.kind))
                    continue
                if run_oids:
                    b.create(run_oids, run_datas, owner)
                    run_oids, run_datas = [], []
                b.create_pieces(oid, self.source.pieces(p), owner)
                if p.sparse:
                    self.sparse += 1
            if run_oids:
                b.create(run_oids, run_datas, owner)
            self._decorate(b, oids, [p.size for p in plans])
        self.made += n
        self.bytes += planned

    def _take(self, fraction: float, acc: float, n: int) -> tuple[int, float]:
        """How many of the next ``n`` LOs get a decoration, spreading the fraction evenly."""
        acc += fraction * n
        k = int(acc)
        return min(k, n), acc - k

    def _decorate(self, b: Batch, oids: list[int], sizes: list[int]) -> None:
        spec = self.spec
        if spec.table:
            ids = range(self.next_id, self.next_id + len(oids))
            with self.conn.cursor().copy(
                sql.SQL("COPY {} (id, lo, size, name) FROM STDIN").format(
                    sql.Identifier(spec.table)
                )
            ) as copy:
                for i, oid, size in zip(ids, oids, sizes, strict=True):
                    copy.write_row((i, oid, size, f"object-{i}.bin"))
            self.next_id += len(oids)
        k, self._grant_acc = self._take(spec.grant_fraction, self._grant_acc, len(oids))
        if k:
            # Two ACL shapes, so that pg_dump 17 makes several groups.
            half = oids[:k]
            b.grant(Grant(READER_ROLE, ("SELECT",)), half[: (k + 1) // 2])
            b.grant(Grant(WRITER_ROLE, ("UPDATE",)), half[(k + 1) // 2 :])
            self.grants += k
        k, self._comment_acc = self._take(spec.comment_fraction, self._comment_acc, len(oids))
        if k:
            step = max(1, len(oids) // k)
            chosen = oids[::step][:k]
            b.comment([(o, f"generated by pgblobdump, object {o}") for o in chosen])
            self.comments += len(chosen)


def generate(
    conninfo: str, spec: GenerateSpec, reporter: Reporter = QUIET, cleanup: bool = True
) -> GenerateResult:
    """Create ``spec.count`` LOs in the database at ``conninfo``; ``reporter.progress``
    hears (LOs done, bytes done) after each batch.

    On any failure (or Ctrl-C, SIGTERM) exactly the LOs, table and roles this run created
    are removed (unless ``cleanup`` is False) and the error says what was removed or left.
    """
    ledger = Ledger(conninfo, "generate")
    with connect(conninfo, autocommit=True, doing="generate") as conn:
        first = reserve(conn, spec.count, spec.start_oid).first if spec.count else 0
        _check_table(conn, spec.table)
        run = _Run(LoWriter(conn, ledger), spec, first)
        t0 = time.perf_counter()
        try:
            with ledger.transaction(conn) as pending:
                ensure_roles(conn, spec, pending.roles)
                if spec.table:
                    _create_table(conn, spec.table)
                    pending.tables.append(spec.table)
            with logs.phase(log, f"creating {spec.count:,} LOs from OID {first}"):
                _fill(run, reporter.progress)
        except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt) as e:
            raise failed(e, "generate", ledger, conn, _taken, cleanup) from e
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
        sparse=run.sparse,
    )


def _fill(run: _Run, progress: Callable[[int, int], None]) -> None:
    spec = run.spec
    done = 0
    if not spec.decorated:
        while done < spec.count:
            n = min(EMPTY_BATCH, spec.count - done)
            run.empty_batch(n)
            done += n
            progress(done, 0)
        return
    # Comments take a lock each until commit: no more per batch than the lock budget.
    # (Bytes are bounded as each batch is planned: it ends once batch_bytes are drawn.)
    cap = min(MAX_BATCH, run.writer.budget.per_transaction) if spec.comment_fraction else MAX_BATCH
    per_batch = max(1, cap)
    if spec.owners > 1:
        # Owners take batches in turn: small enough batches that every owner gets a share.
        per_batch = max(1, min(per_batch, -(-spec.count // spec.owners)))
    batch_no = 0
    while done < spec.count:
        run.batch(min(per_batch, spec.count - done), batch_no)
        batch_no += 1
        done = run.made
        progress(done, run.bytes)


def _taken(oid: str) -> str:
    return f"OID {oid} was taken by another session"
