"""An S3 prefix as a place of objects (``s3://bucket/prefix``), through the archive
storage's client (storage/s3.py: the same settings, retries and one-line errors).

Small objects (up to ``ONE_PUT``) are sent whole, several at once on a thread pool (the
client releases the GIL), each as one PUT with ``If-None-Match: *``, so an existing key
is refused by the store itself however close the other writer is. A bigger one is a
multipart upload streamed from the caller's thread, its parts a few at a time; a store
cannot make that conditional, so its key is checked just before (a writer racing in
that moment could be overwritten: said in docs/out-and-back.md). No ACL is ever sent:
an object is as private as its bucket.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO

from pgblobdump.errors import NotFound, ObjectStorageError
from pgblobdump.files.keys import (
    EXPORT_SETTINGS,
    EXPORT_STATE,
    OWN_NAME,
    TOOL_MADE,
    TOOL_PREFIX,
    Entry,
    Pieces,
    Skipped,
    check_key,
    filled,
)
from pgblobdump.storage.base import NameTaken
from pgblobdump.storage.s3 import PART_SIZE, PARTS_IN_FLIGHT, S3Prefix

ONE_PUT = 8 << 20
"""Objects up to this size go in one PUT, held whole while in flight (at most
``in_flight`` of them): memory is bounded by ``in_flight * ONE_PUT``."""


class S3Objects:
    is_s3 = True

    def __init__(self, url: str) -> None:
        self.prefix = S3Prefix(url)
        self.description = str(self.prefix.url)
        self._ob: Any = self.prefix._obstore

    def __enter__(self) -> S3Objects:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing is held between requests."""

    def _key(self, key: str) -> str:
        return self.prefix.url.key(key)

    def _error(self, doing: str, e: BaseException, key: str | None = None) -> BaseException:
        if isinstance(e, FileNotFoundError):
            return NotFound(f"{self.description}/{key or ''}: no such object")
        return self.prefix.error(doing, e, key) if self.prefix._client_error(e) else e

    # -- writing ---------------------------------------------------------------------
    def check_writable(self) -> None:
        """The bucket answers, and takes and removes a probe object (a read-only key or
        a missing bucket is refused here, before any work)."""
        self.prefix.check_bucket()
        probe = f"{TOOL_PREFIX}-probe-{uuid.uuid4().hex}"
        try:
            self._ob.put(self.prefix.store, self._key(probe), b"", mode="create")
            self._ob.delete(self.prefix.store, self._key(probe))
        except Exception as e:
            raise self._error("writing", e, probe) from e

    @contextlib.contextmanager
    def putter(self, in_flight: int = 16) -> Iterator[S3Putter]:
        p = S3Putter(self, in_flight)
        try:
            yield p
        except BaseException:
            p.abandon()
            raise
        p.finish()

    def _put_small(self, key: str, data: bytes, metadata: Mapping[str, str] | None) -> None:
        from obstore.exceptions import AlreadyExistsError

        try:
            self._ob.put(self.prefix.store, self._key(key), data, mode="create",
                         attributes=dict(metadata or {}), use_multipart=False)  # fmt: skip
        except AlreadyExistsError:
            raise NameTaken(f"{self.description}/{key} already exists") from None
        except Exception as e:
            raise self._error("writing", e, key) from e

    def _put_big(self, key: str, pieces: Pieces, size: int,
                 metadata: Mapping[str, str] | None) -> None:  # fmt: skip
        if self.stat(key) is not None:
            raise NameTaken(f"{self.description}/{key} already exists")
        try:
            self._ob.put(self.prefix.store, self._key(key), filled(pieces, size),
                         attributes=dict(metadata or {}), chunk_size=PART_SIZE,
                         max_concurrency=PARTS_IN_FLIGHT)  # fmt: skip
        except Exception as e:
            raise self._error("writing", e, key) from e

    def replace(self, key: str, data: bytes) -> None:
        check_key(key, own=True)
        try:
            self._ob.put(self.prefix.store, self._key(key), data, use_multipart=False)
        except Exception as e:
            raise self._error("writing", e, key) from e

    def remove(self, key: str) -> None:
        try:
            self._ob.delete(self.prefix.store, self._key(check_key(key, own=True)))
        except FileNotFoundError:
            pass
        except Exception as e:
            raise self._error("removing", e, key) from e

    def flush(self) -> None:
        """A stored object is durable once its PUT is answered."""

    # -- reading ---------------------------------------------------------------------
    @contextlib.contextmanager
    def open(self, key: str) -> Iterator[BinaryIO]:
        with self.prefix.open(key) as f:
            yield f

    def stat(self, key: str) -> Entry | None:
        try:
            meta = self._ob.head(self.prefix.store, self._key(key))
        except FileNotFoundError:
            return None
        except Exception as e:
            raise self._error("reading", e, key) from e
        return _entry(key, meta)

    def metadata(self, key: str) -> dict[str, str]:
        """The object's user metadata (x-amz-meta-*), read with a HEAD request."""
        try:
            got = self._ob.get(self.prefix.store, self._key(key), options={"head": True})
        except Exception as e:
            raise self._error("reading", e, key) from e
        known = {"Content-Disposition", "Content-Encoding", "Content-Language",
                 "Content-Type", "Cache-Control", "Storage-Class"}  # fmt: skip
        return {str(k): str(v) for k, v in got.attributes.items() if k not in known}

    def walk(self, follow_symlinks: bool = False) -> Iterator[Entry | Skipped]:
        """Every object under the prefix in key order (a store has no links). An object
        whose key ends in ``/`` (a console's folder marker) is skipped, and so is one
        named like the tool's own (said, as the local walk says it); the tool's own (an
        export's state, a probe) are left out."""
        base = self._key("")
        base = base + "/" if base and not base.endswith("/") else base
        exported = self.stat(EXPORT_SETTINGS) is not None
        try:
            for batch in self._ob.list(self.prefix.store, base or None, chunk_size=1000):
                for meta in batch:
                    key = str(meta["path"])[len(base) :]
                    if not key or (exported and key.startswith(EXPORT_STATE + "/")):
                        continue  # the export's own state
                    if any(p.startswith(TOOL_PREFIX) for p in key.split("/")):
                        if not key.split("/")[-1].startswith(TOOL_MADE):  # a probe left: ours
                            yield Skipped(key, OWN_NAME)
                        continue
                    if key.endswith("/"):
                        yield Skipped(key, "a folder marker")
                        continue
                    yield _entry(key, meta)
        except Exception as e:
            raise self._error("listing", e) from e


