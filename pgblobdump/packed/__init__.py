"""The packed LO archive: pgblobdump's own format for dumping and restoring LOs in a
handful of files (see docs/format.md). The CLI's dump, restore, verify, ls and cat are
thin layers over this package; tests use it directly."""

from pgblobdump.packed.dump import DumpRequest, DumpResult, dump
from pgblobdump.packed.index import Meta
from pgblobdump.packed.reader import LoPiece, PackedDirectory, stream_pieces
from pgblobdump.packed.restore import OnConflict, RestoreRequest, RestoreResult, restore
from pgblobdump.packed.source import open_source

__all__ = [
    "DumpRequest",
    "DumpResult",
    "LoPiece",
    "Meta",
    "OnConflict",
    "PackedDirectory",
    "RestoreRequest",
    "RestoreResult",
    "dump",
    "open_source",
    "restore",
    "stream_pieces",
]
