"""Export's state in its own target, under ``.pgblobdump-export/``: the settings of the
export (``export-K-of-N.json``: which database, template, selection) written before
the first LO, and the journal: segments of manifest rows (``K-of-N/RUN-JOB-SEQ.csv``),
each written whole (atomically) once its objects are stored, so that a rerun after a
kill -9 knows what is there and whose it is.

A target that holds anything and no settings of ours is refused before any LO is read;
so is one whose settings are another export's (another database, template or
selection): an export never writes into what it did not make.
"""

from __future__ import annotations

import heapq
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pgblobdump.errors import UsageError
from pgblobdump.files.exporting import manifest
from pgblobdump.files.exporting.names import reserved
from pgblobdump.files.keys import EXPORT_SETTINGS, EXPORT_STATE
from pgblobdump.files.objects import Entry, Place
from pgblobdump.storage.base import NameTaken


def part_tag(part: tuple[int, int] | None) -> str:
    k, n = part or (1, 1)
    return f"{k}-of-{n}"


def manifest_names(part: tuple[int, int] | None) -> tuple[str, str]:
    """The manifest's names: ``manifest.csv``/``.json``, ``manifest-K-of-N.*`` for a part."""
    stem = "manifest" if part is None else f"manifest-{part_tag(part)}"
    return f"{stem}.csv", f"{stem}.json"


@dataclass
class Found:
    """What a target holds: whether it is a fresh one, the rows an earlier run of this
    export journaled (by OID), and the other objects at names it did not journal (size
    by path: an interrupted run's objects stored before their segment, or anyone's)."""

    fresh: bool
    done: dict[int, manifest.Row] = field(default_factory=dict)
    others: dict[str, int] = field(default_factory=dict)
    complete: bool = False
    dropped: set[int] = field(default_factory=set)
    half: bool = False
    """The JSON manifest is there and the CSV one is not (an interrupted finish)."""


