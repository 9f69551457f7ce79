"""The packed LO archive, format versions 1 to 3: structs, constants and what each byte
means. A standalone archive (one that needs no base) is written as version 2
(``STANDALONE_VERSION``), an incremental one as version 3 (``FORMAT_VERSION``); every
version is read.

docs/format.md is the reader's guide; this module is the one place the bytes are defined.
All integers are little-endian.

An archive is a few named files:

``data-W-NNNNNN.pbd`` (volumes)
    ``VOLUME_HEADER`` then frames, until the volume reaches ``--volume-size``. Worker W of a
    parallel dump writes its own volumes.
``index.pbi``
    The LOs sorted by OID in zstd-compressed blocks of fixed-width ``INDEX_RECORD``s, then
    the metadata table (distinct owner/ACL/comment values), then ``INDEX_FOOTER`` naming
    where each block starts and which OIDs it holds: one LO is found by reading the footer,
    one block and the frames holding the LO, whatever the archive's size.
``manifest.json``
    Written last, after every other file is complete: format version, source server and
    snapshot, counts, bytes, every file's size and xxh3-128, and (``index_tail``) the
    xxh3-128 of the index's tables, which a reader checks on opening the index. Without
    it an archive is an interrupted dump, and restore refuses it.

A frame is ``FRAME_HEADER`` + a payload (zstd or stored). A DATA frame's payload is a
directory of ``PIECE_RECORD``s followed by their bytes, so volumes read front to back
restore without the index: each frame says which LOs (or pieces of one) it holds. Small
LOs share a frame (up to ``FRAME_TARGET`` bytes); an LO larger than that is split into
pieces, one per frame, in consecutive frames (continuing into the next volume when one
fills). Empty LOs are directory records with no bytes.

Holes (version 2): runs of whole zero LOBLKSIZE pages are not stored. An LO with holes is
written as pieces like a large one (it may share a frame, and a frame may hold several of
its pieces): its first piece is at offset 0 (no bytes when the LO starts with a hole),
the bytes between one piece's end and the next piece's offset are a hole, and when the LO
ends in a hole a last piece with no bytes at offset ``size`` closes it. Checksums are of
the LO's bytes, zeros included. Version 1 has no holes: a version 2 reader reads it as is.

Incremental archives (version 3, ``dump --since``): the index has a record for every LO,
and one whose bytes a base of the chain holds has volume ``CHAIN_VOLUME`` and, as its
frame offset, that base's depth; ``gone.oids`` lists the OIDs gone since the base.

The stream form (``dump -o -``) is the same frames in one byte stream after
``STREAM_HEADER``, with META frames carrying metadata values before their first use,
followed by INDEX frames (the index file's bytes) and a MANIFEST frame: readable front to
back with no seek, and, like the directory form, an interrupted stream has no manifest.
"""

from __future__ import annotations

import enum
import struct

# PostgreSQL's, and part of the format: the unit of a hole (docs/format.md's Constants
# table is read from this module's names).
from pgblobdump import pgconstants
from pgblobdump.pgconstants import LOBLKSIZE as LOBLKSIZE

FORMAT_VERSION = 3
"""Bumped when a reader of an older version could misread an archive. 2: holes; 3:
incremental archives (index records of LOs whose bytes are in a base, ``CHAIN_VOLUME``)."""
STANDALONE_VERSION = 2
"""The version a standalone archive is written as: it holds nothing a version 2 reader would
misread, so a pgblobdump from before incremental dumps still reads it. Only an
incremental archive is version 3."""
READABLE_VERSIONS = (1, 2, 3)
"""Versions this code reads: 1 is 2 without holes; 3 is 2 with chain records."""


def version_problem(version: object) -> str | None:
    """Why this code cannot read format ``version`` (None: it can), in words that tell a
    user what to do: a newer archive needs a newer pgblobdump."""
    if version in READABLE_VERSIONS:
        return None
    if isinstance(version, int) and version > FORMAT_VERSION:
        return (
            f"format version {version}, written by a newer pgblobdump (this one reads"
            f" versions 1 to {FORMAT_VERSION}): upgrade pgblobdump to read it"
        )
    return f"format version {version!r}; this pgblobdump reads versions 1 to {FORMAT_VERSION}"


LO_SIZE_MAX = pgconstants.MAX_LARGE_OBJECT_SIZE
"""The largest LO PostgreSQL makes (MAX_LARGE_OBJECT_SIZE, 4 TB): a reader refuses a
piece that says more, rather than hash the zeros of a hole that large."""

VOLUME_MAGIC = b"PGBDVOL1"
STREAM_MAGIC = b"PGBDSTR1"
INDEX_MAGIC = b"PGBDIDX1"
FRAME_MAGIC = b"PBDF"

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "pgblobdump-packed"
"""The manifest's ``format``: what tells our manifest from any other JSON file."""
INDEX_NAME = "index.pbi"
DATABASE_FILE = "database.dump"
"""The pg_dump custom archive of everything but the LOs, in a --full packed archive."""


