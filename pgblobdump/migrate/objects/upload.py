"""``--to s3://``: one object for each LO the column references, at ``prefix/<oid>`` with
its sha256 in its metadata, written before the column's switch and verified.

Every object the run stores is entered in ``migration_objects`` once the store has it
(``Putter.put``'s ``done``), in the migrated database. An object found at a key before
the run writes it is reused only when its sha256 metadata and size are the LO's (a run
killed after the store had it, before it was entered), and refused otherwise: nothing
the run did not write is overwritten. ``verify`` then checks each entered object twice:
the LO as the server reads it now against the sha256 entered (an LO written in place
since it was read is written anew), and the object as the store lists it: its size, and
its ETag where that is the MD5 of the bytes written (the store's own digest of what it
received in one PUT), else its sha256 metadata read back (a HEAD). The switch waits
until every value of the new column names a verified object (``waiting``).

Memory: OIDs are kept in a 4-byte array, LOs read in windows of ``WINDOW`` bytes a few
hundred at a time, objects listed and verified in pages; an LO larger than a window is
read in 1 MiB ranges twice (its digests, then its bytes streamed to the store), never
held whole (an object up to the store's one-PUT size is, by the putter).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
from array import array
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgblobdump import logs
from pgblobdump.errors import DatabaseError, FileError, ObjectStorageError
from pgblobdump.files.keys import Entry, Pieces
from pgblobdump.migrate.move import Move
from pgblobdump.migrate.objects.target import Target
from pgblobdump.migrate.state import Migration
from pgblobdump.pg.catalog import lo_exists
from pgblobdump.report.reporter import Reporter

if TYPE_CHECKING:
    from pgblobdump.files.objects import Place, Putter

log = logging.getLogger(__name__)

SHA = "sha256"
"""The metadata entry (``x-amz-meta-sha256``) holding an object's sha256, in hex."""
CHUNK = 256
"""LOs read in one query."""
WINDOW = 64 << 10
"""Bytes of each LO read by that query; a larger LO is read on in ``RANGE``s."""
RANGE = 1 << 20
IN_FLIGHT = 16
"""Objects stored (and verified) at once."""
PAGE = 1000
"""Objects verified per transaction."""


@dataclass(frozen=True)
class Written:
    value: str
    lo: int
    size: int
    sha256: bytes
    md5: bytes
    """What a store's ETag of an object stored in one PUT is (verify reads it listed)."""
    reused: bool = False
    """At its key before this run wrote it: never removed by the run."""


def objects_table(schema: str) -> sql.Identifier:
    return sql.Identifier(schema, "migration_objects")


class Step:
    """What a run's step between its column and its objects works with (the way out,
    Uploader; the way back, back.Fetcher): the run, its state, its table and place."""

    def __init__(
        self, conn: psycopg.Connection, mig: Migration, schema: str, table: sql.Composable,
        move: Move, reporter: Reporter,
    ) -> None:  # fmt: skip
        assert mig.target is not None
        self.conn, self.mig, self.schema, self.table = conn, mig, schema, table
        self.move, self.reporter = move, reporter
        self.target = Target.parse(mig.target, mig.url)


