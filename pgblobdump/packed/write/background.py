"""A packer's frames encoded and written on a thread of their own.

zstd compression, the frame's checksum and the file write take as long as reading the
bytes from the server; zstandard and file writes release the interpreter lock, so on a
second thread they overlap with the reading thread (which waits on its socket most of
the time) instead of adding to it. Frames keep their order: one thread per packer,
fed through a bounded queue (QUEUE_FRAMES frames in flight, so memory stays flat).
"""

from __future__ import annotations

import collections
import queue
import threading
from collections.abc import Sequence

import zstandard

from pgblobdump.packed.format.frames import encode
from pgblobdump.packed.format.index import MetaTable
from pgblobdump.packed.format.spec import FrameKind
from pgblobdump.packed.write.sink import FrameSink

QUEUE_FRAMES = 4
"""Frames handed over and not yet written, at most (each up to FRAME_TARGET bytes)."""
STOP_WAIT = 30.0
"""Seconds an abort waits for a write in progress (a storage that stopped answering)."""


class FrameThread:
    """Writes DATA frames to ``sink`` in the order given; says where each landed."""

    def __init__(
        self, sink: FrameSink, metas: MetaTable, cctx: zstandard.ZstdCompressor | None
    ) -> None:
        self.sink, self.metas, self.cctx = sink, metas, cctx
        self._queue: queue.Queue[tuple[int, Sequence[bytes | memoryview], bytes, int] | None]
        self._queue = queue.Queue(maxsize=QUEUE_FRAMES)
        self._done: collections.deque[tuple[int, tuple[int, int]]] = collections.deque()
        self._error: BaseException | None = None
        self._cancelled = False
        self._thread = threading.Thread(target=self._run, name="pgblobdump-frames", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is not None or self._cancelled:
                continue  # a failure: the rest is dropped (the dump fails with it)
            seq, data, directory, records = item
            try:
                frame = encode(FrameKind.DATA, b"".join(data), directory, records, self.cctx)
                self.sink.publish(self.metas)
                self._done.append((seq, self.sink.write(frame)))
            except BaseException as e:
                self._error = e

    def put(self, seq: int, data: Sequence[bytes | memoryview], directory: bytes,
            records: int) -> None:  # fmt: skip
        """Frame ``seq`` to write (raises the thread's failure, if any, instead)."""
        if self._error is not None:
            raise self._error
        self._queue.put((seq, data, directory, records))

    def done(self) -> list[tuple[int, tuple[int, int]]]:
        """(frame number, (volume, offset)) of the frames written since the last call."""
        out = []
        while self._done:
            out.append(self._done.popleft())
        return out

    def close(self) -> None:
        """Wait for every frame to be written; raise the thread's failure, if any."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error

    def cancel(self) -> None:
        """Drop what is not written yet and wait (bounded) for a write in progress."""
        self._cancelled = True
        if self._thread.is_alive():
            try:
                while True:
                    self._queue.get_nowait()
            except queue.Empty:
                pass
            self._queue.put(None)
            self._thread.join(STOP_WAIT)
