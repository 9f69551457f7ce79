"""Write and read large objects set-based: the one LO writer and reader every command uses.

Writing (generate today; restore, unpack, migrate ``--to lo`` next):
- one transaction per batch, opened through the run's ``Ledger``, so clean-up removes
  exactly the OIDs made;
- contents go to ``lo_from_bytea`` over ``unnest`` of two binary arrays (built at C speed,
  pg/arrays.py): one statement and one round trip per batch, no staging table;
- owners through ``SET LOCAL ROLE`` around the create (a new LO belongs to the current
  role), never a per-LO ``ALTER LARGE OBJECT ... OWNER``, which takes a lock per LO;
- ACLs as one ``GRANT ... ON LARGE OBJECT o1, o2, ...`` per distinct grant;
- comments one ``COMMENT`` per LO (there is no other way) sent as one query string; each
  holds a lock until commit, so a batch's comments stay within the lock budget;
- an LO over 1 GB (``lo_from_bytea``'s limit, a bytea's) is created empty and filled with
  ``lo_put`` in chunks, in one transaction;
- an LO given in runs (a large one, or one with holes: ``Batch.write_at``) gets only its
  runs' pages, so a hole stays a hole; small LOs with holes are written set-based in a
  batch: created as the others, then ``put_many`` and ``truncate_many`` over arrays.

Reading: counts, contents by OID range through one binary ``COPY``, an LO of any size in
ranges, and digests of LOs by OID range.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.pg.arrays import bytea_array, oid_array
from pgblobdump.pg.ledger import Ledger, to_ranges
from pgblobdump.pg.locks import LockBudget
from pgblobdump.pgconstants import INV_WRITE, MAX_ALLOC_SIZE

BYTEA_MAX = MAX_ALLOC_SIZE
"""The largest value ``lo_from_bytea`` and ``lo_get`` can move at once (a bytea's limit)."""
PUT_CHUNK = 64 << 20
"""Bytes per ``lo_put`` when an LO is written in pieces."""


@dataclass(frozen=True)
class Grant:
    """One privilege grant on LOs: ``GRANT privileges ON LARGE OBJECT ... TO grantee``.
    ``grantee`` None is PUBLIC. (The grantor is whoever owns the LO: a superuser's GRANT
    is recorded as the owner's.)"""

    grantee: str | None
    privileges: tuple[str, ...]
    with_grant_option: bool = False


class Batch:
    """The statements of one writer transaction; see ``LoWriter.batch``."""

    def __init__(self, conn: psycopg.Connection, locks: int) -> None:
        self.conn = conn
        self.locks_left = locks

    def create(
        self, oids: Sequence[int], datas: Sequence[bytes | memoryview], owner: str | None = None
    ) -> None:
        """Create LOs ``oids`` with contents ``datas`` (each at most BYTEA_MAX bytes),
        owned by ``owner`` (None: the connected role). All or nothing: an OID that exists
        fails the statement, and with it the batch."""
        with self._as(owner):
            self.conn.execute(
                "SELECT count(lo_from_bytea(o, d)) FROM unnest(%s::oid[], %s::bytea[]) AS u(o, d)",
                (oid_array(oids), bytea_array(datas)),
            )

    def create_empty(self, first: int, last: int, owner: str | None = None) -> None:
        """Create empty LOs ``first..last`` in one statement (the server's fastest path)."""
        with self._as(owner):
            self.conn.execute(
                "SELECT count(lo_create(g::oid)) FROM generate_series(%s::int8, %s::int8) g",
                (first, last),
            )

    def create_many_empty(self, oids: Sequence[int], owner: str | None = None) -> None:
        """Create empty LOs with these OIDs (any OIDs) in one statement."""
        with self._as(owner):
            self.conn.execute(
                "SELECT count(lo_create(o)) FROM unnest(%s::oid[]) AS o", (oid_array(oids),)
            )

    def create_large(self, oid: int, chunks: Iterable[bytes], owner: str | None = None) -> int:
        """Create LO ``oid`` from ``chunks`` of any total size (over 1 GB too), each
        written with ``lo_put`` in pieces of at most PUT_CHUNK bytes; returns its size."""
        offset = 0
        with self._as(owner):
            self.conn.execute("SELECT lo_create(%s::int8::oid)", (oid,))
            for chunk in chunks:
                view = memoryview(chunk)
                for start in range(0, len(view), PUT_CHUNK):
                    piece = view[start : start + PUT_CHUNK]
                    self.conn.execute(
                        "SELECT lo_put(%s::int8::oid, %s, %b)", (oid, offset, bytes(piece))
                    )
                    offset += len(piece)
        return offset

    def create_pieces(
        self, oid: int, pieces: Iterable[tuple[int, bytes]], owner: str | None = None
    ) -> None:
        """Create LO ``oid`` and write each (offset, bytes) piece with ``lo_put``; pages
        no piece touches stay missing in pg_largeobject (holes, read back as zeros)."""
        with self._as(owner):
            self.conn.execute("SELECT lo_create(%s::int8::oid)", (oid,))
            for offset, data in pieces:
                self.conn.execute("SELECT lo_put(%s::int8::oid, %s, %b)", (oid, offset, data))

    def write_at(
        self,
        oid: int,
        offset: int,
        data: bytes | memoryview,
        size: int | None = None,
        create: bool = False,
        owner: str | None = None,
    ) -> None:
        """One run of LO ``oid``'s bytes, ``data`` at ``offset``, the LO written run by run
        (a large LO, or one with holes): pages no run touches stay missing in
        pg_largeobject, and read back as zeros, as at the source.

        ``create``: the run is the LO's first; the LO is made, as ``owner``, with
        ``lo_from_bytea`` when the run starts it, else with ``lo_create``. ``size``: given
        with the LO's last run; when that run has no bytes (the LO ends in a hole), the
        LO's length is set with ``lo_truncate64``. An LO's length is where its last page
        ends, and the server's inv_truncate writes that page (zeros up to the length), as
        the source's lo_truncate or lo_put past the end did."""
        view = memoryview(data)
        first = 0
        if create:
            with self._as(owner):
                if offset == 0 and 0 < len(view) <= PUT_CHUNK:
                    self.conn.execute("SELECT lo_from_bytea(%s::int8::oid, %b)", (oid, bytes(view)))
                    first = len(view)
                else:
                    self.conn.execute("SELECT lo_create(%s::int8::oid)", (oid,))
        for start in range(first, len(view), PUT_CHUNK):
            piece = bytes(view[start : start + PUT_CHUNK])
            self.conn.execute("SELECT lo_put(%s::int8::oid, %s, %b)", (oid, offset + start, piece))
        if size and not len(view):
            # the descriptor closes with the transaction
            self.conn.execute(
                f"SELECT lo_truncate64(lo_open(%s::int8::oid, {INV_WRITE}), %s)", (oid, size)
            )

    def put_many(
        self, oids: Sequence[int], offsets: Sequence[int], datas: Sequence[bytes | memoryview]
    ) -> None:
        """``lo_put`` of each (oid, offset, bytes) in one statement over three arrays: the
        further runs of LOs this batch created with holes between them (each at most
        BYTEA_MAX bytes; pages no run touches stay missing)."""
        if not oids:
            return
        self.conn.execute(
            "SELECT count(lo_put(o, f, d))"
            " FROM unnest(%s::oid[], %s::int8[], %s::bytea[]) AS u(o, f, d)",
            (oid_array(oids), list(offsets), bytea_array(datas)),
        )

    def truncate_many(self, oids: Sequence[int], sizes: Sequence[int]) -> None:
        """Set the lengths of LOs this batch created that end in a hole, in one statement
        (``lo_truncate64`` of ``lo_open`` over two arrays). The server's inv_truncate
        writes the page the length ends in, as the source's lo_truncate or lo_put past
        the end did; the descriptors (INV_WRITE) close with the transaction."""
        if not oids:
            return
        self.conn.execute(
            f"SELECT count(lo_truncate64(lo_open(o, {INV_WRITE}), n))"
            " FROM unnest(%s::oid[], %s::int8[]) AS u(o, n)",
            (oid_array(oids), list(sizes)),
        )

    def set_acls(self, oids: Sequence[int], acls: Sequence[str]) -> None:
        """Set LOs' ACLs exactly (``aclitem[]`` text, grantors included) in one statement:
        a catalog update, which only a superuser may make."""
        self.conn.execute(
            "UPDATE pg_catalog.pg_largeobject_metadata m SET lomacl = u.acl::aclitem[]"
            " FROM unnest(%s::oid[], %s::text[]) AS u(o, acl) WHERE m.oid = u.o",
            (list(oids), list(acls)),
        )

    def grant(self, grant: Grant, oids: Sequence[int]) -> None:
        """One GRANT statement for all ``oids`` (no lock per LO is held by it)."""
        if not oids:
            return
        to = sql.SQL("PUBLIC") if grant.grantee is None else sql.Identifier(grant.grantee)
        option = sql.SQL(" WITH GRANT OPTION" if grant.with_grant_option else "")
        self.conn.execute(
            sql.SQL("GRANT {} ON LARGE OBJECT {} TO {}{}").format(
                sql.SQL(", ").join(sql.SQL(p) for p in grant.privileges),
                sql.SQL(", ").join(sql.Literal(o) for o in oids),
                to,
                option,
            )
        )

    def comment(self, comments: Sequence[tuple[int, str]]) -> None:
        """``COMMENT ON LARGE OBJECT`` for each (oid, text): many statements in one query
        string (no parameters, so a simple query: one round trip, no pipeline state). Each
        holds a lock until commit; the batch's lock budget must cover them."""
        if not comments:
            return
        if len(comments) > self.locks_left:
            raise ValueError(
                f"{len(comments)} comments exceed the batch's lock budget ({self.locks_left})"
            )
        self.locks_left -= len(comments)
        self.conn.execute(
            sql.SQL("; ").join(
                sql.SQL("COMMENT ON LARGE OBJECT {} IS {}").format(sql.Literal(o), sql.Literal(t))
                for o, t in comments
            )
        )

    @contextlib.contextmanager
    def _as(self, owner: str | None) -> Iterator[None]:
        if owner is None:
            yield
            return
        self.conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(owner)))
        yield
        self.conn.execute("RESET ROLE")


