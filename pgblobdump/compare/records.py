"""What a compare run records: one frozen record per dump and per restore, JSON both ways."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pgblobdump.compare.archive_stats import ArchiveStats
from pgblobdump.compare.matrix import Contender, RestoreMode
from pgblobdump.compare.measure import ProcessStats
from pgblobdump.errors import NotFound


@dataclass(frozen=True)
class DumpRecord:
    """One measured dump of ``count`` LOs by ``contender`` (``repeat`` counts from 1).

    ``entries`` maps TOC entry type to count, read by ``entries_via`` (native or
    ``pg_restore -l``); ``kept`` is the archive's path when ``--keep`` left it on disk.
    """

    count: int
    contender: Contender
    repeat: int
    stats: ProcessStats
    archive: ArchiveStats
    entries: Mapping[str, int]
    entries_via: str
    kept: str | None = None

    @property
    def toc_entries(self) -> int:
        return sum(self.entries.values())


@dataclass(frozen=True)
class RestoreRecord:
    """One measured pg_restore of a dump into a fresh database, and its check.

    ``restored_los`` is the LO count found afterwards; ``checked_los`` how many of them
    (all, or an OID-stride sample) had their contents compared by checksum with the source;
    ``ok`` is true only when the count matches and the checksums agree.
    """

    count: int
    contender: Contender
    repeat: int
    mode: RestoreMode
    stats: ProcessStats
    restored_los: int
    checked_los: int
    ok: bool


def _stats(d: Mapping[str, Any]) -> ProcessStats:
    return ProcessStats(**{**d, "argv": tuple(d["argv"])})


def _require(d: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise NotFound(f"{where}: results have no {key!r}; not a compare results.json?")
    return d[key]


def dump_from_json(d: Mapping[str, Any]) -> DumpRecord:
    return DumpRecord(
        count=int(d["count"]),
        contender=Contender(**d["contender"]),
        repeat=int(d["repeat"]),
        stats=_stats(d["stats"]),
        archive=ArchiveStats(**d["archive"]),
        entries=dict(d["entries"]),
        entries_via=str(d["entries_via"]),
        kept=d.get("kept"),
    )


def restore_from_json(d: Mapping[str, Any]) -> RestoreRecord:
    return RestoreRecord(
        count=int(d["count"]),
        contender=Contender(**d["contender"]),
        repeat=int(d["repeat"]),
        mode=RestoreMode(**d["mode"]),
        stats=_stats(d["stats"]),
        restored_los=int(d["restored_los"]),
        checked_los=int(d["checked_los"]),
        ok=bool(d["ok"]),
    )


def records_from_json(
    data: Mapping[str, Any], where: str
) -> tuple[list[DumpRecord], list[RestoreRecord]]:
    dumps = [dump_from_json(d) for d in _require(data, "dumps", where)]
    restores = [restore_from_json(d) for d in _require(data, "restores", where)]
    return dumps, restores
