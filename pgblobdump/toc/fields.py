"""The raw TOC entry tuple (what tocread yields) and the position of each of its fields.

Entries stay plain tuples for speed (a million of them are decoded per second); these
constants name the positions, in the order of ReadToc and of entry.TocEntry's fields.
They are ``Final`` so that mypy types ``raw[F_DESC]`` as that field's type, and global
lookups of them cost next to nothing on 3.11+ (specialized LOAD_GLOBAL).
"""

from __future__ import annotations

from typing import Final

B = bytes | None

RawEntry = tuple[
    int, int, B, B, B, B, int, B, B, B, B, B, B, int, B, tuple[int, ...], int | None, int, B
]
"""An entry with undecoded strings: dump_id, had_dumper, tableoid, oid, tag, desc, section,
defn, drop_stmt, copy_stmt, namespace, tablespace, tableam, relkind, owner, dependencies,
data_state, data_offset, filename (the order of entry.TocEntry)."""

F_DUMP_ID: Final = 0
F_HAD_DUMPER: Final = 1
F_TABLEOID: Final = 2
F_OID: Final = 3
F_TAG: Final = 4
F_DESC: Final = 5
F_SECTION: Final = 6
F_DEFN: Final = 7
F_DROP_STMT: Final = 8
F_COPY_STMT: Final = 9
F_NAMESPACE: Final = 10
F_TABLESPACE: Final = 11
F_TABLEAM: Final = 12
F_RELKIND: Final = 13
F_OWNER: Final = 14
F_DEPENDENCIES: Final = 15
F_DATA_STATE: Final = 16
"""Custom format: the Offset flag (primitives.OFFSET_FLAGS); None in the other formats."""
F_DATA_OFFSET: Final = 17
"""Custom format: the data block's file position (0 in the other formats)."""
F_FILENAME: Final = 18
"""Directory and tar formats: the data file; None in custom format."""
FIELD_COUNT: Final = 19
