"""stdout: a reader that went away (``| head``, a consumer that died), and a terminal
that binary bytes would garble."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable, Iterator

from pgblobdump.errors import UsageError

PEEK = 8 << 10
"""The bytes looked at for a NUL before an LO is printed on a terminal (curl's rule)."""


def silence_stdout() -> None:
    """Point stdout at /dev/null once its reader went away, so that Python's flush at
    exit does not complain of a broken pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def text_for_terminal(
    oid: int, pieces: Iterable[bytes | memoryview]
) -> Iterator[bytes | memoryview]:
    """``pieces`` (an LO's bytes) as they are, unless stdout is a terminal and their
    first ``PEEK`` bytes hold a NUL: then a UsageError before anything is written, as
    curl does (binary bytes garble a terminal). ``-o -`` says to write them anyway and
    does not come here."""
    if not sys.stdout.isatty():
        return iter(pieces)
    rest = iter(pieces)
    head: list[bytes | memoryview] = []
    seen = 0
    while seen < PEEK and (piece := next(rest, None)) is not None:
        head.append(piece)
        if b"\x00" in bytes(piece[: PEEK - seen]):
            raise UsageError(
                f"LO {oid} is binary (a NUL byte in its first {PEEK >> 10} KiB) and stdout is"
                " a terminal: give -o FILE, or -o - to print it anyway"
            )
        seen += len(piece)
    return itertools.chain(head, rest)
