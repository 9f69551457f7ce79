"""What import adds to each batch's transaction through restore's writer hooks
(packed/restore/hooks.RemapHooks): the batch's LOs verified against their files'
sha256, their ``--table`` rows written, their files entered in the journal
(files/importing/state.py), all before the batch commits; and, when a failed run's clean-up
removes its LOs, their journal entries and rows undone in the removing transaction."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

import psycopg

from pgblobdump.errors import DatabaseError
from pgblobdump.files.importing import rows as importrows
from pgblobdump.files.importing import state as importstate
from pgblobdump.files.importing.ingest import Book, FileRec

VERIFY_ON_SERVER_MAX = 64 << 20
"""An LO up to this size is hashed on the server (``sha256(lo_get(oid))``, one
statement per batch); a larger one is read back in VERIFY_RANGE ranges and hashed here
(the server has no incremental sha256, and a bytea holds at most 1 GB)."""
VERIFY_RANGE = 8 << 20


class ChecksumMismatch(DatabaseError):
    """An LO's bytes on the server differ from its file's as read."""


def verify(conn: psycopg.Connection, oids: Sequence[int], recs: Sequence[FileRec]) -> None:
    """In the batch's transaction: each LO's sha256 equals its file's, else
    ChecksumMismatch (the batch rolls back)."""
    small = [(o, r) for o, r in zip(oids, recs, strict=True) if r.size <= VERIFY_ON_SERVER_MAX]
    if small:
        got = conn.execute(
            "SELECT sha256(lo_get(o)) FROM unnest(%s::int8[]) WITH ORDINALITY AS u(o, i)"
            " ORDER BY i",
            ([o for o, _ in small],),
        ).fetchall()
        for (oid, rec), (digest,) in zip(small, got, strict=True):
            _check(oid, rec, bytes(digest))
    for oid, rec in zip(oids, recs, strict=True):
        if rec.size > VERIFY_ON_SERVER_MAX:
            h = hashlib.sha256()
            for at in range(0, rec.size, VERIFY_RANGE):
                row = conn.execute(
                    "SELECT lo_get(%s::int8::oid, %s, %s)", (oid, at, VERIFY_RANGE)
                ).fetchone()
                h.update(row[0] if row else b"")
            _check(oid, rec, h.digest())


def _check(oid: int, rec: FileRec, digest: bytes) -> None:
    if digest != rec.sha256:
        raise ChecksumMismatch(
            f"LO {oid} does not hold what {rec.key} held when read (sha256 {digest.hex()[:16]}..."
            f" on the server, {rec.sha256.hex()[:16]}... read): its batch was rolled back"
        )


class ImportHooks:
    """The run's hooks, shared by every job's writer (each call on its own
    connection). ``unreferenced``: LOs that rows updated by this run named before."""

    def __init__(self, run: str, book: Book, rows: importrows.Resolved | None) -> None:
        self.run = run
        self.book = book
        self.rows = rows
        self.lock = threading.Lock()
        self.inserted = self.updated = 0
        self.unreferenced: list[int] = []
        self.files = 0

    def record(self, conn: psycopg.Connection, oids: list[int]) -> None:
        recs = self.book.take(oids)
        paths = [r.key for r in recs]
        if self.rows is not None:
            actions = importrows.apply(conn, self.rows, paths, oids)
        else:
            actions = [("-", None)] * len(oids)
        # the journal entered and the LOs up to VERIFY_ON_SERVER_MAX checked in one
        # statement; the larger ones read back
        wrong = importstate.record(
            conn, self.run,
            [(o, r.key, r.size, r.mtime_ns, r.etag, r.sha256, a, old)
             for o, r, (a, old) in zip(oids, recs, actions, strict=True)],
            VERIFY_ON_SERVER_MAX,
        )  # fmt: skip
        if wrong:
            i = oids.index(wrong[0])
            verify(conn, [oids[i]], [recs[i]])  # says how
            raise ChecksumMismatch(f"LO {oids[i]} does not hold what {recs[i].key} held when read")
        large = [(o, r) for o, r in zip(oids, recs, strict=True) if r.size > VERIFY_ON_SERVER_MAX]
        if large:
            verify(conn, [o for o, _ in large], [r for _, r in large])
        olds = [old for a, old in actions if a == importrows.UPDATED and old is not None]
        with self.lock:
            self.files += len(oids)
            self.inserted += sum(a == importrows.INSERTED for a, _ in actions)
            self.updated += sum(a == importrows.UPDATED for a, _ in actions)
            self.unreferenced += olds

    def forget(self, conn: psycopg.Connection, ranges: list[tuple[int, int]]) -> None:
        entries = importstate.forget(conn, self.run, ranges)
        if self.rows is not None:
            importrows.undo(conn, self.rows, entries)
