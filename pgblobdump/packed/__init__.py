"""The packed LO archive: pgblobdump's own format for dumping and restoring LOs in a
handful of files (see docs/format.md). The CLI's dump, restore, verify, ls and cat are
thin layers over this package; tests use it directly.

The names below are loaded on first use, so that importing one module of the package
(``packed.format`` for a default, ``packed.request`` for a choice) does not import them
all: ``dump --help`` loads no libpq. The functions ``dump`` and ``restore`` share their
modules' names, so they are imported from those modules (``packed.dump.dump``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgblobdump import lazy

if TYPE_CHECKING:
    from pgblobdump.packed.dump.run import DumpRequest, DumpResult
    from pgblobdump.packed.format.index import Meta
    from pgblobdump.packed.read.items import Item, LoPiece, WholeLos
    from pgblobdump.packed.read.reader import PackedDirectory
    from pgblobdump.packed.read.source import open_source
    from pgblobdump.packed.read.stream import stream_items, stream_pieces
    from pgblobdump.packed.restore.archive import restore_archive
    from pgblobdump.packed.restore.request import OnConflict, RestoreRequest, RestoreResult

_HOME = {
    "DumpRequest": "dump.run",
    "DumpResult": "dump.run",
    "Item": "read.items",
    "LoPiece": "read.items",
    "Meta": "format.index",
    "OnConflict": "restore.request",
    "PackedDirectory": "read.reader",
    "RestoreRequest": "restore.request",
    "RestoreResult": "restore.request",
    "WholeLos": "read.items",
    "open_source": "read.source",
    "restore_archive": "restore.archive",
    "stream_items": "read.stream",
    "stream_pieces": "read.stream",
}
"""Each name the package offers and its module."""

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
    "open_source",
    "restore_archive",
    "stream_items",
    "stream_pieces",
]


__getattr__ = lazy.exports(__name__, _HOME)