class Uploader(Step):
    """The objects of one ``s3`` run: ``sync`` writes and verifies what is missing."""

    def __init__(
        self, conn: psycopg.Connection, mig: Migration, schema: str, table: sql.Composable,
        move: Move, reporter: Reporter,
    ) -> None:  # fmt: skip
        super().__init__(conn, mig, schema, table, move, reporter)
        self.written = 0
        self.reused = 0
        self.checked = False

    def sync(self) -> None:
        """Store an object for every LO the column names that has none entered, then
        verify every object entered and not yet verified. Safe to repeat."""
        from pgblobdump.files.objects import open_place

        with open_place(self.target.where) as place:
            for _ in range(5):
                todo = self._unstored()
                if todo:
                    if not self.checked:
                        # Once a process, only to write: the bucket's check lists the
                        # prefix whole (storage/s3.py check_bucket), 100k objects ~80 MB.
                        place.check_writable()
                        self.checked = True
                    with logs.phase(log, f"writing {len(todo):,} objects"):
                        self._store(place, todo)
                with logs.phase(log, "verifying the objects"):
                    if not self._verify(place):
                        return
        raise ObjectStorageError(
            f"LOs of {self.mig.table_name}.{self.mig.column_name} kept changing while their"
            " objects were written; run again when the writes calm down"
        )

    def _unstored(self) -> array[int]:
        """The LOs the column names (old column) with no object entered, in OID order."""
        o = self.move.ref("x")
        rows = self.conn.execute(
            sql.SQL(
                "SELECT DISTINCT o FROM (SELECT {o} AS o FROM {t} x) s WHERE o IS NOT NULL"
                " AND " + lo_exists("s.o") + " AND NOT EXISTS (SELECT 1 FROM {f} f"
                " WHERE f.run_id = %(id)s AND f.value = %(p)s || s.o::text) ORDER BY 1"
            ).format(o=o, t=self.table, f=objects_table(self.schema)),
            {"id": self.mig.id, "p": self.target.value_prefix},
        )  # fmt: skip
        out = array("I")
        for r in rows:
            out.append(int(r[0]))
        return out

    def _read(self, oids: array[int]) -> Iterator[tuple[int, bytes | None]]:
        """Each LO's bytes when they fit a window (one query for all), else None: the
        LO is read on in ranges, streamed (``_big``)."""
        rows = self.conn.execute(
            "SELECT o, pg_catalog.lo_get(o, 0, %s) FROM unnest(%s::oid[]) o"
            " WHERE " + lo_exists("o"),
            (WINDOW + 1, list(oids)),
        ).fetchall()
        for oid, head in rows:
            data = bytes(head)
            yield int(oid), (data if len(data) <= WINDOW else None)

    def _store(self, place: Place, todo: array[int]) -> None:
        if self.mig.verify_xmin is None:
            # LO pages written by this transaction or later may not be in the objects;
            # finish looks at exactly those after the switch.
            row = self.conn.execute("SELECT txid_snapshot_xmin(txid_current_snapshot())").fetchone()
            assert row is not None
            self._save(verify_xmin=int(row[0]))
        existing = self._existing(place)
        self.reporter.task("writing objects", len(todo))
        lock = threading.Lock()
        stored: list[Written] = []
        pending: dict[str, Written] = {}

        def done(key: str) -> None:
            with lock:
                stored.append(pending.pop(key))

        def put(putter: Putter, w: Written, pieces: Pieces) -> None:
            key = str(w.lo)
            if key in existing:
                self._reuse(place, key, existing[key], w)
                with lock:
                    stored.append(dataclasses.replace(w, reused=True))
                return
            with lock:
                pending[key] = w
            putter.put(key, pieces, w.size, {SHA: w.sha256.hex()}, done)
            self.written += 1

        count = 0
        with place.putter(in_flight=IN_FLIGHT) as putter:
            for start in range(0, len(todo), CHUNK):
                for oid, data in self._read(todo[start : start + CHUNK]):
                    if data is None:
                        self._big(oid, lambda w, pieces: put(putter, w, pieces))
                        continue
                    w = Written(
                        self.target.value(oid), oid, len(data), hashlib.sha256(data).digest(),
                        hashlib.md5(data, usedforsecurity=False).digest(),
                    )  # fmt: skip
                    put(putter, w, [(0, data)])
                count += min(CHUNK, len(todo) - start)
                self._enter(lock, stored)
                self.reporter.progress(count, 0)
        self._enter(lock, stored)

    def _big(self, oid: int, put: Callable[[Written, Pieces], None]) -> None:
        """An LO over a window, never held whole: read once in ``RANGE``s for its size
        and digests (the sha256 goes in the object's metadata, so it comes first), then
        again as the object's pieces, both in one REPEATABLE READ snapshot (the same
        bytes both times; the second read's digest is checked before its last piece)."""
        with self.conn.transaction():
            if self.conn.autocommit:  # else the caller's transaction: as it is
                self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            sha, md5, size = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
            for part in self._ranges(oid):
                sha.update(part)
                md5.update(part)
                size += len(part)
            w = Written(self.target.value(oid), oid, size, sha.digest(), md5.digest())
            put(w, self._pieces(w))

    def _ranges(self, oid: int) -> Iterator[bytes]:
        off = 0
        while True:
            row = self.conn.execute(
                "SELECT pg_catalog.lo_get(%s, %s, %s)", (oid, off, RANGE)
            ).fetchone()
            part = bytes(row[0]) if row and row[0] is not None else b""
            if not part:
                return
            yield part
            off += len(part)

    def _pieces(self, w: Written) -> Iterator[tuple[int, bytes]]:
        """``w``'s LO again, as (offset, bytes); its last piece held back until the
        bytes are found to be those hashed (a store then never completes the object)."""
        sha, off, last = hashlib.sha256(), 0, b""
        for part in self._ranges(w.lo):
            if last:
                yield off - len(last), last
            sha.update(part)
            off += len(part)
            last = part
        if off != w.size or sha.digest() != w.sha256:
            raise DatabaseError(f"LO {w.lo} read twice in one snapshot gave other bytes")
        if last:
            yield off - len(last), last

    def _existing(self, place: Place) -> dict[str, int]:
        """Objects already under the prefix named like an LO (a key of digits): size."""
        out: dict[str, int] = {}
        for e in place.walk():
            if isinstance(e, Entry) and e.key.isdigit():
                out[e.key] = e.size
        return out

    def _reuse(self, place: Place, key: str, size: int, w: Written) -> None:
        """An object at the LO's key before this run wrote it: ours only if its content
        says so (a run killed after the store had it), else refused."""
        sha = place.metadata(key).get(SHA, "")
        if size != w.size or sha != w.sha256.hex():
            raise FileError(
                f"{self.target.where}/{key} exists with other content than LO {w.lo}"
                f" ({size:,} bytes, sha256 {sha or 'not given'}): not overwritten; remove it"
                " or choose another prefix, then run again (it resumes)"
            )
        self.reused += 1

    def _enter(self, lock: threading.Lock, stored: list[Written]) -> None:
        with lock:
            batch, stored[:] = list(stored), []
        if not batch:
            return
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(
                sql.SQL(
                    "INSERT INTO {} (run_id, value, lo, size, sha256, md5, reused)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
                ).format(objects_table(self.schema)),
                [(self.mig.id, w.value, w.lo, w.size, w.sha256, w.md5, w.reused) for w in batch],
            )

    def _verify(self, place: Place) -> bool:
        """Verify the entered objects not yet verified; True when some LO changed since
        it was read (its object removed, to be written again)."""
        f = objects_table(self.schema)
        row = self.conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE run_id = %s AND NOT verified").format(f),
            (self.mig.id,),
        ).fetchone()
        todo = int(row[0]) if row else 0
        if not todo:
            return False
        self.reporter.task("verifying objects", todo)
        changed = self._changed_los()
        for key, reused in changed:
            if reused:
                # Found at its key, not written by this run (another run's object of the
                # same LO, perhaps named by its rows): left alone; its entry is dropped,
                # and the LO's new bytes are refused there unless they match.
                log.warning("LO %s changed; the object %s/%s this run found is left in"
                            " place", key, self.target.where, key)  # fmt: skip
            else:
                place.remove(key)  # ours: entered as stored by this run
        if changed:
            return True
        done = 0
        page: list[Entry] = []
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            for e in place.walk():
                if isinstance(e, Entry) and e.key.isdigit():
                    page.append(e)
                if len(page) >= PAGE:
                    done += self._verify_page(place, pool, page)
                    page = []
                    self.reporter.progress(done, 0)
            done += self._verify_page(place, pool, page)
        # Entered as stored, yet not listed (the store lost them, or someone removed
        # them): forgotten, to be written again.
        with self.conn.transaction():
            gone = self.conn.execute(
                sql.SQL("DELETE FROM {} WHERE run_id = %s AND NOT verified RETURNING lo").format(f),
                (self.mig.id,),
            ).fetchall()
        if gone:
            log.warning("%d objects of run %d were not listed: written again", len(gone),
                        self.mig.id)  # fmt: skip
        return bool(gone)

    def _changed_los(self) -> list[tuple[str, bool]]:
        """Keys of unverified objects whose LO now differs from what was stored (read on
        the server, not the way the upload read it), and whether the run reused them
        (found them there) rather than wrote them; their entries are deleted."""
        f = objects_table(self.schema)
        with self.conn.transaction():
            rows = self.conn.execute(
                sql.SQL(
                    "DELETE FROM {f} d WHERE d.run_id = %(id)s AND NOT d.verified AND"
                    " (NOT " + lo_exists("d.lo::oid") + " OR pg_catalog.sha256("
                    "pg_catalog.lo_get(d.lo::oid)) <> d.sha256) RETURNING d.lo, d.reused"
                ).format(f=f),
                {"id": self.mig.id},
            ).fetchall()  # fmt: skip
        return [(str(r[0]), bool(r[1])) for r in rows]

    def _verify_page(self, place: Place, pool: ThreadPoolExecutor, page: list[Entry]) -> int:
        """Mark verified the entries whose object, in ``page`` (listed), has their size
        and bytes: its ETag is the MD5 of the bytes the store received when it took them
        in one PUT (most stores, SeaweedFS and AWS without KMS), else its sha256
        metadata is read back (a HEAD request). An object of this run that differs is a
        FileError (never removed: the store changed it, or someone did)."""
        if not page:
            return 0
        values = [self.target.value(int(e.key)) for e in page]
        rows = self.conn.execute(
            sql.SQL(
                "SELECT value, lo, size, sha256, md5 FROM {} WHERE run_id = %s"
                " AND NOT verified AND value = ANY(%s)"
            ).format(objects_table(self.schema)),
            (self.mig.id, values),
        ).fetchall()
        if not rows:
            return 0
        listed = {e.key: e for e in page}
        asked = [str(r[1]) for r in rows if not _etag_says(listed[str(r[1])], r[4])]
        metas = dict(zip(asked, pool.map(place.metadata, asked), strict=True))
        for _value, lo, size, sha, _md5 in rows:
            key = str(lo)
            got = listed[key].size
            meta = metas.get(key)
            if got != size or (meta is not None and meta.get(SHA) != bytes(sha).hex()):
                said = meta.get(SHA) if meta is not None else None
                raise FileError(
                    f"{self.target.where}/{key} does not hold LO {lo} as it was written"
                    f" ({got:,} bytes, sha256 {said or 'not given'}; the LO:"
                    f" {size:,} bytes, sha256 {bytes(sha).hex()}): nothing was switched"
                )
        with self.conn.transaction():
            self.conn.execute(
                sql.SQL(
                    "UPDATE {} SET verified = true WHERE run_id = %s AND value = ANY(%s)"
                ).format(objects_table(self.schema)),
                (self.mig.id, [r[0] for r in rows]),
            )
        return len(rows)

    def _save(self, **values: object) -> None:
        from pgblobdump.migrate import state

        with self.conn.transaction():
            state.update(self.conn, self.schema, self.mig.id, **values)
        for k, v in values.items():
            setattr(self.mig, k, v)

    def waiting(self) -> int:
        """Rows whose new value (a key) names no verified object of the run: the switch
        waits for none (rows written during the run name LOs stored after)."""
        return waiting(self.conn, self.mig, self.schema, self.table)


def _etag_says(e: Entry, md5: bytes | None) -> bool:
    """Whether the object's listed ETag is the MD5 of the bytes written."""
    return md5 is not None and (e.etag or "").strip('"') == bytes(md5).hex()


def waiting(conn: psycopg.Connection, mig: Migration, schema: str, table: sql.Composable) -> int:
    """``Uploader.waiting``."""
    d = sql.Identifier(mig.new_column)
    row = conn.execute(
        sql.SQL(
            "SELECT count(*) FROM {t} x WHERE x.{d} IS NOT NULL AND x.{d} <> '' AND NOT EXISTS"
            " (SELECT 1 FROM {f} f WHERE f.run_id = %s AND f.value = x.{d} AND f.verified)"
        ).format(t=table, d=d, f=objects_table(schema)),
        (mig.id,),
    ).fetchone()
    return int(row[0]) if row else 0
