"""The plan of a compare run: contenders x LO counts x repeats, and the restore modes.

A contender is one way of dumping: a tool, its major version and an archive format:
``pg_dump`` of a major in custom or directory format, or pgblobdump's ``packed`` archive
(its major is the toolchain the run pairs it with: the newest asked for). Each tool's
dump, restore and listing commands are a small strategy object in ``commands.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pgblobdump.errors import UsageError

PG_DUMP = "pg_dump"
"""The tool name of stock pg_dump/pg_restore contenders."""
PACKED = "packed"
"""The tool name of pgblobdump's packed archive (pgblobdump dump / restore)."""

FORMATS = {"custom": "c", "directory": "d"}
"""pg_dump formats compare runs, and their ``-F`` letters."""

TOOLS = (PG_DUMP, PACKED)
"""Contender tools compare knows; each has its commands in commands.py."""

DEFAULT_MAJORS = (16, 17)
DEFAULT_FORMATS = ("custom", "directory")
TRANSACTION_SIZE_SINCE = 17
"""pg_restore --transaction-size first appeared in PostgreSQL 17."""


@dataclass(frozen=True, order=True)
class Contender:
    """One way of dumping: ``tool`` at ``major`` writing ``format`` (a key of FORMATS)."""

    tool: str
    major: int
    format: str

    def __post_init__(self) -> None:
        if self.tool not in TOOLS:
            raise UsageError(f"unknown contender tool {self.tool!r} (known: {', '.join(TOOLS)})")
        if self.tool == PACKED:
            if self.format != PACKED:
                raise UsageError(
                    f"the packed contender writes format 'packed', not {self.format!r}"
                )
        elif self.format not in FORMATS:
            raise UsageError(f"unknown format {self.format!r}; choose from {', '.join(FORMATS)}")

    @property
    def key(self) -> str:
        """A stable identifier for files and JSON: ``pg_dump-17-custom``, ``packed-17-packed``."""
        return f"{self.tool}-{self.major}-{self.format}"

    @property
    def label(self) -> str:
        """How people read it, like the seed: ``pg_dump 17 -Fc``; ``pgblobdump packed``."""
        if self.tool == PACKED:
            return "pgblobdump packed"
        return f"{self.tool} {self.major} -F{FORMATS[self.format]}"

    @property
    def is_directory(self) -> bool:
        return self.format in ("directory", PACKED)

    @property
    def file_per_lo(self) -> bool:
        """Whether the archive holds a file per LO (pg_dump -Fd): free inodes matter."""
        return self.tool == PG_DUMP and self.format == "directory"


@dataclass(frozen=True)
class RestoreMode:
    """One way of running pg_restore: ``jobs`` workers, optional ``--transaction-size``."""

    jobs: int = 1
    transaction_size: int | None = None

    @property
    def label(self) -> str:
        parts = [f"-j {self.jobs}" if self.jobs > 1 else "1 job"]
        if self.transaction_size:
            parts.append(f"--transaction-size {self.transaction_size}")
        return " ".join(parts)

    def applies_to(self, contender: Contender) -> bool:
        """Whether this contender's restore tool has what the mode asks for (a packed
        restore has one mode: its batches are sized from the server's lock table)."""
        if contender.tool == PACKED:
            return self.jobs == 1 and not self.transaction_size
        return not self.transaction_size or contender.major >= TRANSACTION_SIZE_SINCE


@dataclass(frozen=True)
class Plan:
    """Everything a run will do. Counts ascend (the source grows from one to the next).

    Invariants: ``counts`` strictly ascending and >= 0; ``repeat`` >= 1; ``contenders``
    non-empty and distinct.
    """

    contenders: tuple[Contender, ...]
    counts: tuple[int, ...]
    repeat: int = 1
    restore_modes: tuple[RestoreMode, ...] = ()

    def __post_init__(self) -> None:
        if not self.contenders:
            raise UsageError("nothing to compare: no contenders")
        if len(set(self.contenders)) != len(self.contenders):
            raise UsageError("a contender is listed twice")
        if not self.counts or any(c < 0 for c in self.counts):
            raise UsageError("LO counts must be given and not negative")
        if list(self.counts) != sorted(set(self.counts)):
            raise UsageError("LO counts must be distinct and ascending")
        if self.repeat < 1:
            raise UsageError(f"--repeat must be at least 1 (got {self.repeat})")

    @property
    def majors(self) -> tuple[int, ...]:
        return tuple(sorted({c.major for c in self.contenders}))

    def cells(self, count: int) -> Iterator[tuple[int, Contender]]:
        """(repeat number, contender) at one count; contenders alternate within a repeat
        so slow drift of the machine spreads over all of them."""
        for rep in range(1, self.repeat + 1):
            for contender in self.contenders:
                yield rep, contender

    def modes_for(self, contender: Contender) -> tuple[RestoreMode, ...]:
        return tuple(m for m in self.restore_modes if m.applies_to(contender))

    @property
    def dump_runs(self) -> int:
        return len(self.counts) * self.repeat * len(self.contenders)

    @property
    def runs(self) -> int:
        """Every measured run: the dumps and, when restores are on, each restore mode that
        applies to each contender (the total a progress display counts towards)."""
        restores = sum(len(self.modes_for(c)) for c in self.contenders)
        return len(self.counts) * self.repeat * (len(self.contenders) + restores)


def pg_dump_contenders(majors: Iterable[int], formats: Iterable[str]) -> tuple[Contender, ...]:
    """Every pg_dump major in every format, ordered by format then major."""
    formats = tuple(formats)
    majors = tuple(majors)
    return tuple(Contender(PG_DUMP, m, f) for f in formats for m in majors)


def contenders(tools: Iterable[str], majors: Iterable[int],
               formats: Iterable[str]) -> tuple[Contender, ...]:  # fmt: skip
    """pg_dump of every major in every format (when ``pg_dump`` is among ``tools``), then
    the packed archive (when ``packed`` is), paired with the newest major."""
    tools, majors = tuple(tools), tuple(majors)
    unknown = [t for t in tools if t not in TOOLS]
    if unknown or not tools:
        raise UsageError(
            f"unknown contender {', '.join(unknown) or '(none)'}; choose from {', '.join(TOOLS)}"
        )
    out: list[Contender] = []
    if PG_DUMP in tools:
        out += pg_dump_contenders(majors, formats)
    if PACKED in tools:
        out.append(Contender(PACKED, max(majors), PACKED))
    return tuple(out)


def restore_modes(jobs: int, transaction_size: int | None) -> tuple[RestoreMode, ...]:
    """One job always; ``-j N`` when N > 1; ``-j N --transaction-size T`` when T is given."""
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (got {jobs})")
    if transaction_size is not None and transaction_size < 1:
        raise UsageError(f"--transaction-size must be at least 1 (got {transaction_size})")
    modes = [RestoreMode()]
    if jobs > 1:
        modes.append(RestoreMode(jobs))
    if transaction_size:
        modes.append(RestoreMode(jobs, transaction_size))
    return tuple(modes)
