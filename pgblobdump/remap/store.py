"""What ``restore --remap`` keeps in the target, in schema ``pgblobdump_remap``: each run
(``runs``: its archive, mode, the block of new OIDs it took, where it is), the mapping
of every LO it restored (``map``: old OID, new OID; a kept OID maps to itself), and the
columns whose references it rewrote (``rewrites``).

A ``map`` row is written in the very transaction that creates its LO, and removed in the
one that removes it (a failed run's clean-up): a row exists exactly while the LO this run
made exists, so a resumed run knows what is done without trusting what merely exists at
an OID. A ``rewrites`` row commits with its column's UPDATE: a resumed run never rewrites
a column twice.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError
from pgblobdump.fileio import write_atomically
from pgblobdump.pg.arrays import oid_array
from pgblobdump.pg.query import one, scalar
from pgblobdump.pg.trust import check_state_schema

SCHEMA = "pgblobdump_remap"
"""The target's schema of remap state."""

_CREATE = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
COMMENT ON SCHEMA {SCHEMA} IS 'pgblobdump restore --remap: each run, the new OID of every LO it restored, the columns it rewrote';
CREATE TABLE IF NOT EXISTS {SCHEMA}.runs (
    run text PRIMARY KEY, archive text NOT NULL, source text NOT NULL, mode text NOT NULL,
    plan jsonb NOT NULL, phase text NOT NULL DEFAULT 'los',
    started timestamptz NOT NULL DEFAULT now(), finished timestamptz);
CREATE TABLE IF NOT EXISTS {SCHEMA}.map (
    run text NOT NULL, old oid NOT NULL, new oid NOT NULL, PRIMARY KEY (run, old));
CREATE INDEX IF NOT EXISTS map_new ON {SCHEMA}.map (run, new);
CREATE TABLE IF NOT EXISTS {SCHEMA}.rewrites (
    run text NOT NULL, relid oid NOT NULL, col name NOT NULL, qualified text NOT NULL,
    rows int8 NOT NULL, dangling int8 NOT NULL, examples int8[] NOT NULL,
    late int8 NOT NULL DEFAULT 0, late_examples int8[] NOT NULL DEFAULT '{{}}',
    others int8 NOT NULL DEFAULT 0, others_examples int8[] NOT NULL DEFAULT '{{}}',
    done timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (run, relid, col));
"""  # noqa: E501

LOCK_KEY = 0x7067626D
"""The advisory lock under which the schema is created (jobs of one run race for it)."""
RUN_TAG = 0x7067626E
"""First key of the session-level advisory lock a run's connection holds on the run
(the second: the hash of its name) while the run goes: a run in ``runs`` whose lock no
session holds was interrupted."""


def hold(conn: psycopg.Connection, run: str) -> bool:
    """Take run ``run``'s lock for this session (until it ends); False when another
    session holds it: the run is in progress there."""
    query = "SELECT pg_catalog.pg_try_advisory_lock(%s, pg_catalog.hashtext(%s))"
    return bool(scalar(conn, query, (RUN_TAG, run)))


def in_progress(conn: psycopg.Connection, run: str) -> bool:
    """Whether another session holds run ``run``'s lock (the run is going there)."""
    if not hold(conn, run):
        return True
    conn.execute(
        "SELECT pg_catalog.pg_advisory_unlock(%s, pg_catalog.hashtext(%s))", (RUN_TAG, run)
    )
    return False


