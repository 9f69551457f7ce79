"""What a compare run records: one frozen record per dump and per restore, JSON both ways.

Reading checks every field's type as it goes: a results.json edited by hand or written by
something else fails with ResultsUnreadable naming the file and the field
(``dumps[0].stats.wall_s``), never with a TypeError deep inside a report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pgblobdump.compare.archive_stats import ArchiveStats
from pgblobdump.compare.matrix import FORMATS, PACKED, TOOLS, Contender, RestoreMode
from pgblobdump.errors import ResultsUnreadable
from pgblobdump.proc import ProcessStats


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


_MISSING = object()


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Fields:
    """One JSON object of a results file, read field by field with its type checked.

    ``where`` is the file, ``path`` the object's place in it (``dumps[0].stats``); every
    failure is a ResultsUnreadable naming both.
    """

    def __init__(self, value: Any, where: str, path: str) -> None:
        self.where, self.path = where, path
        if not isinstance(value, dict):
            raise self.bad(path, f"is {_show(value)}, not an object")
        self.d: dict[str, Any] = value

    def bad(self, path: str, problem: str) -> ResultsUnreadable:
        return ResultsUnreadable(f"{self.where}: field {path} {problem}")

    def _get(self, key: str, optional: bool) -> Any:
        value = self.d.get(key, _MISSING)
        if value is _MISSING and not optional:
            raise self.bad(f"{self.path}.{key}" if self.path else key, "is missing")
        return value

    def _where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def integer(
        self, key: str, optional: bool = False, default: int | None = None, signed: bool = False
    ) -> int | None:
        """A whole number, not negative unless ``signed`` (counts, bytes, KiB)."""
        value = self._get(key, optional)
        if value is _MISSING or (optional and value is None):
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(self._where(key), f"is {_show(value)}, not a whole number")
        if value < 0 and not signed:
            raise self.bad(self._where(key), f"is {value}, a negative number")
        return value

    def req_integer(self, key: str, signed: bool = False) -> int:
        value = self.integer(key, signed=signed)
        assert value is not None
        return value

    def number(self, key: str, optional: bool = False) -> float | None:
        """A finite number of seconds, not negative."""
        value = self._get(key, optional)
        if value is _MISSING or (optional and value is None):
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.bad(self._where(key), f"is {_show(value)}, not a number")
        if not math.isfinite(value) or value < 0:
            raise self.bad(self._where(key), f"is {_show(value)}, not a finite number >= 0")
        return float(value)

    def req_number(self, key: str) -> float:
        value = self.number(key)
        assert value is not None
        return value

    def text(self, key: str, optional: bool = False) -> str | None:
        value = self._get(key, optional)
        if value is _MISSING or (optional and value is None):
            return None
        if not isinstance(value, str):
            raise self.bad(self._where(key), f"is {_show(value)}, not a string")
        return value

    def req_text(self, key: str) -> str:
        value = self.text(key)
        assert value is not None
        return value

    def flag(self, key: str) -> bool:
        value = self._get(key, False)
        if not isinstance(value, bool):
            raise self.bad(self._where(key), f"is {_show(value)}, not true or false")
        return value

    def obj(self, key: str) -> _Fields:
        return _Fields(self._get(key, False), self.where, self._where(key))

    def items(self, key: str) -> list[Any]:
        value = self._get(key, False)
        if not isinstance(value, list):
            raise self.bad(self._where(key), f"is {_show(value)}, not a list")
        return value


def _stats(f: _Fields) -> ProcessStats:
    argv = f.items("argv")
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise f.bad(f"{f.path}.argv[{i}]", f"is {_show(arg)}, not a string")
    return ProcessStats(
        argv=tuple(argv),
        exit_code=f.req_integer("exit_code", signed=True),
        wall_s=f.req_number("wall_s"),
        max_rss_kb=f.req_integer("max_rss_kb"),
        user_s=f.req_number("user_s"),
        sys_s=f.req_number("sys_s"),
        via=f.req_text("via"),
        harness_wall_s=f.req_number("harness_wall_s"),
        check_max_rss_kb=f.integer("check_max_rss_kb", optional=True),
        check_user_s=f.number("check_user_s", optional=True),
        check_sys_s=f.number("check_sys_s", optional=True),
        rss_floor_kb=f.integer("rss_floor_kb", optional=True, default=0) or 0,
        timer=f.text("timer", optional=True),
    )


def _contender(f: _Fields) -> Contender:
    tool, fmt = f.req_text("tool"), f.req_text("format")
    if tool not in TOOLS:
        raise f.bad(f"{f.path}.tool", f"is {_show(tool)}, not one of {', '.join(TOOLS)}")
    formats = (PACKED,) if tool == PACKED else tuple(FORMATS)
    if fmt not in formats:
        raise f.bad(f"{f.path}.format", f"is {_show(fmt)}, not one of {', '.join(formats)}")
    return Contender(tool, f.req_integer("major"), fmt)


def _archive(f: _Fields) -> ArchiveStats:
    return ArchiveStats(
        f.req_integer("apparent_bytes"),
        f.req_integer("allocated_bytes"),
        f.req_integer("files"),
        f.req_integer("dirs"),
        f.integer("toc_bytes", optional=True),
    )


def _entries(f: _Fields) -> dict[str, int]:
    return {key: f.req_integer(key) for key in f.d}


def dump_from_json(d: Any, where: str = "results", path: str = "dump") -> DumpRecord:
    f = _Fields(d, where, path)
    return DumpRecord(
        count=f.req_integer("count"),
        contender=_contender(f.obj("contender")),
        repeat=f.req_integer("repeat"),
        stats=_stats(f.obj("stats")),
        archive=_archive(f.obj("archive")),
        entries=_entries(f.obj("entries")),
        entries_via=f.req_text("entries_via"),
        kept=f.text("kept", optional=True),
    )


def restore_from_json(d: Any, where: str = "results", path: str = "restore") -> RestoreRecord:
    f = _Fields(d, where, path)
    mode = f.obj("mode")
    return RestoreRecord(
        count=f.req_integer("count"),
        contender=_contender(f.obj("contender")),
        repeat=f.req_integer("repeat"),
        mode=RestoreMode(mode.req_integer("jobs"), mode.integer("transaction_size", optional=True)),
        stats=_stats(f.obj("stats")),
        restored_los=f.req_integer("restored_los"),
        checked_los=f.req_integer("checked_los"),
        ok=f.flag("ok"),
    )


def _meta(f: _Fields) -> None:
    """The run facts the reports read: ``complete``, ``source``, ``machine``."""
    if "complete" in f.d:
        f.flag("complete")
    if "source" in f.d:
        f.obj("source").text("server_version", optional=True)
    if "machine" in f.d:
        f.obj("machine").text("hostname", optional=True)


def records_from_json(data: Any, where: str) -> tuple[list[DumpRecord], list[RestoreRecord]]:
    """The dump and restore records of a results.json document; ResultsUnreadable naming
    ``where`` and the field when one is missing or of the wrong type."""
    f = _Fields(data, where, "")
    _meta(f)
    dumps = [dump_from_json(d, where, f"dumps[{i}]") for i, d in enumerate(f.items("dumps"))]
    restores = [
        restore_from_json(d, where, f"restores[{i}]") for i, d in enumerate(f.items("restores"))
    ]
    return dumps, restores
