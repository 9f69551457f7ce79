"""Write a packed archive: LOs in OID order -> frames -> a sink; index and manifest last.

``ArchiveWriter`` is one archive (a storage directory or a stream); ``worker()`` gives a
``LoPacker`` per worker, each taking one ascending OID range. ``finish()`` writes the index
and then the manifest; ``abort()`` (any failure, even after ``finish()``) removes every file
the archive wrote, the manifest first, so what is left can never pass for a complete archive.
"""

from __future__ import annotations

import datetime as dt
import tempfile
from collections.abc import Iterable
from typing import BinaryIO

import xxhash

from pgblobdump.errors import UsageError
from pgblobdump.packed.format.frames import encode
from pgblobdump.packed.format.index import MetaTable
from pgblobdump.packed.format.indexbuild import IndexBuilder, write_index
from pgblobdump.packed.format.manifest import Incremental, Manifest, MergedFrom, Source
from pgblobdump.packed.format.rawindex import merged_builder
from pgblobdump.packed.format.spec import (
    DEFAULT_VOLUME_SIZE,
    INDEX_NAME,
    MANIFEST_NAME,
    STANDALONE_VERSION,
    ZSTD_LEVEL,
    FrameKind,
)
from pgblobdump.packed.write.packer import (
    LoPacker,
    Totals,
)
from pgblobdump.packed.write.sink import FrameSink, StreamSink, VolumeSink, WorkerStream
from pgblobdump.storage import FileInfo, Storage
from pgblobdump.storage.base import NameTaken, why, widened


def check_settings(volume_size: int, level: int) -> None:
    """UsageError for a volume size under 1 MiB or a zstd level outside 0..22 (dump and
    pack check before they read anything)."""
    if volume_size < 1 << 20:
        raise UsageError("--volume-size must be at least 1 MiB")
    if not 0 <= level <= 22:
        raise UsageError(f"--level must be between 0 (no compression) and 22 (got {level})")


