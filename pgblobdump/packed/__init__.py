"""The packed LO archive: pgblobdump's own format for dumping and restoring LOs in a
handful of files (see docs/format.md). The CLI's dump, restore, verify, ls and cat are
thin layers over this package; tests use it directly."""

from pgblobdump.packed.dump import DumpRequest, DumpResult, dump
from pgblobdump.packed.index import Meta
from pgblobdump.packed.reader import Item, LoPiece, PackedDirectory, WholeLos
from pgblobdump.packed.request import OnConflict, RestoreRequest, RestoreResult
from pgblobdump.packed.restore import restore
from pgblobdump.packed.restoring import restore_archive
from pgblobdump.packed.source import open_source
from pgblobdump.packed.streamread import stream_items, stream_pieces

__all__ = [
    "DumpRequest",
    "DumpResult",
    "Item",
    "LoPiece",
    "Meta",
    "OnConflict",
    "PackedDirectory",
    "RestoreRequest",
    "RestoreResult",
    "WholeLos",
    "dump",
    "open_source",
    "restore",
    "restore_archive",
    "stream_items",
    "stream_pieces",
]
