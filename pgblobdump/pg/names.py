"""PostgreSQL identifiers as the server stores them: at most NAMEDATALEN - 1 bytes."""

from __future__ import annotations

from pgblobdump.pgconstants import NAMEDATALEN

NAME_BYTES = NAMEDATALEN - 1
"""NAMEDATALEN - 1: the bytes of an identifier the server keeps (in the database's
encoding; UTF-8 here). A longer one is cut, with a NOTICE, by truncate_identifier."""


def clip(name: str, limit: int = NAME_BYTES) -> str:
    """``name`` cut to at most ``limit`` UTF-8 bytes without splitting a character, as the
    server's pg_mbcliplen does: a name we derive is then the name the server stores, and
    two we derive differ there as they differ here."""
    data = name.encode()
    if len(data) <= limit:
        return name
    return data[:limit].decode(errors="ignore")  # drops a character's partial tail only


def with_suffix(name: str, suffix: str, limit: int = NAME_BYTES) -> str:
    """``name`` clipped so that ``name + suffix`` fits in ``limit`` bytes, then ``suffix``."""
    return clip(name, limit - len(suffix.encode())) + suffix
