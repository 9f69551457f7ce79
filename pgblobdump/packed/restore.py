"""``restore``: a packed archive's LOs into a database, with their OIDs, owners, ACLs and
comments, in batches sized from the server's lock table.

Every batch is one transaction through the shared LO writer (pg/lo.py) and the run's
ledger: a failure or an interrupt removes exactly the LOs this run created, and says so.
``resume`` (after a kill -9, when no clean-up could run) skips the LOs that exist: batches
commit whole, so an LO that exists was restored completely.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import psycopg
import psycopg.errors
from psycopg import sql

from pgblobdump.errors import DatabaseError, PgBlobDumpError
from pgblobdump.packed.index import Index, Meta
from pgblobdump.packed.reader import LoPiece
from pgblobdump.pg import acl as aclmod
from pgblobdump.pg.connect import connect
from pgblobdump.pg.failure import failed
from pgblobdump.pg.ledger import Ledger
from pgblobdump.pg.lo import Batch, Grant, LoWriter
from pgblobdump.report.reporter import QUIET, Reporter

BATCH_BYTES = 8 << 20
"""LO bytes per batch: one round trip carries them (a binary bytea[] parameter)."""
BATCH_LOS = 50_000
"""LOs per batch at most when nothing but creation takes locks (empty LOs, no comments)."""


class OnConflict(enum.StrEnum):
    ERROR = "error"
    SKIP = "skip"


@dataclass(frozen=True)
class RestoreRequest:
    no_owner: bool = False
    no_acl: bool = False
    no_comments: bool = False
    on_conflict: OnConflict = OnConflict.ERROR
    resume: bool = False

    @property
    def skipping(self) -> bool:
        return self.resume or self.on_conflict is OnConflict.SKIP


@dataclass(frozen=True)
class RestoreResult:
    los: int
    bytes: int
    skipped: int
    seconds: float


class _Restorer:
    def __init__(self, conn: psycopg.Connection, ledger: Ledger, req: RestoreRequest) -> None:
        self.conn = conn
        self.req = req
        self.writer = LoWriter(conn, ledger)
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        self.superuser = bool(row and row[0])
        self.known_roles: set[str] = set()
        self.batch: list[tuple[int, Meta, bytes | memoryview]] = []
        self.batch_bytes = 0
        # Creating LOs and one GRANT (or ACL update) for many takes no lock per LO; a
        # comment does, until commit: a batch holds at most the lock budget of them.
        self.batch_comments = 0
        self.comments_max = self.writer.budget.per_transaction
        self._checked: set[Meta] = set()
        self.los = self.bytes = self.skipped = 0
        self._large: contextlib.ExitStack | None = None
        self._large_batch: Batch | None = None

    # -- roles ------------------------------------------------------------------------
    def check_roles(self, metas: Iterable[Meta]) -> None:
        """Every role the metadata names must exist on the target (unless not restored)."""
        wanted: set[str] = set()
        for m in metas:
            if m.owner and not self.req.no_owner:
                wanted.add(m.owner)
            if m.acl and not self.req.no_acl:
                for item in m.acl:
                    a = aclmod.parse(item)
                    wanted.update(r for r in (a.grantee, a.grantor) if r)
        wanted -= self.known_roles
        if not wanted:
            return
        rows = self.conn.execute(
            "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (sorted(wanted),)
        ).fetchall()
        have = {r[0] for r in rows}
        missing = sorted(wanted - have)
        if missing:
            raise DatabaseError(
                f"roles missing on the target: {', '.join(missing)}; create them, or restore"
                " with --no-owner and --no-acl"
            )
        self.known_roles |= have

    # -- pieces -----------------------------------------------------------------------
    def take(self, p: LoPiece) -> None:
        if p.offset == 0 and p.meta not in self._checked:
            self.check_roles((p.meta,))
            self._checked.add(p.meta)
        if p.offset == 0 and p.last:
            self.batch.append((p.oid, p.meta, p.data))
            self.batch_bytes += p.size
            if p.meta.comment is not None and not self.req.no_comments:
                self.batch_comments += 1
            if (
                len(self.batch) >= BATCH_LOS
                or self.batch_bytes >= BATCH_BYTES
                or self.batch_comments >= self.comments_max
            ):
                self.flush()
            return
        # A large LO: a transaction of its own, filled piece by piece.
        if p.offset == 0:
            self.flush()
            if self.req.skipping and self._existing([p.oid]):
                self.skipped += 1
                self._large = contextlib.ExitStack()  # swallow its pieces
                self._large_batch = None
                return
            self._large = contextlib.ExitStack()
            self._large_batch = self._large.enter_context(self.writer.batch_of([p.oid]))
            self._large_batch.create_many_empty([p.oid], self._owner(p.meta))
        assert self._large is not None
        if self._large_batch is not None:
            self._large_batch.put(p.oid, p.offset, p.data)
        if p.last:
            stack, b = self._large, self._large_batch
            self._large = self._large_batch = None
            if b is not None:
                self._decorate(b, [(p.oid, p.meta)])
                self.los += 1
                self.bytes += p.size
            stack.close()

    def _owner(self, meta: Meta) -> str | None:
        return None if self.req.no_owner else meta.owner

    def _existing(self, oids: list[int]) -> set[int]:
        rows = self.conn.execute(
            "SELECT oid::int8 FROM pg_largeobject_metadata WHERE oid = ANY(%s::int8[]::oid[])",
            (oids,),
        ).fetchall()
        return {int(r[0]) for r in rows}

    def flush(self) -> None:
        if not self.batch:
            return
        batch, self.batch, self.batch_bytes, self.batch_comments = self.batch, [], 0, 0
        if self.req.skipping:
            there = self._existing([o for o, _m, _d in batch])
            if there:
                self.skipped += len(there)
                batch = [x for x in batch if x[0] not in there]
                if not batch:
                    return
        by_owner: dict[str | None, list[tuple[int, bytes | memoryview]]] = defaultdict(list)
        for oid, meta, data in batch:
            by_owner[self._owner(meta)].append((oid, data))
        with self.writer.batch_of([o for o, _m, _d in batch]) as b:
            for owner, items in by_owner.items():
                empty = [o for o, d in items if not len(d)]
                full = [(o, d) for o, d in items if len(d)]
                if empty:
                    b.create_many_empty(empty, owner)
                if full:
                    b.create([o for o, _ in full], [bytes(d) for _, d in full], owner)
            self._decorate(b, [(o, m) for o, m, _d in batch])
        self.los += len(batch)
        self.bytes += sum(len(d) for _o, _m, d in batch)

    def _decorate(self, b: Batch, items: list[tuple[int, Meta]]) -> None:
        if not self.req.no_acl:
            with_acl = [(o, m) for o, m in items if m.acl is not None]
            if with_acl and self.superuser:
                b.set_acls([o for o, _ in with_acl],
                           [aclmod.array_literal(m.acl or ()) for _, m in with_acl])  # fmt: skip
            elif with_acl:
                self._grant(b, with_acl)
        if not self.req.no_comments:
            b.comment([(o, m.comment) for o, m in items if m.comment is not None])

    def _grant(self, b: Batch, items: list[tuple[int, Meta]]) -> None:
        """ACLs as GRANTs (for a role that may not update the catalog): each grantor's
        grants made as that grantor, so the server records the same grantor."""
        groups: dict[tuple[str, str | None, tuple[str, ...], bool], list[int]] = defaultdict(list)
        for oid, meta in items:
            for text in meta.acl or ():
                a = aclmod.parse(text)
                if a.grantee == meta.owner and a.grantee == a.grantor:
                    continue  # the owner's own entry: implied by any grant
                plain = tuple(p for p in a.privileges if p not in a.grantable)
                if plain:
                    groups[(a.grantor, a.grantee, plain, False)].append(oid)
                if a.grantable:
                    groups[(a.grantor, a.grantee, a.grantable, True)].append(oid)
        for (grantor, grantee, privileges, option), oids in groups.items():
            self.conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(grantor)))
            b.grant(Grant(grantee, privileges, option), oids)
            self.conn.execute("RESET ROLE")

    def finish(self) -> None:
        self.flush()


def precheck(conn: psycopg.Connection, index: Index) -> None:
    """Refuse before writing anything when an archive's OID already exists on the target.

    One query asks which of the index's blocks (4,096 LOs each, by first and last OID)
    overlap an existing LO; only those blocks are read and their OIDs looked up: a target
    with no LOs in the archive's range costs one statement, whatever the LO count.
    """
    firsts = [b.first for b in index.blocks]
    lasts = [b.last for b in index.blocks]
    if not firsts:
        return
    hits = conn.execute(
        "SELECT r.f FROM unnest(%s::int8[], %s::int8[]) AS r(f, l) WHERE EXISTS (SELECT 1"
        " FROM pg_largeobject_metadata WHERE oid BETWEEN r.f::oid AND r.l::oid) ORDER BY 1",
        (firsts, lasts),
    ).fetchall()
    for (first,) in hits:
        block = next(b for b in index.blocks if b.first == first)
        oids = [r.oid for r in index.range(block.first, block.last)]
        rows = conn.execute(
            "SELECT oid::int8 FROM pg_largeobject_metadata WHERE oid = ANY(%s::int8[]::oid[])"
            " ORDER BY 1 LIMIT 5",
            (oids,),
        ).fetchall()
        if rows:
            more = f" (and {', '.join(str(r[0]) for r in rows[1:])}...)" if len(rows) > 1 else ""
            raise DatabaseError(
                f"LO {rows[0][0]} already exists in the target{more}; restore with"
                " --on-conflict skip to keep what is there, or into another database"
            )


def restore(
    conninfo: str,
    pieces: Iterator[LoPiece],
    req: RestoreRequest,
    reporter: Reporter = QUIET,
    index: Index | None = None,
    metas: Iterable[Meta] | None = None,
) -> RestoreResult:
    """Restore ``pieces`` into the database at ``conninfo``. With an archive's ``index``
    and ``metas``, conflicts and missing roles are found before anything is
    written; from a stream they are found as they come (and what was made is removed)."""
    t0 = time.perf_counter()
    ledger = Ledger(conninfo)
    with connect(conninfo, autocommit=True, doing="restore") as conn:
        r = _Restorer(conn, ledger, req)
        if metas is not None:
            r.check_roles(metas)
        if index is not None and not req.skipping:
            precheck(conn, index)
        try:
            last = time.monotonic()
            for piece in pieces:
                r.take(piece)
                now = time.monotonic()
                if now - last > 0.1:
                    last = now
                    reporter.progress(r.los + r.skipped, r.bytes)
            r.finish()
        except (PgBlobDumpError, psycopg.Error, KeyboardInterrupt) as e:
            resume = "; run the restore again with --resume to finish it"
            raise failed(e, "restore", ledger, conn, _taken, if_left=resume) from e
    reporter.progress(r.los + r.skipped, r.bytes)
    return RestoreResult(r.los, r.bytes, r.skipped, time.perf_counter() - t0)


def _taken(oid: str) -> str:
    return f"LO {oid} already exists in the target; restore with --on-conflict skip to keep it"
