"""Files read into the items restore's writer takes (packed/read/items.py): small files
whole, in runs (``WholeLos``); a file over CHUNK bytes 1 MiB at a time (``LoPiece``s,
never held whole); runs of whole zero pages left out, so a sparse file becomes a sparse
LO (sync/feed.pieces, as copy does).

Each file is hashed (sha256) as it is read, and stat'ed before (the walk's entry) and
after reading: a file whose size, mtime or ETag changed, or that gave more or fewer
bytes than its size, is read once more; changed again, it is skipped and reported
(``Book.skip``). A large file's LO is written piece by piece in a transaction of its
own: a change found at its end rolls that transaction back (a ``Damaged`` item) before
it is read again. What each OID's file was is kept in the ``Book`` until its batch's
transaction records and verifies it (files/importing/hooks.py)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pgblobdump.files.importing.follow import Readable
from pgblobdump.files.importing.reading import LINKED, Linked, whole
from pgblobdump.files.objects import Entry
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.read.items import Damaged, Item, WholeLos
from pgblobdump.packed.write.packer import SMALL_HOLE_PAGES
from pgblobdump.pgconstants import LOBLKSIZE
from pgblobdump.sync.feed import pieces

CHUNK = 1 << 20
"""Bytes read at a time; a file up to this size is read whole."""
RUN_FILES = 256
"""Small files handed on in one WholeLos at most."""

CHANGED = "changed while it was read (twice)"
GONE = "removed while the import ran"

AfterRead = Callable[[str], None]
"""Called with a file's key once its bytes are read, before it is stat'ed again (tests
change the file there: a real change, at a known moment)."""


@dataclass(frozen=True, slots=True)
class FileRec:
    """A file as it was read into an LO: the stat it had throughout, and its sha256."""

    key: str
    size: int
    mtime_ns: int
    etag: str | None
    sha256: bytes


@dataclass
class Book:
    """Shared by every job: the files read but not yet recorded, by OID, and the files
    skipped while reading, with why."""

    expected: dict[int, FileRec] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    retried: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def expect(self, oid: int, rec: FileRec) -> None:
        self.expected[oid] = rec

    def take(self, oids: list[int]) -> list[FileRec]:
        """The files of ``oids`` (a batch's, in its transaction)."""
        return [self.expected.pop(o) for o in oids]

    def skip(self, key: str, why: str) -> None:
        with self.lock:
            self.skipped.append((key, why))


class _Changed(Exception):
    """The file changed while it was read."""


def _same(a: Entry, b: Entry | None) -> bool:
    return b is not None and (a.size, a.mtime_ns, a.etag) == (b.size, b.mtime_ns, b.etag)


def _dense(data: bytes) -> bool:
    """No run of whole zero pages worth leaving out (a zero page starts with a zero)."""
    return len(data) <= SMALL_HOLE_PAGES * LOBLKSIZE or 0 not in data[::LOBLKSIZE]


def items(
    place: Readable, numbered: Iterator[tuple[int, Entry]], meta: Meta, book: Book,
    after_read: AfterRead | None = None,
) -> Iterator[Item]:  # fmt: skip
    """The files of ``numbered`` ((OID, entry), OIDs ascending) as restore's items."""
    oids: list[int] = []
    datas: list[bytes | memoryview] = []
    for oid, e in numbered:
        if e.size > CHUNK:
            if oids:
                yield WholeLos(oids, [meta] * len(oids), datas, [0] * len(oids))
                oids, datas = [], []
            yield from _large(place, oid, e, meta, book, after_read)
            continue
        data = _small(place, e, book, after_read, oid)
        if data is None:
            continue
        if _dense(data):
            oids.append(oid)
            datas.append(data)
            if len(oids) >= RUN_FILES:
                yield WholeLos(oids, [meta] * len(oids), datas, [0] * len(oids))
                oids, datas = [], []
            continue
        if oids:
            yield WholeLos(oids, [meta] * len(oids), datas, [0] * len(oids))
            oids, datas = [], []
        yield from pieces(oid, meta, len(data), [data], SMALL_HOLE_PAGES)
    if oids:
        yield WholeLos(oids, [meta] * len(oids), datas, [0] * len(oids))


def _read_exactly(f: object, n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at the end of the file)."""
    read = f.read  # type: ignore[attr-defined]
    first: bytes = read(n)
    if len(first) == n or not first:
        return first
    parts = [first]
    got = len(first)
    while got < n:
        more: bytes = read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _small(place: Readable, e: Entry, book: Book, after_read: AfterRead | None, oid: int
           ) -> bytes | None:  # fmt: skip
    """A file of at most CHUNK bytes, whole, checked unchanged (once more if not)."""
    for attempt in range(2):
        try:
            data, now = whole(place, e.key, e.size + 1, after_read)
        except Linked:
            book.skip(e.key, LINKED)
            return None
        if now is None:
            book.skip(e.key, GONE)
            return None
        if len(data) == e.size and _same(e, now):
            book.expect(oid, FileRec(e.key, e.size, e.mtime_ns, e.etag,
                                     hashlib.sha256(data).digest()))  # fmt: skip
            return data
        if attempt == 0:
            with book.lock:
                book.retried += 1
        if now.size > CHUNK:
            break
        e = now
    book.skip(e.key, CHANGED)
    return None


def _chunks(place: Readable, key: str, size: int, h: Any) -> Iterator[bytes]:
    """File ``key``'s ``size`` bytes, CHUNK at a time, hashed into ``h``; _Changed when
    it gives fewer or more."""
    with place.open(key) as f:
        left = size
        while left > 0:
            c = _read_exactly(f, min(CHUNK, left))
            if not c:
                raise _Changed
            h.update(c)
            left -= len(c)
            yield c
        if f.read(1):
            raise _Changed


def _large(place: Readable, oid: int, e: Entry, meta: Meta, book: Book,
           after_read: AfterRead | None) -> Iterator[Item]:  # fmt: skip
    """A file over CHUNK bytes, 1 MiB at a time; checked unchanged before its last
    piece (which commits its LO); changed, its LO is rolled back and it is read again."""
    for attempt in range(2):
        h = hashlib.sha256()
        now: Entry | None = None
        try:
            chunks = _chunks(place, e.key, e.size, h)
            for p in pieces(oid, meta, e.size, chunks, SMALL_HOLE_PAGES):
                if p.last:
                    if after_read is not None:
                        after_read(e.key)
                    now = place.stat(e.key)
                    if not _same(e, now):
                        raise _Changed
                    book.expect(oid, FileRec(e.key, e.size, e.mtime_ns, e.etag, h.digest()))
                yield p
            return
        except _Changed:
            pass
        except Linked:  # at the open: no piece of this attempt was yielded
            book.skip(e.key, LINKED)
            return
        # the LO's transaction, open since its first piece, rolls back
        yield Damaged([oid], e.key, f"{e.key} changed while it was read; it is read again")
        if attempt == 0:
            with book.lock:
                book.retried += 1
        now = now or place.stat(e.key)
        if now is None:
            book.skip(e.key, GONE)
            return
        if now.size <= CHUNK:
            break
        e = now
    book.skip(e.key, CHANGED)
