"""``--to lo`` of a column of object keys (``s3lo``): a new LO of each object a value
names, made before the column's switch, so the move to object storage can be undone.

Each distinct value becomes one LO (rows sharing a key share it again), made by the run's
LO maker (owned by the table's owner, SELECT for the column's readers: as ``--to lo`` of
bytea) and entered in ``migration_objects`` in the same transaction, so a kill leaves
no LO unentered. Each LO is compared on the server (``sha256(lo_get)``) with the bytes
read and with the object's sha256 metadata where it has one (``--to s3://`` writes it):
an object whose bytes are not what its metadata says is refused. The column's values
are read as the run's ``--to s3://`` wrote them (a key under the prefix, or with
``--url`` ``s3://bucket/key``); a value naming no object under the prefix is refused.

Memory: up to ``CHUNK`` objects are held whole at a time (read by as many threads).
"""

from __future__ import annotations

import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError, FileError, ObjectStorageError
from pgblobdump.migrate.objects.upload import SHA, Step, objects_table

if TYPE_CHECKING:
    from pgblobdump.files.objects import Place

log = logging.getLogger(__name__)

CHUNK = 32
"""Objects read (at once) and made into LOs in one transaction."""
READ = 1 << 20


@dataclass(frozen=True)
class Fetched:
    value: str
    key: str
    data: bytes
    sha256: str | None
    """The object's sha256 metadata (None: it has none)."""


class Fetcher(Step):
    """The LOs of one ``s3lo`` run: ``sync`` makes those still missing."""

    made = 0

    def _unmade(self) -> list[str]:
        s = sql.Identifier(self.mig.column_name)
        rows = self.conn.execute(
            sql.SQL(
                "SELECT DISTINCT x.{s} FROM {t} x WHERE x.{s} IS NOT NULL AND NOT EXISTS"
                " (SELECT 1 FROM {f} f WHERE f.run_id = %s AND f.value = x.{s}) ORDER BY 1"
            ).format(s=s, t=self.table, f=objects_table(self.schema)),
            (self.mig.id,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def sync(self) -> None:
        from pgblobdump.files.objects import open_place

        todo = self._unmade()
        if not todo:
            return
        bad = [v for v in todo if self.target.relative(v) is None]
        if bad:
            shown = ", ".join(repr(v) for v in bad[:5]) + (", ..." if len(bad) > 5 else "")
            raise DatabaseError(
                f"{len(bad):,} values of {self.mig.table_name}.{self.mig.column_name} name no"
                f" object under {self.target.where} ({shown}): nothing was switched; point"
                " those rows elsewhere, or `migrate abort` the run"
            )
        self.reporter.task("reading objects", len(todo))
        done = 0
        with open_place(self.target.where) as place, ThreadPoolExecutor(CHUNK) as pool:
            for start in range(0, len(todo), CHUNK):
                chunk = todo[start : start + CHUNK]
                got = list(pool.map(lambda v: self._read(place, v), chunk))
                self._make(got)
                done += len(chunk)
                self.reporter.progress(done, 0)

    def _read(self, place: Place, value: str) -> Fetched:
        key = self.target.relative(value)
        assert key is not None
        if place.stat(key) is None:
            raise ObjectStorageError(
                f"{self.target.where}/{key} (named by {self.mig.table_name}."
                f"{self.mig.column_name}) does not exist: nothing was switched"
            )
        parts = []
        with place.open(key) as f:
            while part := f.read(READ):
                parts.append(part)
        return Fetched(value, key, b"".join(parts), place.metadata(key).get(SHA))

    def _make(self, got: list[Fetched]) -> None:
        f = objects_table(self.schema)
        with self.conn.transaction():
            for g in got:
                sha = hashlib.sha256(g.data).hexdigest()
                if g.sha256 is not None and g.sha256 != sha:
                    raise FileError(
                        f"{self.target.where}/{g.key} does not hold what its sha256 metadata"
                        f" says ({g.sha256}; its bytes: {sha}): nothing was switched"
                    )
                made = self.conn.execute(
                    sql.SQL("SELECT {}(%s::bytea)").format(self.move.lo_fn), (g.data,)
                ).fetchone()
                assert made is not None
                # A statement of its own: the one that made the LO does not see it.
                row = self.conn.execute(
                    "SELECT %s::int8, pg_catalog.encode(pg_catalog.sha256("
                    "pg_catalog.lo_get(%s::oid)), 'hex')",
                    (made[0], made[0]),
                ).fetchone()
                assert row is not None
                if row[1] != sha:
                    raise DatabaseError(
                        f"the LO made of {self.target.where}/{g.key} does not read back as"
                        " its bytes: nothing was switched"
                    )
                self.conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (run_id, value, lo, size, sha256, verified)"
                        " VALUES (%s, %s, %s, %s, %s, true)"
                    ).format(f),
                    (self.mig.id, g.value, int(row[0]), len(g.data), bytes.fromhex(sha)),
                )
                self.made += 1

    def waiting(self) -> int:
        """Rows whose key has no LO in the new column yet."""
        s, d = sql.Identifier(self.mig.column_name), sql.Identifier(self.mig.new_column)
        row = self.conn.execute(
            sql.SQL(
                "SELECT count(*) FROM {t} WHERE {s} IS NOT NULL AND ({d} IS NULL OR {d} = 0)"
            ).format(t=self.table, s=s, d=d)
        ).fetchone()
        return int(row[0]) if row else 0


def unlink_made(conn: psycopg.Connection, schema: str, run_id: int) -> int:
    """``migrate abort`` of an ``s3lo`` run: unlink every LO it made (entered as it made
    them, each its own)."""
    from pgblobdump.pg.catalog import lo_exists

    with conn.transaction():
        row = conn.execute(
            sql.SQL(
                "WITH d AS (DELETE FROM {} WHERE run_id = %s RETURNING lo)"
                " SELECT count(CASE WHEN " + lo_exists("d.lo::oid")
                + " THEN pg_catalog.lo_unlink(d.lo::oid) END) FROM d"
            ).format(objects_table(schema)),
            (run_id,),
        ).fetchone()  # fmt: skip
    return int(row[0]) if row else 0
