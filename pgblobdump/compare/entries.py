"""TOC entries of an archive counted by type (BLOB, BLOB METADATA, BLOBS, TABLE, ...).

Two sources, one adapter: the native TOC reader (``pgblobdump.toc``) when it is importable
and reads the archive, else ``pg_restore -l`` of the contender's own major, parsed here.
Counting happens after the measured run, so it never affects the figures.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from pgblobdump.errors import ExternalCommandFailed, PgBlobDumpError

NATIVE = "native"
PG_RESTORE_L = "pg_restore -l"
NOT_LISTED = frozenset({"ENCODING", "STDSTRINGS", "SEARCHPATH", "DATABASE"})
"""Entries every archive has that ``pg_restore -l`` never prints (settings applied on
connect; DATABASE only with -C): the native count is higher by these, one each."""

# pg_dump's multi-word entry types, longest first so "MATERIALIZED VIEW DATA" wins.
_MULTI_WORD = sorted(
    (
        "BLOB METADATA", "TABLE DATA", "SEQUENCE SET", "SEQUENCE OWNED BY", "DEFAULT ACL",
        "FK CONSTRAINT", "CHECK CONSTRAINT", "MATERIALIZED VIEW DATA", "MATERIALIZED VIEW",
        "TEXT SEARCH CONFIGURATION", "TEXT SEARCH DICTIONARY", "TEXT SEARCH PARSER",
        "TEXT SEARCH TEMPLATE", "EVENT TRIGGER", "FOREIGN TABLE", "FOREIGN DATA WRAPPER",
        "FOREIGN SERVER", "USER MAPPING", "OPERATOR CLASS", "OPERATOR FAMILY",
        "PROCEDURAL LANGUAGE", "ACCESS METHOD", "DATABASE PROPERTIES", "PUBLICATION TABLE",
        "PUBLICATION TABLES IN SCHEMA", "STATISTICS DATA", "INDEX ATTACH", "ROW SECURITY",
        "SHELL TYPE", "ENCODING", "STDSTRINGS", "SEARCHPATH",
    ),
    key=len,
    reverse=True,
)  # fmt: skip


def parse_listing_types(lines: Iterable[str]) -> Counter[str]:
    """Entry types from ``pg_restore -l`` lines: ``<id>; <tableoid> <oid> <TYPE> <ns> ...``.

    Comment lines (``;``) and blanks are skipped.
    """
    counts: Counter[str] = Counter()
    for line in lines:
        if not line.strip() or line.startswith(";"):
            continue
        _id, sep, rest = line.partition(";")
        if not sep:
            continue
        fields = rest.split(maxsplit=2)
        if len(fields) < 3:
            continue
        tail = fields[2]
        kind = next((m for m in _MULTI_WORD if tail == m or tail.startswith(m + " ")), None)
        counts[kind or tail.split()[0]] += 1
    return counts


def _native(path: Path) -> Counter[str] | None:
    try:
        from pgblobdump.toc.reader import open_archive
    except ImportError:
        return None
    counts: Counter[str] = Counter()
    with open_archive(path) as archive:
        for raw in archive.iter_raw():
            desc = raw[5]
            counts[desc.decode() if desc is not None else "?"] += 1
    return counts


def _pg_restore(path: Path, list_cmd: Sequence[str]) -> Counter[str]:
    proc = subprocess.run(list(list_cmd), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = proc.stderr.strip().splitlines()
        raise ExternalCommandFailed(
            f"{' '.join(list_cmd[:2])} {path} failed: {detail[-1] if detail else proc.returncode}"
        )
    return parse_listing_types(proc.stdout.splitlines())


def entries_by_type(
    path: Path, list_cmd: Sequence[str], prefer_native: bool = True
) -> tuple[dict[str, int], str]:
    """(entry type -> count, source used); the native reader first, ``list_cmd`` otherwise."""
    if prefer_native:
        try:
            native = _native(path)
        except PgBlobDumpError:
            native = None  # a reader still in progress may not know this archive yet
        if native is not None:
            return dict(sorted(native.items())), NATIVE
    return dict(sorted(_pg_restore(path, list_cmd).items())), PG_RESTORE_L
