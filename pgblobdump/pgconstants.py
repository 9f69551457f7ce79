"""PostgreSQL's constants that pgblobdump relies on, defined once: the server's C names,
each with the header it comes from. Ground level, so that every layer (``toc/`` and
``storage/`` too, which never import ``pg/``) reads them from here."""

from __future__ import annotations

OID_MAX = 2**32 - 1
"""The largest OID (``OID_MAX``, postgres_ext.h): OIDs are unsigned 32-bit and 0 is
InvalidOid, so an LO's OID is 1 to 4294967295."""
FIRST_OID = 16384
"""FirstNormalObjectId (access/transam.h): OIDs below it belong to initdb's objects."""

LOBLKSIZE = 2048
"""Bytes per ``pg_largeobject`` page at most (``BLCKSZ / 4``, storage/large_object.h, in
a default build): a page never written is a hole, read as zeros."""
MAX_LARGE_OBJECT_SIZE = (2**31 - 1) * LOBLKSIZE
"""The largest LO PostgreSQL makes (storage/large_object.h): 2^31 - 1 pages, 4 TB."""

INV_WRITE = 0x20000
"""``lo_open`` mode (libpq/libpq-fs.h): write, and read the LO's latest bytes."""
INV_READ = 0x40000
"""``lo_open`` mode (libpq/libpq-fs.h): read under the transaction's snapshot."""

MAX_ALLOC_SIZE = (1 << 30) - 1
"""``MaxAllocSize`` (utils/memutils.h): the largest value the server allocates at once,
so the most a bytea (``lo_get``, ``lo_from_bytea``) can carry with its header."""
VARHDRSZ = 4
"""A varlena's header (c.h): a bytea of ``MAX_ALLOC_SIZE`` holds this many bytes less."""

NAMEDATALEN = 64
"""``NAMEDATALEN`` (pg_config_manual.h): an identifier is kept in at most this many bytes
less one."""
