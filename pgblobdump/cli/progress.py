"""Progress of long runs on stderr, one look for every command: done of total LOs and
bytes, rate (LOs/s, bytes/s), elapsed and ETA.

A total is shown only where one is known: a stream (``restore -``) has none (no bar, no
ETA), and dump knows its LO count but not its bytes (a read of every page would tell:
the bytes done have no total). On a terminal: a bar (rich) that vanishes when done. Not
on a terminal: nothing, unless ``--progress``: then a plain line at most every
``LINE_INTERVAL`` seconds, and one at the end (for CI logs and ``nohup``). ``-q``: nothing
but errors. The figures are computed by pure functions (``Figures``, ``describe``) that
tests call without a terminal.
"""

from __future__ import annotations

import contextlib
import enum
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pgblobdump.cli.output import print_line, stderr_console
from pgblobdump.cli.verbosity import SETTINGS, Settings
from pgblobdump.report.reporter import Reporter
from pgblobdump.units import format_bytes

if TYPE_CHECKING:  # rich's bars (and its tables) are loaded when a bar is drawn
    from rich.console import Console
    from rich.progress import Progress, ProgressColumn, TaskID

LINE_INTERVAL = 10.0
"""Seconds between two plain progress lines (``--progress`` off a terminal)."""


class Mode(enum.Enum):
    BARS = "bars"
    LINES = "lines"
    OFF = "off"


def mode(settings: Settings = SETTINGS, tty: bool | None = None) -> Mode:
    """Bars on a terminal, plain lines with ``--progress`` elsewhere, nothing when quiet."""
    if settings.quiet:
        return Mode.OFF
    if sys.stderr.isatty() if tty is None else tty:
        return Mode.BARS
    return Mode.LINES if settings.progress else Mode.OFF


@dataclass(frozen=True)
class Figures:
    """How far a task got: ``total``/``bytes_total`` 0 when unknown; ``unit``: what
    ``done`` counts (LOs; rows for migrate, runs for bench)."""

    done: int
    total: int
    bytes: int
    bytes_total: int
    elapsed: float
    unit: str = "LOs"

    @property
    def fraction(self) -> float | None:
        """Of the whole, by LOs and bytes alike (their mean when both are known: time goes
        to each LO and to each byte); None when no total is known."""
        parts = []
        if self.total > 0:
            parts.append(min(1.0, self.done / self.total))
        if self.bytes_total > 0:
            parts.append(min(1.0, self.bytes / self.bytes_total))
        return sum(parts) / len(parts) if parts else None

    @property
    def los_rate(self) -> float:
        return self.done / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def bytes_rate(self) -> float:
        return self.bytes / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def eta(self) -> float | None:
        """Seconds left at the rate so far; None before anything is done or with no total."""
        f = self.fraction
        if f is None or f <= 0 or self.elapsed <= 0:
            return None
        return self.elapsed * (1 - f) / f


def clock(seconds: float | None) -> str:
    """``0:01:05``, or ``-:--:--`` when unknown."""
    if seconds is None:
        return "-:--:--"
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def rate(f: Figures) -> str:
    """``2,500 LOs/s``, ``2.5 runs/s``, or per item when slower than one a second
    (``12.3 s/run``, not ``0 runs/s``); empty before the first is done."""
    r = f.los_rate
    if r <= 0:
        return ""
    if r >= 10:
        return f"{r:,.0f} {f.unit}/s"
    if r >= 1:
        return f"{r:.1f} {f.unit}/s"
    one = f.unit[:-1] if f.unit.endswith("s") else f.unit
    return f"{1 / r:,.1f} s/{one}"


