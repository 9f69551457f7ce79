"""How the core tells people what it is doing, without knowing where that goes.

One protocol for every command: ``note`` for a line of diagnostics (the CLI prints it on
stderr), ``progress`` for how far the current task got and ``totals`` for where it ends
(the CLI draws a bar with rate and ETA when stderr is a terminal). The core takes a
Reporter and defaults to QUIET; tests pass their own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _ignore_note(line: str) -> None:
    return None


def _ignore_progress(done: int, bytes_done: int) -> None:
    return None


def _ignore_task(description: str, total: int) -> None:
    return None


def _ignore_totals(los: int, nbytes: int) -> None:
    return None


@dataclass(frozen=True)
class Reporter:
    """``note(line)``: one line for people. ``progress(done, bytes_done)``: items and bytes
    done so far in the current task (its total is the caller's to know, unless the core
    starts a ``task(description, total)`` of its own: a run with several phases does).
    ``totals(los, bytes)``: the current task's end, as soon as the core knows it (from an
    archive's index or manifest, a catalog count), before the first ``progress``; 0 bytes
    when only the count is known. A display draws the rate and ETA from these.
    ``shown``: whether anyone sees the progress (work that only feeds the display, such
    as a count, is skipped when not)."""

    note: Callable[[str], None] = _ignore_note
    progress: Callable[[int, int], None] = _ignore_progress
    task: Callable[[str, int], None] = _ignore_task
    totals: Callable[[int, int], None] = _ignore_totals
    shown: bool = False


QUIET = Reporter()
"""Says nothing: the default for library calls."""
