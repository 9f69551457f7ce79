"""How old an LO is: ``--min-age`` from the ``xmin`` of its pg_largeobject_metadata row.

An application creates an LO, commits, and inserts the row naming it in a later
transaction: until then the LO looks like an orphan. ``--min-age`` keeps every LO whose
metadata row was committed less than that long ago. Two ways to know when it was:

- **commit timestamps** (``track_commit_timestamp = on``): ``pg_xact_commit_timestamp(xmin)``;
- **horizon samples** (always): each ``vacuum`` run records, in the state table
  ``<state schema>.vacuum_horizons``, the time and the transaction-id horizon then (the
  oldest transaction still running: every xid below it had finished). A later run takes
  the newest sample at least ``--min-age`` old; an LO whose xmin is below that sample's
  horizon was committed before the sample was taken, so it is old enough. The first run
  (or the first after ``--min-age`` grew) removes only what commit timestamps prove old:
  the two-pass scheme, orphans seen by two runs ``--min-age`` apart.

A sample counts only on the cluster and database that wrote it (its system identifier and
the database's OID are kept with it), so a state table restored elsewhere proves nothing.
Frozen xids (rows older than the last anti-wraparound freeze) are old by definition.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from pgblobdump.units import format_duration

STATE_TABLE = "vacuum_horizons"

_NEXT = "(SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::int8)"
"""The next transaction id, 64-bit: evaluated once per statement (an init plan)."""


def full_xid(xid: str) -> str:
    """SQL for the 64-bit form (int8) of the 32-bit xid expression ``xid`` (a row's
    ``xmin``): within 2^31 of the next xid, which wraparound protection guarantees."""
    base = f"({_NEXT} >> 32 << 32)"
    return (
        f"({base} + {xid}::text::int8"
        f" - CASE WHEN {base} + {xid}::text::int8 > {_NEXT} THEN 4294967296 ELSE 0 END)"
    )


_FULL_XMIN = full_xid("m.xmin")
"""The 64-bit form of LO ``m``'s xmin."""

_IDENTITY = (
    "(SELECT s.system_identifier FROM pg_catalog.pg_control_system() s),"
    " (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database())"
)


@dataclass(frozen=True)
class AgeRule:
    """Which LOs are at least ``min_age`` seconds old, as a condition on metadata row ``m``."""

    min_age: float
    commit_ts: bool
    horizon: int | None
    """The horizon (64-bit xid) of the newest sample at least ``min_age`` old, if any."""
    horizon_taken: str | None = None
    """When that sample was taken, as people read a time (``2026-11-27 21:55 UTC``)."""
    bytes_before: int | None = None
    """``--archive-to``: the snapshot xmin (64-bit) taken before the archive read the LOs;
    an LO with a page written by that xid or a later one may hold bytes the archive has
    not, and is kept (None: no such condition)."""
    pending: tuple[str, str] | None = None
    """The oldest sample not yet ``min_age`` old: when it was taken and when it will be
    (None: there is none)."""
    from_now: str = ""
    """When a sample taken now will be ``min_age`` old."""

    def condition(self) -> sql.Composable:
        if self.bytes_before is None:
            return self._old()
        return sql.SQL(
            "({old} AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_largeobject p"
            " WHERE p.loid = m.oid AND " + full_xid("p.xmin") + " >= {b}))"
        ).format(old=self._old(), b=sql.Literal(self.bytes_before))

    def _old(self) -> sql.Composable:
        if self.min_age <= 0:
            return sql.SQL("true")
        parts: list[sql.Composable] = [
            sql.SQL("m.xmin::text::int8 < 3")
        ]  # frozen (or bootstrap): old
        if self.commit_ts:
            parts.append(
                sql.SQL(
                    "coalesce(pg_catalog.pg_xact_commit_timestamp(m.xmin)"
                    " <= pg_catalog.now() - {s} * interval '1 second', false)"
                ).format(s=sql.Literal(self.min_age))
            )
        if self.horizon is not None:
            parts.append(sql.SQL(_FULL_XMIN + " < {h}").format(h=sql.Literal(self.horizon)))
        return sql.SQL("({})").format(sql.SQL(" OR ").join(parts))

    def describe(self) -> str:
        """How the run told an orphan's age, in a few words."""
        if self.min_age <= 0:
            return "--min-age 0: every orphan is old enough"
        ways = []
        if self.commit_ts:
            ways.append("commit timestamps (track_commit_timestamp)")
        if self.horizon is not None:
            ways.append(f"the record of the run of {self.horizon_taken}")
        if not ways:
            return (
                "age not known yet: track_commit_timestamp is off, and no earlier run"
                f" recorded which transactions had finished {format_duration(self.min_age)} ago"
            )
        return "age from " + " and ".join(ways)

    def when_old(self, recorded: bool) -> str:
        """When the orphans kept as too young will be old enough, or what makes them so;
        ``recorded``: this run recorded a sample (a run that removes, not a dry run)."""
        if self.min_age <= 0:
            return ""
        age = format_duration(self.min_age)
        if self.commit_ts:
            return f"each is old enough {age} after the transaction that made it committed"
        said = []
        if self.pending is not None:
            said.append(f"those made before {self.pending[0]} are old enough from"
                        f" {self.pending[1]}")  # fmt: skip
        if recorded:
            said.append(
                "this run recorded which transactions had finished: a run from"
                f" {self.from_now} ({age} from now) removes the orphans made before now"
            )
        elif self.pending is None:
            said.append(
                "no earlier run recorded which transactions had finished, and"
                " track_commit_timestamp is off: run vacuum without --dry-run now (it removes"
                " nothing too young, and records them), then a run from"
                f" {self.from_now} ({age} later) removes the orphans made before it;"
                " --min-age 0 takes them all at once when no application is creating LOs"
            )
        return "; ".join(said)