def _entry(key: str, meta: Any) -> Entry:
    modified = meta["last_modified"]
    ns = int(modified.timestamp()) * 1_000_000_000 + modified.microsecond * 1000
    return Entry(key, int(meta["size"]), ns, meta.get("e_tag"))


class S3Putter:
    """Small objects in flight on a pool of ``in_flight`` threads; a big one streamed in
    the caller's thread. The first failure is raised by the next ``put`` or by leaving."""

    def __init__(self, place: S3Objects, in_flight: int) -> None:
        self.place = place
        self.pool = ThreadPoolExecutor(max(1, in_flight), thread_name_prefix="s3put")
        self.slots = threading.BoundedSemaphore(max(1, in_flight))
        self.pending: deque[Future[None]] = deque()
        self.failed: list[BaseException] = []

    def put(
        self,
        key: str,
        pieces: Pieces,
        size: int,
        metadata: Mapping[str, str] | None = None,
        done: Callable[[str], None] | None = None,
    ) -> None:
        check_key(key)
        self._raise()
        if size > ONE_PUT:
            self.place._put_big(key, pieces, size, metadata)
            if done is not None:
                done(key)
            return
        data = b"".join(filled(pieces, size))
        self.slots.acquire()
        try:
            f = self.pool.submit(self._one, key, data, metadata, done)
        except BaseException:
            self.slots.release()
            raise
        self.pending.append(f)
        while self.pending and self.pending[0].done():
            self.pending.popleft()

    def _one(self, key: str, data: bytes, metadata: Mapping[str, str] | None,
             done: Callable[[str], None] | None) -> None:  # fmt: skip
        try:
            if self.failed:
                return  # the run is failing: send no more
            self.place._put_small(key, data, metadata)
            if done is not None:
                done(key)
        except BaseException as e:
            self.failed.append(e)
        finally:
            self.slots.release()

    def _raise(self) -> None:
        if self.failed:
            raise self.failed[0]

    def finish(self) -> None:
        self.pool.shutdown(wait=True)
        self._raise()

    def abandon(self) -> None:
        """The caller is failing: what is queued is dropped, what is sending ends."""
        self.failed.append(ObjectStorageError("abandoned"))
        self.pool.shutdown(wait=True, cancel_futures=True)
