"""The source side of copy and sync: one exported snapshot, the selection cut into OID
ranges (``--part K/N``, ``--jobs N``), and the dump's reader (pg/lostream.py) turned into
the items restore's writer takes (packed/reader.py's WholeLos and LoPiece), in memory."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import UsageError
from pgblobdump.packed.index import Meta
from pgblobdump.packed.reader import Item, LoPiece, WholeLos
from pgblobdump.pg import catalog
from pgblobdump.pg.lo import PUT_CHUNK, read_chunks
from pgblobdump.pg.lostream import EmptyRun, LoRow, MetaTuple, Selection, iter_los

OID_MAX = 2**32 - 1

WINDOW = 50_000
"""OIDs asked about at once (conflicts on the target)."""


def begin(conn: psycopg.Connection, snapshot: str | None = None) -> None:
    """A REPEATABLE READ, READ ONLY transaction (with ``snapshot``: that exported one)."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
    if snapshot is not None:
        conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))


@dataclass(frozen=True)
class Identity:
    """Which database a connection reaches: its cluster (by system identifier where the
    role may read it, and by when its postmaster started) and the database's OID."""

    system: str | None
    started: str
    database: int
    name: str

    def same(self, other: Identity) -> bool:
        if self.system is not None and other.system is not None:
            return (self.system, self.database) == (other.system, other.database)
        return (self.started, self.database) == (other.started, other.database)


def identity(conn: psycopg.Connection) -> Identity:
    row = conn.execute(
        "SELECT pg_postmaster_start_time()::text, d.oid::int8, d.datname,"
        " has_function_privilege('pg_control_system()', 'EXECUTE')"
        " FROM pg_database d WHERE d.datname = current_database()"
    ).fetchone()
    assert row is not None
    system = None
    if row[3]:
        r = conn.execute("SELECT system_identifier::text FROM pg_control_system()").fetchone()
        system = str(r[0]) if r else None
    return Identity(system, str(row[0]), int(row[1]), str(row[2]))


def shares(
    conn: psycopg.Connection, sel: Selection, part: tuple[int, int] | None, jobs: int
) -> list[Selection]:
    """The selection's OID ranges for this run: share K of N (``part``) of the LOs as
    this snapshot counts them, cut again into ``jobs`` ranges of similar counts. The
    ranges of all N shares tile the selection's OID range with no gap and no overlap."""
    k, n = part or (1, 1)
    tiles = n * jobs
    if tiles == 1:
        return [sel]
    rows = conn.execute(
        sql.SQL(
            "SELECT t, max(oid)::int8 FROM (SELECT m.oid, ntile({}) OVER (ORDER BY m.oid) AS t"
            " FROM pg_catalog.pg_largeobject_metadata m WHERE {}) s GROUP BY t ORDER BY t"
        ).format(sql.Literal(tiles), sel.where(sql.SQL("m.oid")))
    ).fetchall()
    last = {int(t): int(hi) for t, hi in rows}
    bounds = [sel.first - 1]  # bounds[i]: the last OID of tile i (tiles with no LO: empty)
    for t in range(1, tiles):
        bounds.append(max(bounds[-1], last.get(t, bounds[-1])))
    bounds.append(sel.last)
    mine = range((k - 1) * jobs + 1, k * jobs + 1)
    out = [Selection(bounds[t - 1] + 1, bounds[t], sel.referenced_by) for t in mine]
    return [s for s in out if s.first <= s.last] or [out[-1]]


def count(conn: psycopg.Connection, sels: list[Selection]) -> int:
    total = 0
    for s in sels:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM pg_catalog.pg_largeobject_metadata m WHERE {}").format(
                s.where(sql.SQL("m.oid"))
            )
        ).fetchone()
        total += int(row[0]) if row else 0
    return total


def roles(conn: psycopg.Connection, sels: list[Selection]) -> set[str]:
    """Every role the selected LOs name: owners, grantees and grantors."""
    names: set[str] = set()
    for s in sels:
        rows = conn.execute(
            sql.SQL(
                "SELECT DISTINCT pg_get_userbyid(r) FROM (SELECT m.lomowner AS r"
                " FROM pg_catalog.pg_largeobject_metadata m WHERE {c} UNION"
                " SELECT unnest(ARRAY[a.grantee, a.grantor]) FROM"
                " pg_catalog.pg_largeobject_metadata m, aclexplode(m.lomacl) a WHERE {c}) s"
                " WHERE r <> 0"
            ).format(c=s.where(sql.SQL("m.oid")))
        ).fetchall()
        names.update(str(r[0]) for r in rows)
    return names


def oid_windows(conn: psycopg.Connection, sels: list[Selection]) -> Iterator[list[int]]:
    """The selected OIDs, WINDOW at a time, in order, through one COPY per range."""
    for s in sels:
        query = sql.SQL(
            "COPY (SELECT m.oid::int8 FROM pg_catalog.pg_largeobject_metadata m WHERE {}"
            " ORDER BY m.oid) TO STDOUT"
        ).format(s.where(sql.SQL("m.oid")))
        window: list[int] = []
        with conn.cursor().copy(query) as cp:
            for row in cp.rows():
                window.append(int(row[0]))
                if len(window) >= WINDOW:
                    yield window
                    window = []
        if window:
            yield window


def check_part(part: tuple[int, int] | None) -> None:
    if part is not None and not 1 <= part[0] <= part[1]:
        raise UsageError(f"--part {part[0]}/{part[1]} must be K/N with 1 <= K <= N")


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
