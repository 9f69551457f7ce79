"""The dump's reader (pg/lostream.py) turned into the items restore's writer takes
(packed/reader.py's WholeLos and LoPiece), in memory: what copy and sync stream from the
source into the target, by OID range or (sync's scattered changes) by OID list."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import psycopg
from psycopg import sql

from pgblobdump.packed.index import Meta
from pgblobdump.packed.reader import Item, LoPiece, WholeLos
from pgblobdump.pg import catalog
from pgblobdump.pg.lo import PUT_CHUNK, read_chunks
from pgblobdump.pg.lostream import EmptyRun, LoRow, MetaTuple, Selection, iter_los


class _Metas:
    """One Meta object per distinct (owner, ACL, comment): restore's batches compare and
    hash them, and a million equal ones cost one."""

    def __init__(self) -> None:
        self.known: dict[MetaTuple, Meta] = {}

    def __call__(self, t: MetaTuple) -> Meta:
        m = self.known.get(t)
        if m is None:
            if len(self.known) > 100_000:  # bound memory: all distinct, a cache is no use
                self.known.clear()
            m = self.known[t] = Meta(*t)
        return m


def items(conn: psycopg.Connection, sel: Selection) -> Iterator[Item]:
    """The LOs of ``sel`` as restore's items, read by the dump's reader under the
    transaction open on ``conn``. Checksums are 0: no archive stands between the two."""
    meta = _Metas()
    for row in iter_los(conn, sel):
        if isinstance(row, EmptyRun):
            n = len(row.oids)
            yield WholeLos(row.oids, [meta(t) for t in row.metas], [b""] * n, [0] * n)
            continue
        m = meta((row.owner, row.acl, row.comment))
        if isinstance(row.chunks, list):
            data = row.chunks[0] if len(row.chunks) == 1 else b"".join(row.chunks)
            yield WholeLos([row.oid], [m], [data], [0])
        else:
            yield from _pieces(row, m)


def _pieces(row: LoRow, m: Meta) -> Iterator[LoPiece]:
    """An LO larger than the reader keeps in memory: its pieces, the last one marked."""
    offset = 0
    chunks = iter(row.chunks)
    ahead = next(chunks, b"")
    for nxt in itertools.chain(chunks, [None]):
        last = nxt is None
        yield LoPiece(row.oid, m, row.size, offset, ahead, last)
        offset += len(ahead)
        if nxt is not None:
            ahead = nxt


LISTED = 2_000
"""OIDs per COPY when LOs are read by OID list (sync's scattered changes)."""

_LISTED = """
COPY (SELECT m.oid::int8, pg_get_userbyid(m.lomowner), m.lomacl::text[], d.description,
             lo_get(m.oid)
      FROM pg_catalog.pg_largeobject_metadata m {join}
      WHERE m.oid = ANY({oids}::int8[]::oid[]) ORDER BY m.oid) TO STDOUT (FORMAT binary)
"""


def listed_items(conn: psycopg.Connection, oids: list[int]) -> Iterator[Item]:
    """The LOs ``oids`` (ascending) as items: a COPY of metadata and ``lo_get`` per
    LISTED of them, so that a few changed LOs scattered among many cost their own bytes
    only (the dump's reader takes OID ranges, and reads every page in between). An LO
    over 1 GB (``lo_get``'s limit) and the rest of its list come LO by LO, in pieces."""
    meta = _Metas()
    for i in range(0, len(oids), LISTED):
        chunk = oids[i : i + LISTED]
        done = -1
        query = sql.SQL(_LISTED).format(join=sql.SQL(catalog.COMMENT_JOIN),
                                        oids=sql.Literal(chunk))  # fmt: skip
        try:
            with conn.transaction(), conn.cursor().copy(query) as cp:  # a savepoint
                cp.set_types(["int8", "text", "text[]", "text", "bytea"])
                for oid, owner, acl, comment, data in cp.rows():
                    done = int(oid)
                    m = meta((owner, tuple(acl) if acl is not None else None, comment))
                    yield WholeLos([done], [m], [bytes(data)], [0])
            continue
        except psycopg.Error as e:
            if "too large" not in str(e):
                raise
        for oid in (o for o in chunk if o > done):
            yield from _one_by_pieces(conn, oid, meta)


def _one_by_pieces(conn: psycopg.Connection, oid: int, meta: _Metas) -> Iterator[Item]:
    row = conn.execute(
        sql.SQL(
            "SELECT pg_get_userbyid(m.lomowner), m.lomacl::text[], d.description"
            " FROM pg_catalog.pg_largeobject_metadata m {} WHERE m.oid = {}::int8::oid"
        ).format(sql.SQL(catalog.COMMENT_JOIN), sql.Literal(oid))
    ).fetchone()
    if row is None:
        return
    m = meta((row[0], tuple(row[1]) if row[1] is not None else None, row[2]))
    offset = 0
    pieces = read_chunks(conn, oid, PUT_CHUNK)
    ahead = next(pieces, b"")
    for nxt in itertools.chain(pieces, [None]):
        size = offset + len(ahead) if nxt is None else 0
        yield LoPiece(oid, m, size, offset, ahead, nxt is None)
        offset += len(ahead)
        if nxt is not None:
            ahead = nxt
