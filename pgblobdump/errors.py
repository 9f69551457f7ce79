"""The one exception hierarchy of pgblobdump; the CLI maps each class to an exit code.

The core raises these and nothing else for a user-facing failure. Messages are one line,
say what was expected and what was found, and name the file, server or option involved.
"""

from __future__ import annotations

import re


class PgBlobDumpError(Exception):
    """Base of every error pgblobdump reports to a user. ``exit_code`` is the process status."""

    exit_code: int = 1


class UsageError(PgBlobDumpError):
    """A bad option value: an unknown major, a size like ``4XB``, an absurd count."""

    exit_code = 2


class ConnectionFailed(PgBlobDumpError):
    """The server could not be reached or refused the connection."""

    exit_code = 3


class DatabaseError(PgBlobDumpError):
    """A statement failed on a reachable server (a table exists, an OID is taken, ...)."""

    exit_code = 4


class SyncConflict(DatabaseError):
    """copy or sync left LOs unequal because the target's are not theirs to change: made
    by another session, or changed on the target since a copy made them."""


class ToolchainError(PgBlobDumpError):
    """PostgreSQL binaries of a major version are missing or unusable."""

    exit_code = 5


class ServerError(PgBlobDumpError):
    """An embedded cluster failed to initialise, start or stop."""

    exit_code = 6


class ArchiveError(PgBlobDumpError):
    """An archive could not be read: a pg_dump archive (custom or directory) or one of our
    packed archives (a directory, a stream, an incremental's chain of bases)."""

    exit_code = 7


class NotAnArchive(ArchiveError):
    """The file is not the archive asked for: not a custom or directory pg_dump archive
    (plain SQL, tar, random bytes), or not a packed archive (no manifest, a stream where a
    directory is needed, a file of another kind)."""


class UnsupportedArchive(ArchiveError):
    """An archive whose version or compression this reader does not handle: a pg_dump
    archive's, or a packed archive's format version (one written by a newer pgblobdump)."""


class CorruptArchive(ArchiveError):
    """A pg_dump or packed archive that ends early or holds impossible values: a file
    whose size or checksum is not the manifest's, a frame or index block that does not
    check, a base of a chain that is not the one the incremental names."""


class DamagedData(CorruptArchive):
    """Damage in a packed archive's data volumes (a frame, a volume's end, the volume
    itself) that ``restore --skip-damaged`` reads past, naming from the index the LOs it
    loses; the index and manifest are sound."""


class NotFound(PgBlobDumpError):
    """A named object (an OID in an archive, a results folder) does not exist."""

    exit_code = 8


class ExternalCommandFailed(PgBlobDumpError):
    """pg_dump, pg_restore or another child process exited non-zero."""

    exit_code = 9


class InsufficientResources(PgBlobDumpError):
    """Not enough free disk space or inodes for the requested work."""

    exit_code = 10


class FileError(PgBlobDumpError):
    """A file or directory could not be read, created or written (permissions, no such
    parent, not a directory); a full disk is InsufficientResources instead."""

    exit_code = 11


class ObjectStorageError(PgBlobDumpError):
    """S3-compatible object storage refused or could not be reached: wrong credentials, no
    such bucket, an unreachable endpoint, errors left after retries."""

    exit_code = 12


class UnsafeToRemove(PgBlobDumpError):
    """vacuum refused before removing anything: a reference it cannot see (a table the
    role may not read, row-level security that applies to it, a column of a type that
    may hold OIDs and that no ``--references`` names), so it cannot tell orphans apart."""

    exit_code = 13


class LosSkipped(PgBlobDumpError):
    """``restore --skip-damaged`` finished, and left out the LOs of the damaged parts of
    its archive (its report, printed first, counts and names them): the database is
    not the archive's. Its own code, so a script tells it from a whole restore (0)."""

    exit_code = 14


def from_os_error(e: OSError, doing: str = "", what: str | None = None) -> PgBlobDumpError:
    """Our error for an OSError, the one place that maps them: ENOSPC/EDQUOT say the disk
    is full (InsufficientResources), others are FileError. The message is ``cannot
    <doing> <file>: <reason>``, or ``<what>: <reason>`` when the caller words it."""
    import errno

    if what is None:
        where = f" {e.filename}" if e.filename else ""
        what = f"cannot {doing}{where}" if doing else f"{where.strip() or 'I/O error'}"
    reason = e.strerror or str(e)
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return InsufficientResources(f"{what}: {reason} (the disk is full)")
    return FileError(f"{what}: {reason}")


class ResultsUnreadable(PgBlobDumpError):
    """A results file (compare's results.json) that is not what pgblobdump wrote: bad JSON,
    missing fields, fields of the wrong type. Same exit code as an unreadable archive."""

    exit_code = 7


class Interrupted(PgBlobDumpError):
    """Ctrl-C, SIGTERM or SIGHUP; children were stopped and partial output removed.

    The exit code is the shell's for that signal: 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP).
    """

    def __init__(self, message: str, signum: int = 2) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


# -- secrets ---------------------------------------------------------------------------
_SECRETS: set[str] = set()
_PASSWORD_RE = re.compile(
    r"""(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]+)"""  # key=value connection strings
    r"""|(://[^/@\s:]*:)([^@/\s]*)(@)""",  # postgresql://user:secret@host URLs
    re.IGNORECASE,
)


def register_secret(value: str | None) -> None:
    """Remember a password so that no message this process prints can contain it."""
    # A very short one would mask innocent text everywhere; the password= and user:...@
    # spellings are masked whatever their length.
    if value and len(value) >= 4:
        _SECRETS.add(value)


def scrub(text: str) -> str:
    """``text`` with every password masked: ``password=...`` and ``user:...@`` spellings,
    and any value given to register_secret, wherever it appears."""
    text = _PASSWORD_RE.sub(
        lambda m: f"{m.group(1)}***" if m.group(1) else f"{m.group(3)}***{m.group(5)}", text
    )
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
