"""How the core tells people what it is doing, without knowing where that goes.

One protocol for every command: ``note`` for a line of diagnostics (the CLI prints it on
stderr), ``progress`` for how far the current task got (the CLI draws a bar when stderr is
a terminal). The core takes a Reporter and defaults to QUIET; tests pass their own.
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


@dataclass(frozen=True)
class Reporter:
    """``note(line)``: one line for people. ``progress(done, bytes_done)``: items and bytes
    done so far in the current task (its total is the caller's to know, unless the core
    starts a ``task(description, total)`` of its own: a run with several phases does)."""

    note: Callable[[str], None] = _ignore_note
    progress: Callable[[int, int], None] = _ignore_progress
    task: Callable[[str, int], None] = _ignore_task


QUIET = Reporter()
"""Says nothing: the default for library calls."""