def _table(schema: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(STATE_TABLE))


def _exists(conn: psycopg.Connection, schema: str) -> bool:
    row = conn.execute(
        "SELECT pg_catalog.to_regclass(%s) IS NOT NULL",
        (_table(schema).as_string(conn),),
    ).fetchone()
    return bool(row and row[0])


_WHEN = "'YYYY-MM-DD HH24:MI TZ'"
"""A time as messages show it (the session's time zone)."""


def read(conn: psycopg.Connection, min_age: float, schema: str) -> AgeRule:
    """The rule for ``min_age`` from the server's settings and the samples so far."""
    row = conn.execute(
        "SELECT current_setting('track_commit_timestamp') = 'on',"
        f" to_char(pg_catalog.now() + %s * interval '1 second', {_WHEN})",
        (min_age,),
    ).fetchone()
    assert row is not None
    commit_ts, from_now = bool(row[0]), str(row[1])
    horizon = taken = None
    pending = None
    if min_age > 0 and _exists(conn, schema):
        ours = (" AND (system_identifier, database) = (" + _IDENTITY + ")"
                " AND horizon::text::int8 <= " + _NEXT)  # fmt: skip
        row = conn.execute(
            sql.SQL(
                f"SELECT horizon::text::int8, to_char(taken_at, {_WHEN}) FROM {{t}}"
                " WHERE taken_at <= pg_catalog.now() - {s} * interval '1 second'"
                + ours
                + " ORDER BY taken_at DESC LIMIT 1"
            ).format(t=_table(schema), s=sql.Literal(min_age))
        ).fetchone()
        if row is not None:
            horizon, taken = int(row[0]), str(row[1])
        row = conn.execute(
            sql.SQL(
                f"SELECT to_char(taken_at, {_WHEN}),"
                f" to_char(taken_at + {{s}} * interval '1 second', {_WHEN}) FROM {{t}}"
                " WHERE taken_at > pg_catalog.now() - {s} * interval '1 second'"
                + ours
                + " ORDER BY taken_at LIMIT 1"
            ).format(t=_table(schema), s=sql.Literal(min_age))
        ).fetchone()
        if row is not None:
            pending = (str(row[0]), str(row[1]))
    return AgeRule(min_age, commit_ts, horizon, taken, pending=pending, from_now=from_now)


def record(conn: psycopg.Connection, schema: str, keep_after: float) -> str | None:
    """Record a horizon sample now (creating the state table if need be) and drop samples
    older than the newest one at least ``keep_after`` seconds old. None when it worked,
    else why not (the role may not create the schema or table): the run goes on, and
    only commit timestamps (if on) and frozen xids prove an LO old."""
    t = _table(schema)
    try:
        with conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (taken_at timestamptz NOT NULL,"
                    " horizon xid8 NOT NULL, system_identifier int8, database oid)"
                ).format(t)
            )
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} SELECT pg_catalog.now(),"
                    " pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()), " + _IDENTITY
                ).format(t)
            )
            conn.execute(
                sql.SQL(
                    "DELETE FROM {t} WHERE taken_at < (SELECT max(taken_at) FROM {t}"
                    " WHERE taken_at <= pg_catalog.now() - {s} * interval '1 second')"
                ).format(t=t, s=sql.Literal(keep_after))
            )
    except psycopg.errors.InsufficientPrivilege as e:
        return f"no horizon sample recorded ({e.diag.message_primary})"
    return None
