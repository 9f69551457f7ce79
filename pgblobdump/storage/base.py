"""The storage interface every backend implements."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import uuid
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from pgblobdump import signals
from pgblobdump.errors import FileError, Interrupted, PgBlobDumpError

CLAIM_NAME = ".pgblobdump-claim"
"""Written first, exclusively, by a run that writes a new archive; removed when it ends.
Two runs given one output: the one whose claim is stored goes on, the other is refused."""


class NameTaken(FileError):
    """``write_new`` found the name taken: that file is another run's, not to remove."""


@dataclass(frozen=True)
class FileInfo:
    """A finished file: its name, size and xxh3-128 (hex) of its bytes."""

    name: str
    size: int
    xxh3_128: str


class Storage(Protocol):
    """Named files in one place (a directory, a bucket prefix).

    ``create`` is atomic: the file appears under its name only when the ``with`` block
    ends without an error; on an error nothing of it remains. Readers take byte ranges
    (what an object store serves best) or a whole file front to back.
    """

    description: str

    def create(self, name: str) -> contextlib.AbstractContextManager[BinaryIO]: ...

    def open(self, name: str) -> contextlib.AbstractContextManager[BinaryIO]: ...

    def read_range(self, name: str, offset: int, length: int) -> bytes: ...

    def size(self, name: str) -> int: ...

    def names(self) -> list[str]: ...

    def exists(self, name: str) -> bool: ...

    def write_new(self, name: str, data: bytes) -> None:
        """Store a small file (the manifest) whole, only if no file has that name yet:
        NameTaken naming it if one has. Never overwrites, even racing another writer."""

    def claim(self, what: str) -> None:
        """Take this place for a new archive: store ``CLAIM_NAME`` exclusively (``what``
        says which run: host, pid, time), then check that nothing else is here. FileError
        saying what is here, and how to clean it if stale, when either fails."""

    def release(self) -> None:
        """Remove this run's claim (the archive is complete, or its files are removed)."""

    def remove(self, name: str) -> None:
        """Remove a finished file this run wrote (an aborted dump's volumes)."""


def claim_body(what: str) -> bytes:
    """A claim's content: which run holds it, and a token no other run's claim has (a
    read-back shows whether the stored claim is ours)."""
    return json.dumps({
        "claim": what, "host": socket.gethostname(), "pid": os.getpid(),
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "token": uuid.uuid4().hex,
    }).encode()  # fmt: skip


def describe_claim(body: bytes) -> str:
    """``a dump started <time> on <host> (pid N)``, from a stored claim's content."""
    try:
        c = json.loads(body)
        return f"{c['claim']} started {c['started']} on {c['host']} (pid {c['pid']})"
    except (ValueError, KeyError, TypeError):
        return "another run"


def why(e: BaseException) -> str:
    """A failed removal's reason, without the name it starts with (the caller lists the
    names): ``the server kept answering 503 ...`` of ``removing s3://b/p/x: the server ...``."""
    text = " ".join(str(e).split())
    return text.split(": ", 1)[1] if text.startswith("removing ") and ": " in text else text


def widened(exc: BaseException, more: str) -> BaseException:
    """``exc`` with ``; more`` added to its one line (what a clean-up could not remove,
    for the user to delete), keeping its exit code; a signal becomes our Interrupted. A
    bug is left as it is."""
    if isinstance(exc, Interrupted):
        return Interrupted(f"{exc}; {more}", exc.signum)
    if isinstance(exc, PgBlobDumpError):
        try:
            return type(exc)(f"{exc}; {more}")
        except TypeError:  # a class with its own constructor: the base, same exit code
            wider = PgBlobDumpError(f"{exc}; {more}")
            wider.exit_code = exc.exit_code
            return wider
    if isinstance(exc, KeyboardInterrupt):
        signum = signals.signum_of(exc)
        return Interrupted(f"interrupted by {signals.name(signum)}; {more}", signum)
    return exc
