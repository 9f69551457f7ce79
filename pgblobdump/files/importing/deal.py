"""The files to import, listed once and dealt to N jobs.

The walk that counts the files (the OID block is reserved for that count) writes them
to a ``Listing``: an unlinked temporary file past a few MiB, so a million files cost
disk, not memory, and no second walk (a walk costs about as much as reading the small
files themselves). The ``Dealer`` numbers them in key order from the block's first OID
and deals them in runs of DEAL consecutive files, run k to job k mod N (a job's OIDs
ascend; each run's are consecutive), from a thread of its own that stays at most a few
runs ahead of each job."""

from __future__ import annotations

import queue
import tempfile
import threading
from collections.abc import Iterator

from pgblobdump.files.objects import Entry

DEAL = 512
"""Consecutive files (and OIDs) a job is dealt at a time."""
AHEAD = 4
"""Runs dealt to a job and not yet taken, at most."""

LISTING_IN_MEMORY = 4 << 20
"""Bytes of the listing kept in memory before it goes to a temporary file."""

Numbered = list[tuple[int, Entry]]


class Listing:
    """Entries written once, then read back once, in order (fields NUL-separated: a key
    holds no NUL, ``files/keys.check_key``)."""

    def __init__(self) -> None:
        # closed by close(); unlinked from the start, so a run cut short leaves nothing
        self.file = tempfile.SpooledTemporaryFile(LISTING_IN_MEMORY, prefix="pgblobdump-list-")  # noqa: SIM115
        self.count = 0
        self.buffer: list[bytes] = []

    def add(self, e: Entry) -> None:
        key = e.key.encode("utf-8", "surrogateescape")
        etag = b"" if e.etag is None else e.etag.encode()
        self.buffer.append(b"%s\0%d\0%d\0%s\0" % (key, e.size, e.mtime_ns, etag))
        self.count += 1
        if len(self.buffer) >= 4096:
            self._flush()

    def _flush(self) -> None:
        self.file.write(b"".join(self.buffer))
        self.buffer.clear()

    def close(self) -> None:
        self.file.close()

    def __iter__(self) -> Iterator[Entry]:
        self._flush()
        f = self.file
        f.seek(0)
        left: list[bytes] = []
        while block := f.read(1 << 20):
            fields = block.split(b"\0")
            if left:
                fields[0] = left.pop() + fields[0]
                fields[:0] = left
            whole = (len(fields) - 1) // 4 * 4
            for i in range(0, whole, 4):
                key, size, mtime, etag = fields[i : i + 4]
                yield Entry(key.decode("utf-8", "surrogateescape"), int(size), int(mtime),
                            etag.decode() if etag else None)  # fmt: skip
            left = fields[whole:]


class Dealer:
    """Deals ``files`` to ``jobs`` queues, numbered from OID ``first``. ``stopped`` set
    ends the dealing, and the jobs' waiting."""

    def __init__(self, files: Iterator[Entry], first: int, jobs: int,
                 stopped: threading.Event) -> None:  # fmt: skip
        self.files = files
        self.first = first
        self.queues: list[queue.Queue[Numbered | BaseException | None]] = [
            queue.Queue(AHEAD) for _ in range(jobs)
        ]
        self.stopped = stopped  # the run's: set when a job fails or the run is stopped
        self.thread = threading.Thread(target=self._deal, name="pgblobdump-import-walk",
                                       daemon=True)  # fmt: skip

    def start(self) -> None:
        self.thread.start()

    def _put(self, job: int, item: Numbered | BaseException | None) -> bool:
        while not self.stopped.is_set():
            try:
                self.queues[job].put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _deal(self) -> None:
        i = 0
        run: Numbered = []
        try:
            for e in self.files:
                if self.stopped.is_set():
                    return
                run.append((self.first + i, e))
                i += 1
                if len(run) == DEAL:
                    if not self._put((i - 1) // DEAL % len(self.queues), run):
                        return
                    run = []
            if run and not self._put((i - 1) // DEAL % len(self.queues), run):
                return
        except BaseException as e:  # told to every job
            for j in range(len(self.queues)):
                self._put(j, e)
            return
        for j in range(len(self.queues)):
            self._put(j, None)

    def dealt(self, job: int) -> Iterator[tuple[int, Entry]]:
        """Job ``job``'s files, as they are dealt."""
        q = self.queues[job]
        while True:
            try:
                item = q.get(timeout=0.1)
            except queue.Empty:
                if self.stopped.is_set():
                    return
                continue
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield from item
