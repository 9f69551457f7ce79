"""SIGTERM and SIGHUP handled like Ctrl-C, and signals held while a clean-up runs.

Every command's clean-up path is written for ``KeyboardInterrupt``; raising a subclass of
it for SIGTERM and SIGHUP gives them the same clean-up with no code per command. The exit
status is the shell's: 128 + the signal number (130, 143, 129).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Abandoned(KeyboardInterrupt):
    """A signal that arrived while a clean-up ran (see ``stoppable``): the user wants out
    now, so the clean-up stops where it is and says what it leaves."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signum_of(e: KeyboardInterrupt) -> int:
    """The signal behind a KeyboardInterrupt: SIGINT unless it is a Terminated."""
    return e.signum if isinstance(e, Terminated | Abandoned) else int(signal.SIGINT)


def interrupt_in(e: BaseException) -> KeyboardInterrupt | None:
    """The signal behind ``e``, if any: an exception raised while handling it (psycopg's
    failed clean-up of a COPY, a module import cut short) carries it as its context."""
    seen: BaseException | None = e
    visited: set[int] = set()  # a chain may loop: ``raise e from e``
    while seen is not None and id(seen) not in visited:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        visited.add(id(seen))
        seen = seen.__cause__ or seen.__context__
    return None


def name(signum: int) -> str:
    return signal.Signals(signum).name


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


_pending: list[int] = []
_deferred = False


def _record(signum: int, frame: FrameType | None) -> None:
    _pending.append(signum)


def defer() -> None:
    """Record SIGINT, SIGTERM and SIGHUP instead of acting on them, while the program
    loads: an interrupt raised inside an import (in importlib's callbacks, in a class
    being built) can be lost or turned into another error. ``arm`` acts on it after."""
    global _deferred
    _deferred = True
    for sig in HANDLED:
        signal.signal(sig, _record)


def arm() -> None:
    """From now on SIGINT raises KeyboardInterrupt and SIGTERM/SIGHUP raise Terminated,
    in the main thread; a signal recorded while deferred is raised now. Does nothing
    unless ``defer`` ran (a library caller keeps its own handlers)."""
    global _deferred
    if not _deferred:
        return
    _deferred = False
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_terminated)
    if _pending:
        signum = _pending[0]
        _pending.clear()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)


@contextlib.contextmanager
def held() -> Iterator[list[int]]:
    """Run a clean-up without being cut short: SIGINT, SIGTERM and SIGHUP that arrive
    meanwhile are recorded in the yielded list instead of raising. A no-op outside the
    main thread, where Python cannot set handlers."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {sig: signal.getsignal(sig) for sig in HANDLED}
    for sig in HANDLED:
        signal.signal(sig, lambda signum, frame: received.append(signum))
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Run a clean-up (stopping a server, dropping a database) to its end: Ctrl-C, SIGTERM
    and SIGHUP arriving meanwhile are held, then raised once it is done, unless an
    exception (usually that interrupt's) is already on its way out."""
    in_flight = sys.exc_info()[1] is not None
    with held() as received:
        yield
    if received and not in_flight:
        if received[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(received[0])


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """Run a clean-up that the next SIGINT, SIGTERM or SIGHUP stops at once: the first
    one raises Abandoned (once: later ones are ignored, so that saying what is left is
    not cut short in turn). Meant for a clean-up after a failure or a first Ctrl-C, which
    must never keep a user who presses Ctrl-C again waiting. A no-op outside the main
    thread, where Python cannot set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        if not fired:
            fired.append(signum)
            raise Abandoned(signum)

    previous = {sig: signal.getsignal(sig) for sig in HANDLED}
    for sig in HANDLED:
        signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
