"""A progress bar on stderr for long runs; silent when stderr is not a terminal."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from pgblobdump.cli.output import stderr_console
from pgblobdump.report.reporter import Reporter


def note(line: str) -> None:
    """A diagnostic line on stderr, printed as is (no rich markup)."""
    stderr_console().print(line, markup=False, highlight=False)


@contextlib.contextmanager
def progress_bar(
    description: str, total: int
) -> Iterator[tuple[Callable[[int], None], Callable[[str, int], None]]]:
    """``update(done)`` and ``restart(description, total)`` of one bar on stderr, which
    vanishes when finished; no bar at all when stderr is not a terminal (rich would still
    print a newline)."""
    if not sys.stderr.isatty():
        yield (lambda done: None), (lambda d, t: None)
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=stderr_console(),
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        yield (
            lambda done: bar.update(task, completed=done),
            lambda d, t: bar.reset(task, description=d, total=t),
        )


@contextlib.contextmanager
def reporter(description: str, total: int) -> Iterator[Reporter]:
    """The core's Reporter for the terminal: notes on stderr, progress as a bar."""
    with progress_bar(description, total) as (update, restart):
        yield Reporter(note=note, progress=lambda done, _bytes: update(done), task=restart)
