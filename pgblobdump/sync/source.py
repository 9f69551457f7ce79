"""The source side of copy and sync: which database it is, its leading connection (its
transaction begun; the snapshot, its export and the OID ranges are pg/snapshot.py's), the
selection's roles and OIDs. What is read from it for restore's writer is sync/feed.py's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError, UsageError
from pgblobdump.packed.dump import referenced
from pgblobdump.pg.changes import Mark
from pgblobdump.pg.connect import connect, describe
from pgblobdump.pg.lostream import Selection
from pgblobdump.pg.snapshot import begin
from pgblobdump.pg.trust import check_state_schema
from pgblobdump.sync.state import SCHEMA as STATE_SCHEMA
from pgblobdump.sync.state import Marked, Recorded

WINDOW = 50_000
"""OIDs asked about at once (conflicts on the target)."""


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


def recorded(conn: psycopg.Connection, src: str) -> Recorded:
    """The source at ``src`` as the target's state records it with a mark."""
    row = conn.execute("SELECT current_database()").fetchone()
    return Recorded(describe(src), str(row[0]) if row else None)


def another_source(since: Mark, was: Recorded, now: Mark, here: Recorded) -> str | None:
    """Why the mark ``since`` (read from ``was``) cannot be taken as read from the
    database that ``now`` is read from (``here``), or None when it can.

    Proven the same: the same database OID in the cluster of the same system
    identifier, or of the same postmaster start time. A role that may not run
    pg_control_system() names its cluster by start time alone, and another cluster may
    hold a database of the same name and OID (CREATE DATABASE ... OID, pg_upgrade keeps
    both): so when the start times differ (a restart, or another cluster), the mark is
    taken as this source's only when the database's OID and name are the same and so is
    the connection it was read through (database, host and port as ``describe`` gives
    them); a state that did not record that connection is not."""
    both = since.cluster.startswith("system ") and now.cluster.startswith("system ")
    if since.database == now.database:
        if since.cluster == now.cluster:
            return None
        named = was.name is not None and (was.name, was.datname) == (here.name, here.datname)
        if not both and named:
            return None
    why = (
        f"the last copy or sync of these LOs read {was.name or 'another database'}"
        f" ({since.cluster}, database OID {since.database}); this is {here.name}"
        f" ({now.cluster}, database OID {now.database})"
    )
    if since.database == now.database and not both:
        how = (
            "the state does not record through which host and port it was read (an older version's)"
            if was.name is None
            else "it was not read through this host, port and database name"
        )
        why += (
            "; the cluster could not be identified (the role may not run"
            f" pg_control_system()), and {how}"
        )
    return why


def other_sources(
    rows: Sequence[Marked], now: Mark, here: Recorded
) -> tuple[str | None, list[Marked]]:
    """Why the marks ``rows`` are not all of the database ``now`` is read from
    (``here``), or None when they are; and the rows that are not. Rows of this source
    beside others (a state an older version let two copies write) are not picked from:
    which LOs came from which source is not known, so that is refused the same way."""
    others: list[Marked] = []
    why: str | None = None
    for r in rows:
        w = another_source(r.mark, r.source, now, here)
        if w is not None:
            others.append(r)
            why = why or w
    if why is not None and len(others) < len(rows):
        why += "; the state holds marks of both (a copy from each)"
    return why, others


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


def present(conn: psycopg.Connection, oids: list[int]) -> set[int]:
    """Which of ``oids`` the source holds (any LO, selected or not), WINDOW at a time."""
    found: set[int] = set()
    for i in range(0, len(oids), WINDOW):
        rows = conn.execute(
            "SELECT oid::int8 FROM pg_catalog.pg_largeobject_metadata"
            " WHERE oid = ANY(%s::int8[]::oid[])",
            (oids[i : i + WINDOW],),
        ).fetchall()
        found.update(int(r[0]) for r in rows)
    return found


def check_roles(
    leader: psycopg.Connection, main: psycopg.Connection, ranges: list[Selection]
) -> None:
    """Every owner, grantee and grantor of the selection must exist on the target."""
    wanted = roles(leader, ranges)
    if not wanted:
        return
    rows = main.execute(
        "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s)", (sorted(wanted),)
    ).fetchall()
    missing = sorted(wanted - {r[0] for r in rows})
    if missing:
        raise DatabaseError(
            f"roles missing on the target: {', '.join(missing)}; create them (the source's"
            " owners, grantees and grantors of LOs) and copy again"
        )


def open_pair(
    stack: contextlib.ExitStack, src: str, dst: str, what: str, sel: Selection
) -> tuple[psycopg.Connection, psycopg.Connection, Selection]:
    """The source's leading connection (its transaction begun) and the target's, entered
    in ``stack``, and ``sel`` with its reference columns checked and read by their type
    (packed/dump/referenced.py); refused when both are one database, or when the target's
    state schema is not safe (pg/trust.py).
    ``what`` names the command in messages (``copy``, ``sync``)."""
    leader = stack.enter_context(connect(src, doing=f"{what}: on the source"))
    main = stack.enter_context(connect(dst, doing=f"{what}: on the target"))
    if identity(leader).same(identity(main)):
        raise UsageError(
            f"the source and the target are the same database ({describe(src)}):"
            f" {what} into another one"
        )
    # what a copy made and the last sync's mark are read from it, and written to it
    check_state_schema(main, STATE_SCHEMA, what)
    begin(leader)
    return leader, main, referenced.resolve(leader, sel)