def _parts(f: Figures) -> tuple[str, str, str, str, str]:
    """Count, bytes, rate, elapsed, ETA; bytes and their rate empty when no byte was
    counted (empty LOs, rows); no ETA without a total (a count is all there is), and no
    count either before the first item of a task with none (starting a server)."""
    count = f"{f.done:,}/{f.total:,} {f.unit}" if f.total > 0 else f"{f.done:,} {f.unit}"
    if not f.total and not f.done:
        count = ""
    fraction = f.fraction
    if fraction is not None:
        count += f" ({fraction:.0%})"
    counted = f.bytes or f.bytes_total
    size = format_bytes(f.bytes) if counted else ""
    if f.bytes_total > 0:
        size += f"/{format_bytes(f.bytes_total)}"
    speed = rate(f)
    if counted and f.bytes_rate > 0:
        speed = ", ".join(x for x in (speed, f"{format_bytes(f.bytes_rate)}/s") if x)
    eta = "" if fraction is None else f"ETA {clock(f.eta)}"
    return count, size, speed, f"{clock(f.elapsed)} elapsed", eta


def describe(f: Figures) -> str:
    """``12,000/20,000 LOs (60%), 45.0 MiB/75.0 MiB, 3,000 LOs/s, 11.2 MiB/s, 0:00:04
    elapsed, ETA 0:00:03``; what is unknown is left out (a total, the ETA without one) or
    dashed (the ETA before anything is done)."""
    return ", ".join(p for p in _parts(f) if p)


def describe_for_bar(f: Figures) -> str:
    """The same figures, the ones that matter most first: a narrow terminal cuts the end
    of the line rather than wrapping it."""
    count, size, rate, elapsed, eta = _parts(f)
    return ", ".join(p for p in (count, eta, rate, size, elapsed) if p)


class _Task:
    """The figures of the task being shown (thread-safe: dump workers report)."""

    def __init__(self, now: Callable[[], float], unit: str) -> None:
        self.now, self.unit = now, unit
        self.lock = threading.Lock()
        self.start("", 0)

    def start(self, description: str, total: int) -> None:
        with self.lock:
            self.description, self.total, self.bytes_total = description, max(0, total), 0
            self.done = self.bytes = 0
            self.t0 = self.now()

    def totals(self, los: int, nbytes: int) -> None:
        with self.lock:
            self.total, self.bytes_total = max(0, los), max(0, nbytes)

    def update(self, done: int, nbytes: int) -> None:
        with self.lock:
            self.done, self.bytes = done, nbytes

    def figures(self) -> Figures:
        with self.lock:
            return Figures(self.done, self.total, self.bytes, self.bytes_total,
                           self.now() - self.t0, self.unit)  # fmt: skip


def _bar_column() -> ProgressColumn:
    """The bar, only where there is a known total to fill: with none (a stream, or
    before the count is known) rich would draw a pulsing bar the width of a full one."""
    from rich.progress import BarColumn, Task
    from rich.progress_bar import ProgressBar
    from rich.text import Text

    class _BarColumn(BarColumn):
        def render(self, task: Task) -> Text | ProgressBar:  # type: ignore[override]
            if task.total is None:
                return Text("")
            return super().render(task)

    return _BarColumn(bar_width=20)


