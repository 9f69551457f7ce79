"""How a packed archive's index is checked against its manifest before it is trusted:
the tables' checksum (``index_tail``), each block's zstd checksum, the whole file's
xxh3-128; and what a reader says when one differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import xxhash
import zstandard

from pgblobdump.errors import CorruptArchive
from pgblobdump.packed.format.spec import INDEX_NAME, ZSTD_LEVEL
from pgblobdump.storage import Storage

UNREAD = (
    "nothing is read from it; use another copy of the archive (pgblobdump verify names"
    " every damaged file)"
)
"""What to do about an index whose bytes are not the ones the manifest lists: no option
reads past it (``--skip-damaged`` needs the index to name what it skips)."""
DAMAGED = f"damaged (its checksum differs from the manifest's): {UNREAD}"
"""What a reader says of such an index."""


def block_compressor() -> zstandard.ZstdCompressor:
    """An index block's: its zstd frame carries its content's checksum, so a block read
    alone (``cat``, ``ls --oids``) is checked as it is decompressed; a pgblobdump before
    this decompresses such frames all the same."""
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)


@dataclass(frozen=True)
class IndexTail:
    """The manifest's ``index_tail``: where index.pbi's tables begin (its block table;
    the metadata table and the footer follow, to the end of the file) and the xxh3-128 of
    those bytes. A reader checks them on opening the index, reading them in one piece,
    whatever part of the index it goes on to read; their presence also says that every
    block's zstd frame has a checksum, which a reader then requires. An archive written
    before it has none (its reader checks its index whole, ``check_whole``)."""

    offset: int
    xxh3_128: str

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "xxh3_128": self.xxh3_128}

    @classmethod
    def from_manifest(cls, manifest: dict[str, Any], where: str) -> IndexTail | None:
        """The manifest's, checked for shape (CorruptArchive naming ``where``); None when
        it has none (written before it was)."""
        v = manifest.get("index_tail")
        if v is None:
            return None
        if (not isinstance(v, dict) or not isinstance(v.get("offset"), int)
                or not isinstance(v.get("xxh3_128"), str)):  # fmt: skip
            raise CorruptArchive(f"{where}: the manifest's index_tail is damaged ({v!r})")
        return cls(v["offset"], v["xxh3_128"])


def listed_index(manifest: dict[str, Any], where: str) -> dict[str, Any]:
    """The manifest's entry for the index (CorruptArchive when it has none)."""
    for f in manifest["files"]:
        if isinstance(f, dict) and f.get("name") == INDEX_NAME:
            return f
    raise CorruptArchive(f"{where}: its manifest lists no {INDEX_NAME}")


def check_whole(storage: Storage, where: str, listed: dict[str, Any]) -> None:
    """``index.pbi`` in ``storage`` (at ``where``) against the size and xxh3-128 its
    manifest ``listed``, read 1 MiB at a time: memory stays flat whatever its size."""
    name = f"{where}/{INDEX_NAME}"
    if not storage.exists(INDEX_NAME):
        raise CorruptArchive(f"{name}: missing (the manifest lists it)")
    h = xxhash.xxh3_128()
    size = 0
    with storage.open(INDEX_NAME) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    if size != listed["size"] or h.hexdigest() != listed["xxh3_128"]:
        raise CorruptArchive(f"{name}: {DAMAGED}")