class LoWriter:
    """Creates LOs batch by batch on ``conn``, each batch one transaction entered in
    ``ledger`` (so a failed run's clean-up removes exactly what it made)."""

    def __init__(self, conn: psycopg.Connection, ledger: Ledger) -> None:
        self.conn = conn
        self.ledger = ledger
        self.budget = LockBudget.read(conn)

    @contextlib.contextmanager
    def batch(self, first: int, last: int) -> Iterator[Batch]:
        """One transaction creating LOs ``first..last`` (inclusive) and nothing else: the
        ledger enters that range when it commits."""
        with self.ledger.transaction(self.conn, los=(first, last)):
            yield Batch(self.conn, self.budget.per_transaction)

    def batch_of(self, oids: Sequence[int]) -> contextlib.AbstractContextManager[Batch]:
        """One transaction creating exactly the LOs ``oids`` (ascending), and nothing else."""
        return self.batch_of_ranges(to_ranges(oids))

    @contextlib.contextmanager
    def batch_of_ranges(self, ranges: Sequence[tuple[int, int]]) -> Iterator[Batch]:
        """One transaction creating exactly the LOs of ``ranges`` (inclusive, ascending)."""
        with self.ledger.transaction(self.conn, los=ranges):
            yield Batch(self.conn, self.budget.per_transaction)