def _figures_column(shown: _Task) -> ProgressColumn:
    """The bar's column of figures (``describe_for_bar``)."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    class _FiguresColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text(describe_for_bar(shown.figures()), no_wrap=True, overflow="ellipsis")

    return _FiguresColumn()


class _Display:
    """Where a Reporter's calls go: ``start``/``totals``/``update`` of the one task shown,
    ``note`` for a line, ``end`` once the run succeeded."""

    def __init__(self, m: Mode, console: Console | None, now: Callable[[], float],
                 interval: float, unit: str) -> None:  # fmt: skip
        self.mode, self._console, self.interval = m, console, interval
        self.task = _Task(now, unit)
        self.now = now
        self.last_line = 0.0
        self.bar: Progress | None = None
        self.bar_task: TaskID | None = None
        if m is Mode.BARS:
            from rich.progress import Progress, TextColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                _bar_column(),
                _figures_column(self.task),
                console=self.console,
                transient=True,
            )

    @property
    def console(self) -> Console:
        """stderr's console, made (and rich loaded) by the first line or bar shown: a
        run with nothing to show before its first statement loads no rich."""
        if self._console is None:
            self._console = stderr_console()
        return self._console

    def start(self, description: str, total: int) -> None:
        if self.mode is Mode.LINES and self.task.description and self.task.done:
            self._line()  # where the previous phase ended
        self.task.start(description, total)
        self.last_line = self.now()
        if self.bar is not None:
            if self.bar_task is None:
                self.bar.start()
            else:  # a new task each phase: rich cannot set a known total back to unknown
                self.bar.remove_task(self.bar_task)
            self.bar_task = self.bar.add_task(description, total=total or None)

    def totals(self, los: int, nbytes: int) -> None:
        self.task.totals(los, nbytes)
        if self.bar is not None and self.bar_task is not None:
            self.bar.update(self.bar_task, total=los or None)
            self._fill()

    def update(self, done: int, nbytes: int) -> None:
        self.task.update(done, nbytes)
        if self.bar is not None and self.bar_task is not None:
            self._fill()
        elif self.mode is Mode.LINES and self.now() - self.last_line >= self.interval:
            self._line()

    def _fill(self) -> None:
        """The bar filled as far as the percentage beside it (LOs and bytes alike), not
        by LOs alone: with its biggest LOs still to come, a restore drew a nearly full
        bar beside "(53%)"."""
        assert self.bar is not None and self.bar_task is not None
        f = self.task.figures()
        fraction = f.fraction
        done = f.done if fraction is None or not f.total else fraction * f.total
        self.bar.update(self.bar_task, completed=done)

    def _line(self) -> None:
        self.last_line = self.now()
        self.note(f"{self.task.description}: {describe(self.task.figures())}")

    def note(self, line: str) -> None:
        if not SETTINGS.quiet:
            print_line(self.console, line)

    def end(self) -> None:
        if self.mode is Mode.LINES and self.task.description:
            self._line()

    def close(self) -> None:
        if self.bar is not None and self.bar_task is not None:
            self.bar.stop()


_LIVE: list[_Display] = []
"""The displays open now, innermost last: notes and log lines print through it, so they
land above a bar instead of through it."""


def emit_line(line: str) -> None:
    """A line on stderr (see ``print_line``), above the bar if one is drawn."""
    print_line(_LIVE[-1].console if _LIVE else stderr_console(), line)


def note(line: str) -> None:
    """A diagnostic line on stderr, printed as is; nothing with -q."""
    if not SETTINGS.quiet:
        emit_line(line)


@contextlib.contextmanager
def reporter(
    description: str,
    total: int,
    *,
    unit: str = "LOs",
    console: Console | None = None,
    display: Mode | None = None,
    now: Callable[[], float] = time.monotonic,
    interval: float = LINE_INTERVAL,
) -> Iterator[Reporter]:
    """The core's Reporter for this run: notes on stderr, progress as ``mode()`` says
    (``total`` 0 when unknown until the core's ``totals``; ``unit``: what it counts).
    ``console``, ``display``, ``now`` and ``interval`` are for tests (a forced terminal,
    a fake clock)."""
    d = _Display(display or mode(), console, now, interval, unit)
    _LIVE.append(d)
    try:
        d.start(description, total)
        yield Reporter(note=d.note, progress=d.update, task=d.start, totals=d.totals,
                       shown=d.mode is not Mode.OFF)  # fmt: skip
        d.end()
    finally:
        _LIVE.remove(d)
        d.close()


@contextlib.contextmanager
def progress_bar(
    description: str, total: int
) -> Iterator[tuple[Callable[[int], None], Callable[[str, int], None]]]:
    """``update(done)`` and ``restart(description, total)`` of one task (see reporter)."""
    with reporter(description, total) as rep:
        yield (lambda done: rep.progress(done, 0)), rep.task