class Journal:
    """The state of one export (one --part) in ``place``: ``export.json`` (the settings,
    shared by the parts), ``runs-K-of-N.json`` (each run of this part and its jobs) and
    the segments ``K-of-N/RUN-JOB-SEQ.csv`` (SEQ from 0 without a gap per job)."""

    def __init__(self, place: Place, settings: dict[str, Any], part: tuple[int, int] | None):
        self.place = place
        self.settings = settings
        self.part = part
        self.tag = part_tag(part)
        self.run = f"{time.time_ns():x}-{os.getpid()}"
        self.settings_key = EXPORT_SETTINGS
        self.runs_key = f"{EXPORT_STATE}/runs-{self.tag}.json"
        self.runs: list[dict[str, Any]] = []

    def _read(self, key: str) -> Any | None:
        if self.place.stat(key) is None:
            return None
        with self.place.open(key) as f:
            return json.loads(f.read())

    def _entries(self) -> Iterator[Entry]:
        # objects only: a walk never lists the export's own state (files/keys.TOOL_PREFIX)
        for e in self.place.walk():
            if isinstance(e, Entry):
                yield e

    def look(self) -> Found:
        """Refuse the target when it is not this export's (module docstring), else say
        what an earlier run left (a walk of it, held in memory: a resumed run only)."""
        theirs = self._read(self.settings_key)
        if theirs is None:
            first = next(self._entries(), None)
            if first is not None:
                raise UsageError(
                    f"{self.place.description} holds files this export did not write"
                    f" (e.g. {first.key}); export into an empty directory or prefix"
                )
            return Found(fresh=True)
        self._check_settings(theirs)
        self.runs = list(self._read(self.runs_key) or [])
        done = {r.oid: r for r in self._journaled()}
        sizes = {e.key: e.size for e in self._entries()}
        dropped = {o for o, r in done.items() if sizes.get(r.path) != r.size}
        for oid in dropped:
            del done[oid]  # journaled but gone or changed since: written again (or refused)
        journaled = {r.path for r in done.values()}
        others = {k: s for k, s in sizes.items() if k not in journaled and not reserved(k)}
        complete = manifest_names(self.part)[0] in sizes
        return Found(False, done, others, complete, dropped, manifest_names(self.part)[1] in sizes)

    def _segments(self, run: str, job: int) -> Iterator[manifest.Row]:
        seq = 0
        while True:
            key = self._segment(run, job, seq)
            if self.place.stat(key) is None:
                return
            with self.place.open(key) as f:
                data = f.read()
            yield from manifest.decode(data)
            seq += 1

    def _journaled(self, dropped: set[int] | None = None) -> Iterator[manifest.Row]:
        """Every journaled row, each OID once (the latest run's), in OID order, a
        segment of each job of each run read at a time. ``dropped``: OIDs whose earlier
        runs' rows no longer hold (the file gone or changed), left out unless a later
        run wrote them again."""
        streams = []
        for i, run in enumerate(self.runs):
            for job in range(int(run["jobs"])):
                rows = self._segments(str(run["id"]), job)
                streams.append((i, rows))
        tagged = [_tag(i, rows) for i, rows in streams]
        last: tuple[int, int, manifest.Row] | None = None
        latest = len(self.runs) - 1
        gone = dropped or set()

        def kept(t: tuple[int, int, manifest.Row]) -> bool:
            return not (t[0] in gone and t[1] < latest)

        for item in heapq.merge(*tagged, key=lambda t: (t[0], t[1])):
            if last is not None and item[0] != last[0] and kept(last):
                yield last[2]
            last = item
        if last is not None and kept(last):
            yield last[2]

    def rows(self, found: Found) -> Iterator[manifest.Row]:
        """The manifest's rows: every journaled LO once, in OID order (streamed)."""
        return self._journaled(found.dropped)

    def _check_settings(self, theirs: dict[str, Any]) -> None:
        diff = sorted(k for k in {*theirs, *self.settings}
                      if k != "part" and theirs.get(k) != self.settings.get(k))  # fmt: skip
        if diff:
            raise UsageError(
                f"{self.place.description} holds another export (its {', '.join(diff)}"
                " differ); export into an empty directory or prefix, or run the same"
                " export again to finish it"
            )

    def begin(self, jobs: int) -> None:
        """This run entered (and the export's settings, the first time), before its
        first LO is written."""
        data = json.dumps(self.settings, indent=1, sort_keys=True).encode() + b"\n"
        try:  # exclusively: of two exports that found this target empty, one goes on
            with self.place.putter() as p:
                p.put(self.settings_key, [(0, data)], len(data))
        except NameTaken:  # an earlier run's (checked already), or another export's
            self._check_settings(self._read(self.settings_key) or {})
        # read again just before: a run of this export begun meanwhile keeps its entry
        self.runs = [*list(self._read(self.runs_key) or []), {"id": self.run, "jobs": jobs}]
        self.place.replace(self.runs_key, json.dumps(self.runs, indent=1).encode() + b"\n")

    def _segment(self, run: str, job: int, seq: int) -> str:
        return f"{EXPORT_STATE}/{self.tag}/{run}-{job:02d}-{seq:06d}.csv"

    def writer(self, job: int) -> Segments:
        return Segments(self, job)


class Segments:
    """One job's journal: its rows, written as a segment now and then (``flush``)."""

    def __init__(self, journal: Journal, job: int) -> None:
        self.journal = journal
        self.job = job
        self.seq = 0
        self.rows: list[manifest.Row] = []

    def add(self, row: manifest.Row) -> None:
        self.rows.append(row)

    def flush(self) -> None:
        if not self.rows:
            return
        rows, self.rows = self.rows, []
        rows.sort(key=lambda r: r.oid)
        key = self.journal._segment(self.journal.run, self.job, self.seq)
        self.seq += 1
        self.journal.place.replace(key, manifest.encode(rows))


def _tag(i: int, rows: Iterator[manifest.Row]) -> Iterator[tuple[int, int, manifest.Row]]:
    for r in rows:
        yield r.oid, i, r