class ArchiveWriter:
    """A packed archive being written: into ``storage`` (a directory of volumes) or to
    ``stream`` (the single-stream form). Use as a context manager: leaving it with an
    error aborts (its volumes, index and manifest are removed)."""

    def __init__(
        self,
        storage: Storage | None = None,
        stream: BinaryIO | None = None,
        volume_size: int = DEFAULT_VOLUME_SIZE,
        level: int = ZSTD_LEVEL,
        version: int = STANDALONE_VERSION,
    ) -> None:
        if (storage is None) == (stream is None):
            raise ValueError("give a storage or a stream")
        if stream is not None and version != STANDALONE_VERSION:
            raise ValueError("an incremental archive is a directory")
        self.storage = storage
        self.version = version
        self.carried: list[IndexBuilder] = []
        """An incremental archive's records of the LOs its bases hold, each builder in
        OID order (the leader's, or each worker's when they compare checksums)."""
        self.volume_size = volume_size
        self.level = level
        self.metas = MetaTable()
        self.packers: list[LoPacker] = []
        self._stream = StreamSink(stream) if stream is not None else None
        self.files: list[FileInfo] = []
        self._made: list[str] = []
        """The index and manifest, once their creation began (``abort`` removes them)."""
        self.manifest_file: FileInfo | None = None
        """The manifest once written to a storage: ``files`` and it are the whole archive."""

    def worker(self, ordered: bool = True) -> LoPacker:
        """A packer for the next OID range (workers' ranges ascend in creation order);
        ``ordered`` False for LOs in any order (one worker only)."""
        n = len(self.packers) + 1
        sink: FrameSink
        if self._stream is not None:
            sink = WorkerStream(self._stream)
        else:
            assert self.storage is not None
            sink = VolumeSink(self.storage, n, self.volume_size, self.version)
        packer = LoPacker(sink, self.metas, self.level, ordered, background=self._stream is None)
        self.packers.append(packer)
        return packer

    @property
    def totals(self) -> Totals:
        return Totals(sum(p.totals.los for p in self.packers),
                      sum(p.totals.bytes for p in self.packers))  # fmt: skip

    def put_file(self, name: str, data: bytes | Iterable[bytes]) -> None:
        """A file of the archive besides its volumes (a directory archive's): its bytes,
        or chunks of them; listed in the manifest with its size and checksum."""
        assert self.storage is not None
        self._made.append(name)
        h = xxhash.xxh3_128()
        size = 0
        with self.storage.create(name) as f:
            for chunk in [data] if isinstance(data, bytes) else data:
                f.write(chunk)
                h.update(chunk)
                size += len(chunk)
        self.files.append(FileInfo(name, size, h.hexdigest()))

    def finish(self, source: Source, incremental: Incremental | None = None,
               merged_from: MergedFrom | None = None) -> Manifest:  # fmt: skip
        """Write the index, then the manifest (``source`` describes where the LOs came
        from; an incremental or a merged archive says so); returns the manifest."""
        for p in self.packers:
            p.finish()
            self.files += p.sink.finish()
        totals = self.totals
        created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        builders: list[IndexBuilder] = [p.index for p in self.packers]
        if self.carried:
            builders = [merged_builder([*builders, *self.carried])]
        with tempfile.TemporaryFile() as tmp:
            try:
                tail = write_index(tmp, builders, self.metas, self.version)
            finally:
                if self.carried:
                    builders[0].close()
            size = tmp.tell()
            tmp.seek(0)
            self.files.append(self._put_index(tmp, size))
        manifest = Manifest(
            version=self.version,
            created=created,
            source=source,
            los=totals.los,
            bytes=totals.bytes,
            metadata_values=len(self.metas.values),
            workers=len(self.packers),
            files=tuple(self.files),
            ordered=all(p.ordered for p in self.packers),
            incremental=incremental,
            merged_from=merged_from,
            index_tail=tail,  # a reader checks the tables it reads first
        )
        body = manifest.to_json()
        if self._stream is not None:
            self._stream.write(encode(FrameKind.MANIFEST, body))
            self._stream.finish()
        else:
            assert self.storage is not None
            sync = getattr(self.storage, "sync", None)
            if sync is not None:
                sync()  # every other file's name is durable before the manifest's
            # Only if no manifest is there: two writers of one name cannot both end
            # with an archive (the claim refuses the second first; this is the last word).
            self._made.append(MANIFEST_NAME)  # a timeout may hide that it was stored
            try:
                self.storage.write_new(MANIFEST_NAME, body)
            except NameTaken:
                self._made.remove(MANIFEST_NAME)  # the other writer's: not ours to remove
                raise
            sync = getattr(self.storage, "sync", None)
            if sync is not None:
                sync()
            self.manifest_file = FileInfo(MANIFEST_NAME, len(body), xxhash.xxh3_128_hexdigest(body))
        return manifest

    def _put_index(self, tmp: BinaryIO, size: int) -> FileInfo:
        h = xxhash.xxh3_128()
        if self._stream is not None:
            while chunk := tmp.read(1 << 20):
                h.update(chunk)
                self._stream.write(encode(FrameKind.INDEX, chunk))
        else:
            assert self.storage is not None
            self._made.append(INDEX_NAME)
            with self.storage.create(INDEX_NAME) as f:
                while chunk := tmp.read(1 << 20):
                    h.update(chunk)
                    f.write(chunk)
        return FileInfo(INDEX_NAME, size, h.hexdigest())

    def abort(self) -> list[tuple[str, Exception]]:
        """Remove what this archive wrote, the manifest first: a failure after it was
        stored (a sync, a step of the caller's still inside the writer) must not leave a
        manifest naming volumes that are gone. Returns what could not be removed (the
        server went away), each with the reason."""
        left: list[tuple[str, Exception]] = []
        for name in reversed(self._made):
            assert self.storage is not None
            try:
                self.storage.remove(name)
            except Exception as e:
                left.append((name, e))
        self._made = []
        for p in self.packers:
            p.cancel()  # its frame thread stopped before its volumes are removed
            left += p.sink.abort()
            p.index.close()
        for b in self.carried:
            b.close()
        return left

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is not None:
            left = self.abort()
            if left and isinstance(exc, BaseException):
                _name_what_is_left(exc, left, self.storage)
        else:
            for p in self.packers:
                p.index.close()
            for b in self.carried:
                b.close()


def _name_what_is_left(
    exc: BaseException, left: list[tuple[str, Exception]], storage: Storage | None
) -> None:
    """Raise ``exc`` again with what the abort could not remove named in its one line, so
    the user can delete it (an S3 server that stopped answering mid-dump)."""
    where = f"{storage.description}/" if storage is not None else ""
    names = ", ".join(f"{where}{name}" for name, _ in left)
    reason = why(left[0][1])
    more = f"could not remove {names} ({reason}): delete {'it' if len(left) == 1 else 'them'}"
    wider = widened(exc, more)
    if wider is not exc:
        raise wider from exc