def ensure(conn: psycopg.Connection) -> None:
    """The schema and its tables, made once (under an advisory lock: two runs at once);
    refused when a role this one does not trust could have changed it (pg/trust.py: our
    INSERTs would run its triggers as this role), or, naming its owner, when this role
    may not write it."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        if not exists(conn):
            conn.execute(_CREATE)
            check_state_schema(conn, SCHEMA, "--remap")  # made by another meanwhile
            return
        owner, ok = one(
            conn,
            "SELECT pg_catalog.pg_get_userbyid(n.nspowner),"
            " pg_catalog.has_schema_privilege(n.oid, 'USAGE') AND"
            " pg_catalog.has_table_privilege(%s, 'INSERT, UPDATE, DELETE')"
            " AND pg_catalog.has_table_privilege(%s, 'INSERT, DELETE')"
            " FROM pg_catalog.pg_namespace n WHERE n.nspname = %s",
            (f"{SCHEMA}.runs", f"{SCHEMA}.map", SCHEMA),
        )
        if not ok:
            raise DatabaseError(
                f"schema {SCHEMA} (remap runs and mappings) belongs to role {owner}, and this"
                f" role may not write it: restore --remap as {owner}, or have it grant this"
                " role USAGE on the schema and INSERT, UPDATE, DELETE on its tables"
            )


@dataclass(frozen=True)
class Run:
    """One ``restore --remap``: ``archive`` as the user named it, ``source`` what tells
    that archive apart (its manifest's checksum), ``plan`` the choices a resumed run
    must repeat (the block of new OIDs, the OIDs taken)."""

    run: str
    archive: str
    source: str
    mode: str
    plan: dict[str, Any] = field(default_factory=dict)
    phase: str = "los"
    finished: bool = False


def start(conn: psycopg.Connection, r: Run) -> None:
    conn.execute(
        f"INSERT INTO {SCHEMA}.runs (run, archive, source, mode, plan) VALUES (%s, %s, %s, %s, %s)",
        (r.run, r.archive, r.source, r.mode, json.dumps(r.plan)),
    )


def unfinished(conn: psycopg.Connection, source: str) -> list[Run]:
    """The runs of the archive ``source`` that did not finish, oldest first."""
    rows = conn.execute(
        f"SELECT run, archive, source, mode, plan, phase FROM {SCHEMA}.runs"
        " WHERE source = %s AND finished IS NULL ORDER BY started",
        (source,),
    ).fetchall()
    return [Run(r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]


def find(conn: psycopg.Connection, run: str | None, source: str | None) -> Run | None:
    """Run ``run``, or the latest finished one of the archive ``source``."""
    if run is not None:
        where, args = "run = %s", (run,)
    else:
        where, args = "source = %s AND finished IS NOT NULL", (source,)  # type: ignore[assignment]
    row = conn.execute(
        f"SELECT run, archive, source, mode, plan, phase, finished IS NOT NULL"
        f" FROM {SCHEMA}.runs WHERE {where} ORDER BY started DESC LIMIT 1",
        args,
    ).fetchone()
    if row is None:
        return None
    return Run(row[0], row[1], row[2], row[3], row[4], row[5], row[6])


def exists(conn: psycopg.Connection) -> bool:
    """Whether a remapped restore ran in this database (the schema has its tables);
    refused (DatabaseError) when a role this one does not trust could have changed the
    schema (pg/trust.py), before anything in it is read."""
    check_state_schema(conn, SCHEMA, "--remap")
    return bool(scalar(conn, "SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.runs",)))


def set_phase(conn: psycopg.Connection, run: str, phase: str) -> None:
    conn.execute(f"UPDATE {SCHEMA}.runs SET phase = %s WHERE run = %s", (phase, run))


def set_tables(conn: psycopg.Connection, run: str, relids: set[int]) -> None:
    """``--full``: the tables pg_restore restored (searched for references), kept for a
    resumed run."""
    conn.execute(
        f"UPDATE {SCHEMA}.runs SET plan = plan || jsonb_build_object('tables', %s::int8[])"
        " WHERE run = %s",
        (sorted(relids), run),
    )


def finish(conn: psycopg.Connection, run: str) -> None:
    conn.execute(
        f"UPDATE {SCHEMA}.runs SET phase = 'done', finished = now() WHERE run = %s", (run,)
    )


def drop_if_empty(conn: psycopg.Connection, run: str) -> bool:
    """Remove run ``run`` when it restored nothing that is left (a failed run whose
    clean-up removed all it made): its next attempt starts afresh."""
    cur = conn.execute(
        f"DELETE FROM {SCHEMA}.runs r WHERE run = %s AND finished IS NULL"
        f" AND NOT EXISTS (SELECT 1 FROM {SCHEMA}.map m WHERE m.run = r.run)"
        f" AND NOT EXISTS (SELECT 1 FROM {SCHEMA}.rewrites w WHERE w.run = r.run)",
        (run,),
    )
    return cur.rowcount > 0


def record(conn: psycopg.Connection, run: str, olds: Sequence[int], news: Sequence[int]) -> None:
    """Map rows for LOs made in the current transaction."""
    conn.execute(
        f"INSERT INTO {SCHEMA}.map (run, old, new)"
        " SELECT %s, o, n FROM unnest(%s::oid[], %s::oid[]) AS u(o, n)",
        (run, oid_array(olds), oid_array(news)),
    )


def forget(conn: psycopg.Connection, run: str, ranges: Sequence[tuple[int, int]]) -> None:
    """Remove the map rows of new OIDs in ``ranges`` (their LOs removed in this transaction)."""
    for lo, hi in ranges:
        conn.execute(
            f"DELETE FROM {SCHEMA}.map WHERE run = %s"
            " AND new BETWEEN %s::int8::oid AND %s::int8::oid",
            (run, lo, hi),
        )


def done_olds(conn: psycopg.Connection, run: str) -> list[tuple[int, int]]:
    """The old OIDs run ``run`` restored already, as ranges (a resumed run skips them)."""
    rows = conn.execute(
        "SELECT min(o), max(o) FROM (SELECT old::int8 o, old::int8 - row_number() OVER"
        f" (ORDER BY old) g FROM {SCHEMA}.map WHERE run = %s) s GROUP BY g ORDER BY 1",
        (run,),
    ).fetchall()
    return [(int(a), int(b)) for a, b in rows]


def mapping(run: str) -> sql.Composed:
    """Run ``run``'s LOs at new OIDs as a relation of (old, new), for rewrites and
    checks (an LO that kept its OID needs no rewrite)."""
    return sql.SQL("(SELECT old, new FROM {}.map WHERE run = {} AND old <> new)").format(
        sql.Identifier(SCHEMA), sql.Literal(run)
    )


def segments(conn: psycopg.Connection, run: str) -> list[list[int]]:
    """The mapping as ``[old_first, old_last, new_first]`` runs where both go up by one
    together: every pair once, in a few numbers when the OIDs are consecutive. (A run is
    consecutive old OIDs of one offset new - old: numbered within that offset, so kept
    OIDs on either side of a remapped one are two runs, not one that spans it.)"""
    rows = conn.execute(
        "SELECT min(o), max(o), min(n) FROM (SELECT old::int8 o, new::int8 n,"
        " new::int8 - old::int8 d, old::int8 - row_number() OVER"
        " (PARTITION BY new::int8 - old::int8 ORDER BY old) go"
        f" FROM {SCHEMA}.map WHERE run = %s) s GROUP BY d, go ORDER BY 1",
        (run,),
    ).fetchall()
    return [[int(a), int(b), int(c)] for a, b, c in rows]


def counts(conn: psycopg.Connection, run: str) -> tuple[int, int]:
    """(LOs restored, LOs of them at a new OID)."""
    row = conn.execute(
        f"SELECT count(*), count(*) FILTER (WHERE old <> new) FROM {SCHEMA}.map WHERE run = %s",
        (run,),
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def pairs(conn: psycopg.Connection, run: str) -> Generator[tuple[int, int], None, None]:
    """Every (old, new) of run ``run``, by old OID, streamed (a generator: closing it
    closes its cursor)."""
    with conn.cursor(name="pgbd_remap_pairs") as cur:
        cur.itersize = 50_000
        cur.execute(
            f"SELECT old::int8, new::int8 FROM {SCHEMA}.map WHERE run = %s ORDER BY old", (run,)
        )
        for old, new in cur:
            yield int(old), int(new)


def write_csv(conn: psycopg.Connection, run: str, path: Path) -> None:
    """``--map-out``: the mapping as CSV (``old_oid,new_oid``, a header, by old OID),
    written whole or not at all (fileio.write_atomically)."""
    query = sql.SQL(
        "COPY (SELECT old, new FROM {}.map WHERE run = {} ORDER BY old) TO STDOUT (FORMAT csv)"
    ).format(sql.Identifier(SCHEMA), sql.Literal(run))

    def pieces() -> Iterator[bytes]:
        yield b"old_oid,new_oid\n"
        with conn.cursor().copy(query) as copy:
            for block in copy:
                yield bytes(block)

    write_atomically(path, pieces())


def rewritten(conn: psycopg.Connection, run: str) -> dict[tuple[int, str], dict[str, Any]]:
    """The columns run ``run`` rewrote: by (table OID, column), what each rewrite did."""
    rows = conn.execute(
        "SELECT relid::int8, col, qualified, rows, dangling, examples, late, late_examples,"
        f" others, others_examples FROM {SCHEMA}.rewrites"
        " WHERE run = %s ORDER BY qualified",
        (run,),
    ).fetchall()
    return {
        (int(r[0]), str(r[1])): {
            "column": r[2], "rows": int(r[3]), "dangling": int(r[4]),
            "examples": [int(x) for x in r[5]], "late": int(r[6]),
            "late_examples": [int(x) for x in r[7]], "others": int(r[8]),
            "others_examples": [int(x) for x in r[9]],
        }
        for r in rows
    }  # fmt: skip


def mark_after(
    conn: psycopg.Connection, run: str, relid: int, col: str,
    dangling: tuple[int, Sequence[int]], others: tuple[int, Sequence[int]],
    late: tuple[int, Sequence[int]],
) -> None:  # fmt: skip
    """At the run's end, of a rewritten column (refs/recheck.After): the values naming no
    LO, those naming an LO the run did not write, and the rows naming an old OID (written
    since its rewrite), each with examples."""
    conn.execute(
        f"UPDATE {SCHEMA}.rewrites SET dangling = %s, examples = %s, others = %s,"
        " others_examples = %s, late = %s, late_examples = %s"
        " WHERE run = %s AND relid = %s AND col = %s",
        (dangling[0], list(dangling[1]), others[0], list(others[1]), late[0], list(late[1]),
         run, relid, col),
    )  # fmt: skip


def made(run: str) -> sql.Composed:
    """The LOs run ``run`` wrote, as a relation of (new)."""
    return sql.SQL("(SELECT new FROM {}.map WHERE run = {})").format(
        sql.Identifier(SCHEMA), sql.Literal(run)
    )


def mark_rewritten(
    conn: psycopg.Connection, run: str, relid: int, col: str, qualified: str,
    rows: int, dangling: int, examples: Sequence[int],
) -> None:  # fmt: skip
    """In the transaction of the column's UPDATE: the column is done."""
    conn.execute(
        f"INSERT INTO {SCHEMA}.rewrites (run, relid, col, qualified, rows, dangling, examples)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (run, relid, col, qualified, rows, dangling, list(examples)),
    )
