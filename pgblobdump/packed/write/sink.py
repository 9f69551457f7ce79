"""Where a packed writer's frames go: volumes in a storage, or one stream."""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any, BinaryIO, Protocol

import xxhash
import zstandard

from pgblobdump.errors import from_os_error
from pgblobdump.packed.format.frames import encode
from pgblobdump.packed.format.index import MetaTable
from pgblobdump.packed.format.spec import (
    DEFAULT_VOLUME_SIZE,
    META_FRAME_MAX,
    STANDALONE_VERSION,
    STREAM_HEADER,
    STREAM_MAGIC,
    VOLUME_HEADER,
    VOLUME_MAGIC,
    ZSTD_LEVEL,
    FrameKind,
    volume_id,
    volume_name,
)
from pgblobdump.storage import FileInfo, Storage


class FrameSink(Protocol):
    """Takes frames of one worker; says where each landed (volume id, byte offset)."""

    def write(self, frame: bytes) -> tuple[int, int]: ...

    def publish(self, metas: MetaTable) -> None:
        """Make metadata values known to readers before a frame that uses them."""

    def exclusive(self) -> contextlib.AbstractContextManager[object]:
        """While held, no other worker's frame comes between this worker's (a large LO's
        pieces must be consecutive in a stream, where workers share one sequence)."""

    def finish(self) -> list[FileInfo]: ...

    def abort(self) -> list[tuple[str, Exception]]:
        """Remove what this sink wrote; what could not be removed, each with the reason."""
        ...


class VolumeSink:
    """Worker ``worker``'s volumes in ``storage``: a new volume once one reaches
    ``volume_size`` (a frame never spans two volumes)."""

    def __init__(self, storage: Storage, worker: int, volume_size: int = DEFAULT_VOLUME_SIZE,
                 version: int = STANDALONE_VERSION) -> None:  # fmt: skip
        self.storage = storage
        self.version = version
        self.worker = worker
        self.volume_size = volume_size
        self.files: list[FileInfo] = []
        self._stack: contextlib.ExitStack | None = None
        self._f: BinaryIO | None = None
        self._number = 0
        self._name = ""
        self._size = 0
        self._hash = xxhash.xxh3_128()
        self._unsure: list[str] = []

    def _open(self) -> BinaryIO:
        self._number += 1
        self._name = volume_name(self.worker, self._number)
        self._stack = contextlib.ExitStack()
        self._f = self._stack.enter_context(self.storage.create(self._name))
        self._size = 0
        self._hash = xxhash.xxh3_128()
        self._put(VOLUME_HEADER.pack(VOLUME_MAGIC, self.version, self.worker))
        return self._f

    def _put(self, data: bytes) -> None:
        assert self._f is not None
        self._f.write(data)
        self._hash.update(data)
        self._size += len(data)

    def _close(self) -> None:
        if self._stack is None:
            return
        stack, self._stack, self._f = self._stack, None, None
        try:
            stack.close()  # the rename (the upload's completion): the volume is complete
        except BaseException:
            # Failed, or interrupted when it may have been done: abort removes the name.
            self._unsure.append(self._name)
            raise
        self.files.append(FileInfo(self._name, self._size, self._hash.hexdigest()))

    def write(self, frame: bytes) -> tuple[int, int]:
        if self._f is None or (self._size + len(frame) > self.volume_size and self._size > 64):
            self._close()
            self._open()
        at = self._size
        self._put(frame)
        return volume_id(self.worker, self._number), at

    def publish(self, metas: MetaTable) -> None:
        return None  # volumes are read after the index, which holds every value

    def exclusive(self) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()  # a worker's volumes are its own

    def finish(self) -> list[FileInfo]:
        self._close()
        return self.files

    def abort(self) -> list[tuple[str, Exception]]:
        """Drop the volume being written (its part file goes; on S3 its multipart upload
        is aborted) and the finished ones: an aborted dump leaves nothing under the
        archive's name but what was there before, or names what it could not remove."""
        left: list[tuple[str, Exception]] = []
        if self._stack is not None:
            stack, self._stack, self._f = self._stack, None, None
            aborted = RuntimeError("aborted")
            try:
                stack.__exit__(RuntimeError, aborted, None)
            except Exception as e:
                if e is not aborted:
                    left.append((f"{self._name} (its unfinished upload)", e))
        for name in [f.name for f in self.files] + self._unsure:
            try:
                self.storage.remove(name)
            except Exception as e:
                left.append((name, e))
        self.files, self._unsure = [], []
        return left


class StreamSink:
    """Every worker's frames into one byte stream (stdout, a pipe), in the order written."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.offset = 0
        self._lock = threading.RLock()
        self._published = 0
        self._cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self._put(STREAM_HEADER.pack(STREAM_MAGIC, STANDALONE_VERSION, 0))

    def _put(self, data: bytes) -> None:
        try:
            self.out.write(data)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise from_os_error(e, "write the stream") from e
        self.offset += len(data)

    def write(self, frame: bytes) -> tuple[int, int]:
        with self._lock:
            at = self.offset
            self._put(frame)
            return 0, at

    def publish(self, metas: MetaTable) -> None:
        with self._lock:
            have = len(metas.values)
            while self._published < have:
                first, size, values = self._published, 0, list[Any]()
                for m in metas.values[first:have]:
                    value = m.to_json()
                    size += len(json.dumps(value, ensure_ascii=False)) + 2
                    if values and size > META_FRAME_MAX:
                        break
                    values.append(value)
                body = json.dumps([first, values], ensure_ascii=False).encode()
                self._put(encode(FrameKind.META, body, compressor=self._cctx))
                self._published = first + len(values)

    def finish(self) -> list[FileInfo]:
        with self._lock:
            self.out.flush()
        return []

    def abort(self) -> list[tuple[str, Exception]]:
        return []


class WorkerStream:
    """One worker's view of a shared StreamSink (finish/abort are the dump's to call)."""

    def __init__(self, shared: StreamSink) -> None:
        self.shared = shared

    def write(self, frame: bytes) -> tuple[int, int]:
        return self.shared.write(frame)

    def publish(self, metas: MetaTable) -> None:
        self.shared.publish(metas)

    def exclusive(self) -> contextlib.AbstractContextManager[object]:
        return self.shared._lock

    def finish(self) -> list[FileInfo]:
        return []

    def abort(self) -> list[tuple[str, Exception]]:
        return []
