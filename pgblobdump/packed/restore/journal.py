"""A restore's ledger kept on disk, so that the run after a kill -9 knows which LOs an
earlier run of the same archive into the same database made, and says ``--resume``.

One small JSON file per restore (archive, target database and ``--part`` share) under
``$XDG_STATE_HOME/pgblobdump/restores/`` (``~/.local/state`` by default): the OID ranges
committed so far and the batch in flight. It is rewritten as each batch begins and removed
when the restore ends with nothing of it left to finish (it succeeded, or its clean-up
removed all it made); a kill -9 leaves it. It is only ever a hint for messages: a
journal that cannot be written or read changes nothing else.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import psycopg

from pgblobdump.packed.format.index import Index
from pgblobdump.pg import catalog
from pgblobdump.pg.connect import describe
from pgblobdump.pg.ledger import Ledger, format_ranges, oid_ranges
from pgblobdump.pg.target import split_password
from pgblobdump.units import noun, plural

Ranges = list[tuple[int, int]]


def state_dir() -> Path:
    """Where journals live: ``$XDG_STATE_HOME/pgblobdump/restores``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "pgblobdump" / "restores"


def _merge(ranges: Ranges) -> Ranges:
    merged: Ranges = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged


@dataclass
class Journal:
    """The journal of restoring one archive (share) into one database. ``earlier``: the
    ranges a previous run of it left (made, and neither removed nor finished)."""

    path: Path
    target: str
    earlier: Ranges

    @classmethod
    def open(
        cls, conn: psycopg.Connection, conninfo: str, index: Index, part: tuple[int, int] | None
    ) -> Journal:
        """The journal of restoring ``index``'s archive (``part``: a share of it) into
        ``conn``'s database: the server by its system identifier (its host and port may
        change across a restart) where the role may read it, and the database by name and
        OID (which tells a dropped and recreated one apart)."""
        row = conn.execute(
            "SELECT oid::int8 FROM pg_database WHERE datname = current_database()"
        ).fetchone()
        database = f"database {conn.info.dbname} (oid {row[0] if row else '?'})"
        ident = None
        allowed = conn.execute(  # superusers and pg_monitor, unless granted
            "SELECT has_function_privilege('pg_control_system()', 'EXECUTE')"
        ).fetchone()
        if allowed and allowed[0]:
            query = "SELECT system_identifier::text FROM pg_control_system()"
            ident = conn.execute(query).fetchone()
        if ident is not None:
            target = f"{database} of system {ident[0]}"
        else:
            target = f"{database} on {describe(split_password(conninfo)[0])}"
        archive = [(b.first, b.last, b.records) for b in index.blocks]
        key = hashlib.sha256(json.dumps([archive, target, part]).encode()).hexdigest()[:24]
        path = state_dir() / f"{key}.json"
        earlier: Ranges = []
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
            saved = json.loads(path.read_text())
            earlier = _merge([(int(lo), int(hi)) for lo, hi in saved["ranges"]])
        return cls(path, target, earlier)

    def made_earlier(self, oid: int) -> bool:
        """Whether an earlier, unfinished run of this restore made (or may have) ``oid``."""
        return any(lo <= oid <= hi for lo, hi in self.earlier)

    def describe_earlier(self, conn: psycopg.Connection) -> str:
        """What the earlier run left, as the target holds it: ``32,768 LOs of the 34,816
        (OIDs ...) it had begun; the other 2,048 LOs were in a batch that never committed``.
        The journal also holds the batches in flight when it stopped (they may have
        committed), so its count alone overstates what is there."""
        there = catalog.count_in(conn, self.earlier)
        begun = sum(hi - lo + 1 for lo, hi in self.earlier)
        if there == begun:
            return format_ranges(self.earlier)
        return (
            f"{plural(there, 'LO')} of the {begun:,} ({oid_ranges(self.earlier)}) it had"
            f" begun; the other {plural(begun - there, 'LO')} {noun(begun - there, 'was')} in"
            " a batch that never committed"
        )

    def redone(self, *ledgers: Ledger) -> int:
        """How many LOs of the earlier run's (its batches in flight that never committed)
        this run made again: the overlap of its ranges with the ledgers'."""
        ours = _merge([r for ledger in ledgers for r in ledger.lo_ranges])
        n = i = 0
        for lo, hi in self.earlier:  # both sorted, neither overlapping itself
            while i < len(ours) and ours[i][1] < lo:
                i += 1
            j = i
            while j < len(ours) and ours[j][0] <= hi:
                n += min(hi, ours[j][1]) - max(lo, ours[j][0]) + 1
                j += 1
        return n

    def save(self, *ledgers: Ledger) -> None:
        """Record what is left to finish: the earlier run's, this run's (one ledger per
        connection), and the batches in flight (they may commit). Nothing left: the file
        is removed. Connections' threads call it under one lock (``restore --jobs``)."""
        ranges = list(self.earlier)
        for ledger in ledgers:
            ranges += ledger.lo_ranges
            pending = ledger.pending
            if pending is not None:
                ranges += pending.los
        if not ranges:
            self.remove()
            return
        body = json.dumps({"target": self.target, "ranges": _merge(ranges)})
        with contextlib.suppress(OSError):
            if not self.path.parent.is_dir():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(body)
            tmp.replace(self.path)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