# -- reading ----------------------------------------------------------------------------
def read_range(conn: psycopg.Connection, first: int, last: int) -> Iterator[tuple[int, bytes]]:
    """(oid, contents) of every LO with an OID in ``first..last``, in OID order, through
    one binary COPY: no round trip per LO. An LO over 1 GB cannot come this way (a bytea's
    limit; the server says so): read it with ``read_chunks``."""
    with conn.cursor().copy(
        "COPY (SELECT oid::int8, lo_get(oid) FROM pg_catalog.pg_largeobject_metadata"
        f" WHERE oid BETWEEN {int(first)}::int8::oid AND {int(last)}::int8::oid ORDER BY oid)"
        " TO STDOUT (FORMAT binary)"
    ) as copy:
        copy.set_types(["int8", "bytea"])
        for oid, data in copy.rows():
            yield int(oid), bytes(data)


def read_chunks(conn: psycopg.Connection, oid: int, chunk: int = PUT_CHUNK) -> Iterator[bytes]:
    """The contents of LO ``oid`` of any size, ``chunk`` bytes per round trip."""
    offset = 0
    while True:
        row = conn.execute("SELECT lo_get(%s::int8::oid, %s, %s)", (oid, offset, chunk)).fetchone()
        assert row is not None
        data = bytes(row[0])
        if data:
            yield data
        if len(data) < chunk:
            return
        offset += len(data)


@dataclass(frozen=True)
class Digest:
    """An LO's size and BLAKE2b-128 digest of its contents."""

    oid: int
    size: int
    digest: str


def digests(conn: psycopg.Connection, first: int, last: int) -> Iterator[Digest]:
    """Size and digest of every LO with an OID in ``first..last``, in OID order."""
    for oid, data in read_range(conn, first, last):
        yield Digest(oid, len(data), hashlib.blake2b(data, digest_size=16).hexdigest())
