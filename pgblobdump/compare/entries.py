"""TOC entries of an archive counted by type (BLOB, BLOB METADATA, BLOBS, TABLE, ...).

Two sources, one adapter: the native TOC reader (``pgblobdump.toc``) when it reads the
archive, else ``pg_restore -l`` of the contender's own major.
Counting happens after the measured run, so it never affects the figures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from pgblobdump import proc
from pgblobdump.errors import ExternalCommandFailed, PgBlobDumpError
from pgblobdump.toc import listing, open_archive, summarize

NATIVE = "native"
PG_RESTORE_L = "pg_restore -l"
NO_TOC = "none"
"""How the entries of an archive without a TOC (packed) were counted: they were not."""
NOT_LISTED = frozenset({"ENCODING", "STDSTRINGS", "SEARCHPATH", "DATABASE"})
"""Entries every archive has that ``pg_restore -l`` never prints (settings applied on
connect; DATABASE only with -C): the native count is higher by these, one each."""
LIST_TIMEOUT_SECONDS = 3600.0
"""``pg_restore -l`` reads only the TOC (minutes for millions of LOs); past this it hangs."""


def parse_listing_types(lines: Iterable[str]) -> Counter[str]:
    """Entry types counted from ``pg_restore -l`` lines (comments and blanks skipped)."""
    return Counter(line.desc for line in listing.parse_listing(lines, "pg_restore -l"))


def _native(path: Path) -> Counter[str]:
    # summarize() counts BLOB entries run by run (no object per entry on 16 archives).
    with open_archive(path) as archive:
        return Counter(summarize(archive, with_data=False).entries_by_type)


def _pg_restore(path: Path, list_cmd: Sequence[str]) -> Counter[str]:
    what = f"{' '.join(list_cmd[:2])} {path}"
    done = proc.run(list_cmd, what=what, timeout=LIST_TIMEOUT_SECONDS, capture=True, check=False)
    if done.returncode != 0:
        detail = done.stderr.strip().splitlines()
        raise ExternalCommandFailed(f"{what} failed: {detail[-1] if detail else done.returncode}")
    return parse_listing_types(done.stdout.splitlines())


def entries_by_type(
    path: Path, list_cmd: Sequence[str], prefer_native: bool = True
) -> tuple[dict[str, int], str]:
    """(entry type -> count, source used); the native reader first, ``list_cmd`` otherwise."""
    if prefer_native:
        try:
            native = _native(path)
        except PgBlobDumpError:
            pass  # an archive the native reader refuses: pg_restore has the last word
        else:
            return dict(sorted(native.items())), NATIVE
    return dict(sorted(_pg_restore(path, list_cmd).items())), PG_RESTORE_L