def volume_name(worker: int, number: int) -> str:
    """``data-1-000001.pbd``: worker 1's first volume."""
    return f"data-{worker}-{number:06d}.pbd"


VOLUME_HEADER = struct.Struct("<8sHH")
"""magic (8s), format version (H), worker (H). 12 bytes."""
STREAM_HEADER = struct.Struct("<8sHH")
"""magic (8s), format version (H), reserved (H). 12 bytes."""


class FrameKind(enum.IntEnum):
    """What a frame holds."""

    DATA = 1
    """A directory of PIECE_RECORDs, then the pieces' bytes."""
    INDEX = 2
    """Stream form only: the index file, in pieces of 1 MiB, one frame each."""
    MANIFEST = 3
    """Stream form only: the manifest, JSON; the last frame."""
    META = 4
    """Stream form only: metadata values (JSON ``[first id, [[owner, acl, comment],
    ...]]``), before the first DATA frame that uses them, so a restore from a pipe
    creates each LO with its owner as it comes."""


class Codec(enum.IntEnum):
    """How a frame's payload is stored: as is, or as one zstd frame (when that is
    smaller; a frame of random bytes is stored)."""

    STORED = 0
    ZSTD = 1


FRAME_HEADER = struct.Struct("<4sBBHIIIIQ")
"""magic (4s) ``PBDF``; kind (B, FrameKind); codec (B, Codec); reserved (H); records (I):
pieces in a DATA frame; directory bytes (I): size of the directory part, uncompressed;
stored bytes (I): the payload's size as written; payload bytes (I): its size
uncompressed; xxh3-64 (Q) of the stored payload, so damage is found before decompressing.
Followed by the payload. 32 bytes."""
FRAME_PAYLOAD_MAX = 64 << 20
"""No frame's payload is larger (a reader refuses one that says so: damage)."""

PIECE_RECORD = struct.Struct("<IIQQIQ")
"""One LO (or one piece of a large one) in a DATA frame's directory: oid (I); metadata id
(I) into the index's metadata table; the LO's size (Q); this piece's offset in the LO
(Q); this piece's length (I); xxh3-64 of the whole LO (Q), in its last piece (0 in
others). Pieces' bytes follow the directory in record order. 36 bytes."""

INDEX_RECORD = struct.Struct("<IIQIQQ")
"""One LO in the index: oid (I); metadata id (I); size (Q); volume number (I) and byte
offset (Q) of the frame holding its first piece (a worker's volumes are numbered
``worker << 20 | number``); xxh3-64 of the LO (Q). 36 bytes."""
INDEX_BLOCK_RECORDS = 4096
"""Records per compressed index block (144 KiB before compression)."""
BLOCK_ENTRY = struct.Struct("<IIQII")
"""One index block in the footer: first oid (I), last oid (I), offset in the index file
(Q), stored size (I), records (I). 24 bytes."""
INDEX_FOOTER = struct.Struct("<8sHHIQQIQ")
"""The index file's last 44 bytes: magic (8s); format version (H); reserved (H); blocks
(I); offset of the block table (Q); offset of the metadata table (Q, zstd JSON); its
stored size (I); LO count (Q)."""

FRAME_TARGET = 1 << 20
"""Uncompressed bytes a DATA frame aims for: big enough for zstd to find redundancy
across small LOs, small enough that reading one LO decompresses little."""
PIECE_MAX = 1 << 20
"""A large LO's bytes per piece (per frame)."""
DEFAULT_VOLUME_SIZE = 1 << 30
"""``--volume-size`` default: 1 GiB, a size every file system and object store handles."""
ZSTD_LEVEL = 3
"""zstd's level for frames (``--level``): 3 is zstd's own default, fast to write."""
META_FRAME_MAX = 8 << 20
"""Bytes of metadata JSON per META frame at most (many distinct comments make many)."""

CHAIN_VOLUME = 0xFFFFFFFF
"""The volume of an incremental archive's ``INDEX_RECORD`` whose bytes are in a base
archive of its chain (no worker's volume: workers number 1 to 64); its frame offset is
then the depth of that base in the chain (0: the standalone archive the chain starts from)."""
GONE_NAME = "gone.oids"
"""An incremental archive's OIDs gone since its base: zstd of ascending u32s."""

VOLUME_SHIFT = 20
"""A volume's number in INDEX_RECORD is ``worker << VOLUME_SHIFT | number``."""


def volume_id(worker: int, number: int) -> int:
    """The number INDEX_RECORD gives worker ``worker``'s volume ``number``."""
    return (worker << VOLUME_SHIFT) | number


def volume_of(vid: int) -> tuple[int, int]:
    """(worker, number) of a volume id."""
    return vid >> VOLUME_SHIFT, vid & ((1 << VOLUME_SHIFT) - 1)
