"""``import``'s journal in the target (schema ``pgblobdump_import``): each run, and each
file it made an LO of (path -> OID, size, mtime, ETag, sha256, and what it did to the
row of ``--table``), entered in the transaction that creates the LO, so that after a
kill -9 a ``--resume`` knows exactly which files are in and skips them unchanged.

The schema is trust-checked before it is read or written (pg/trust.py): nobody but this
role and superusers can have put anything in it."""

from __future__ import annotations

import secrets
import struct
import sys
import time
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psycopg

from pgblobdump.pg.arrays import BinaryArray, bytea_array, oid_array
from pgblobdump.pg.trust import check_state_schema

SCHEMA = "pgblobdump_import"
"""Where import keeps its runs and journal in the target."""

_DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.runs (
    run text PRIMARY KEY,
    place text NOT NULL,
    rows_into text NOT NULL DEFAULT '',
    first_oid int8,
    last_oid int8,
    started timestamptz NOT NULL DEFAULT now(),
    finished timestamptz
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.files (
    oid oid NOT NULL,
    run text NOT NULL,
    path text NOT NULL,
    size int8 NOT NULL,
    mtime_ns int8 NOT NULL,
    etag text,
    sha256 bytea NOT NULL,
    row_action "char" NOT NULL DEFAULT '-',
    old_lo int8,
    PRIMARY KEY (oid, run)
);
"""

# No foreign key to runs and no index but the key: each costs the batch a lookup or an
# insert per file, and the journal is read by run only on --resume (a scan).

_LOCK_TAG = 0x7067626970  # 'pgbip'
"""Advisory lock key base held by the session running an import run (one at a time)."""


@dataclass(frozen=True)
class Run:
    """One import: ``place`` as the user named it, ``rows_into`` the ``--table``'s
    ``T.P.L`` (empty: none); the OID block of its latest start."""

    run: str
    place: str
    rows_into: str


@dataclass(frozen=True, slots=True)
class Done:
    """A file a run imported, as it was then (a resumed run skips it when unchanged)."""

    size: int
    mtime_ns: int
    etag: str | None


def exists(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.runs",)).fetchone()
    return bool(row and row[0])


def ensure(conn: psycopg.Connection) -> None:
    """The schema checked (trust), then made if missing."""
    check_state_schema(conn, SCHEMA, "import")
    with conn.transaction():
        conn.execute(_DDL)


def new_run(conn: psycopg.Connection, place: str, rows_into: str) -> Run:
    """A new run entered (committed) and held by this session."""
    name = time.strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(3)
    conn.execute(
        f"INSERT INTO {SCHEMA}.runs (run, place, rows_into) VALUES (%s, %s, %s)",
        (name, place, rows_into),
    )
    hold(conn, name)
    return Run(name, place, rows_into)


def unfinished(conn: psycopg.Connection, place: str) -> list[Run]:
    """The unfinished runs of ``place``, oldest first."""
    if not exists(conn):
        return []
    rows = conn.execute(
        f"SELECT run, place, rows_into FROM {SCHEMA}.runs WHERE place = %s AND finished IS"
        " NULL ORDER BY started, run",
        (place,),
    ).fetchall()
    return [Run(*r) for r in rows]


def hold(conn: psycopg.Connection, run: str) -> bool:
    """Hold ``run`` for this session (False: another session runs it now)."""
    row = conn.execute(
        "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (_LOCK_TAG & 0x7FFFFFFF, run)
    ).fetchone()
    return bool(row and row[0])


def set_block(conn: psycopg.Connection, run: str, first: int | None, last: int | None) -> None:
    conn.execute(
        f"UPDATE {SCHEMA}.runs SET first_oid = %s, last_oid = %s WHERE run = %s",
        (first, last, run),
    )


def done(conn: psycopg.Connection, run: str) -> dict[str, Done]:
    """What ``run`` imported already: path -> the file as it was (its latest import)."""
    out: dict[str, Done] = {}
    with conn.cursor(name="pgblobdump_import_done") as cur, conn.transaction():
        cur.execute(
            f"SELECT path, size, mtime_ns, etag FROM {SCHEMA}.files WHERE run = %s ORDER BY oid",
            (run,),
        )
        for path, size, mtime_ns, etag in cur:
            out[path] = Done(int(size), int(mtime_ns), etag)
    return out


JournalRow = tuple[int, str, int, int, "str | None", bytes, str, "int | None"]
"""(oid, path, size, mtime_ns, etag, sha256, row action, old LO) of one file."""

_INT8 = psycopg.postgres.types["int8"]
_INT8_HEAD = struct.Struct(">iiIii")

_RECORD = f"""
WITH j AS (
  INSERT INTO {SCHEMA}.files (oid, run, path, size, mtime_ns, etag, sha256, row_action, old_lo)
  SELECT o, %(run)s, convert_from(p, 'UTF8'), s, m, nullif(convert_from(e, 'UTF8'), ''), h,
         convert_from(a, 'UTF8')::"char", nullif(ol, -1)
  FROM unnest(%(o)s::oid[], %(p)s::bytea[], %(s)s::int8[], %(m)s::int8[], %(e)s::bytea[],
              %(h)s::bytea[], %(a)s::bytea[], %(ol)s::int8[]) AS u(o, p, s, m, e, h, a, ol)
  RETURNING oid, size, sha256
)
SELECT oid::int8 FROM j WHERE size <= %(max)s AND sha256(lo_get(oid)) <> j.sha256
"""


def int8_array(values: Sequence[int]) -> BinaryArray:
    """``values`` as one binary ``int8[]`` parameter, built at C speed: each element's
    length (8) and big-endian value laid into place by strided slices."""
    n = len(values)
    body = bytearray(12 * n)
    body[3::12] = b"\x08" * n
    vals = array("q", values)
    if sys.byteorder == "little":
        vals.byteswap()
    raw = vals.tobytes()
    for k in range(8):
        body[4 + k :: 12] = raw[k::8]
    return BinaryArray(_INT8.array_oid, _INT8_HEAD.pack(1, 0, _INT8.oid, n, 1) + bytes(body))


def record(
    conn: psycopg.Connection, run: str, rows: Sequence[JournalRow], check_max: int
) -> list[int]:
    """In the transaction creating their LOs: the files entered, in one statement (every
    column an array parameter in binary), which also hashes on the server each LO of at
    most ``check_max`` bytes and returns those whose sha256 is not their file's."""
    o, p, s, m, e, h, a, ol = zip(*rows, strict=True)
    got = conn.execute(
        _RECORD,
        {
            "run": run, "o": oid_array(o), "p": bytea_array([k.encode() for k in p]),
            "s": int8_array(s), "m": int8_array(m),
            "e": bytea_array([b"" if t is None else t.encode() for t in e]),
            "h": bytea_array(h), "a": bytea_array([x.encode() for x in a]),
            "ol": int8_array([-1 if x is None else x for x in ol]), "max": check_max,
        },
    ).fetchall()  # fmt: skip
    return [int(r[0]) for r in got]


def forget(
    conn: psycopg.Connection, run: str, ranges: Iterable[tuple[int, int]]
) -> list[tuple[str, int, str, int | None]]:
    """In the transaction removing LOs ``ranges`` (a failed run's clean-up): their
    entries removed; returns (path, oid, row action, old LO) of each, for the rows to be
    put back."""
    out: list[tuple[str, int, str, int | None]] = []
    for lo, hi in ranges:
        rows = conn.execute(
            f"DELETE FROM {SCHEMA}.files WHERE run = %s AND oid BETWEEN %s::int8::oid AND"
            " %s::int8::oid RETURNING path, oid::int8, row_action, old_lo",
            (run, lo, hi),
        ).fetchall()
        out += [
            (str(p), int(o), str(a), None if old is None else int(old)) for p, o, a, old in rows
        ]
    return out


def counts(conn: psycopg.Connection, run: str) -> int:
    row = conn.execute(f"SELECT count(*) FROM {SCHEMA}.files WHERE run = %s", (run,)).fetchone()
    return int(row[0]) if row else 0


def drop_if_empty(conn: psycopg.Connection, run: str) -> bool:
    """Forget ``run`` if it holds no file (its LOs were all removed); True if dropped."""
    row = conn.execute(
        f"DELETE FROM {SCHEMA}.runs r WHERE run = %s AND NOT EXISTS"
        f" (SELECT 1 FROM {SCHEMA}.files f WHERE f.run = r.run) RETURNING run",
        (run,),
    ).fetchone()
    return row is not None


def finish(conn: psycopg.Connection, run: str) -> None:
    conn.execute(f"UPDATE {SCHEMA}.runs SET finished = now() WHERE run = %s", (run,))
