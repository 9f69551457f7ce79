"""How a packed archive's index is checked against its manifest before it is trusted:
the tables' checksum (``index_tail``), each block's zstd checksum, the whole file's
xxh3-128; and what a reader says when one differs."""

from __future__ import annotations

import xxhash
import zstandard

from pgblobdump.errors import CorruptArchive
from pgblobdump.packed.format.spec import INDEX_NAME, ZSTD_LEVEL
from pgblobdump.storage import FileInfo, Storage

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


def check_whole(storage: Storage, where: str, listed: FileInfo) -> None:
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
    if size != listed.size or h.hexdigest() != listed.xxh3_128:
        raise CorruptArchive(f"{name}: {DAMAGED}")
