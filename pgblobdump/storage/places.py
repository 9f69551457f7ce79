"""Where a name a user gives points: ``s3://bucket/prefix``, ``-`` (a stream on stdin or
stdout) or a local path. The one place that tells them apart; callers ask here."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from pgblobdump.errors import FileError, PgBlobDumpError, UsageError
from pgblobdump.storage.base import CLAIM_NAME, Storage, why, widened
from pgblobdump.storage.local import LocalDirectory
from pgblobdump.storage.s3 import S3Prefix
from pgblobdump.storage.s3config import is_s3

STREAM = "-"
"""The name of standard input (read) or standard output (written)."""


def local_path(url: str) -> Path | None:
    """The local path ``url`` names; None for object storage (``s3://``)."""
    return None if is_s3(url) else Path(url)


def is_directory(url: str) -> bool:
    """Whether ``url`` names an existing directory-like place: any ``s3://`` prefix (a
    missing one reads as empty, so the reader says what is missing), or a local
    directory."""
    p = local_path(url)
    return p is None or p.is_dir()


def open(url: str) -> Storage:
    """An existing place to read: an ``s3://`` prefix or a local directory (NotFound or
    FileError when the directory is not there or is a file)."""
    p = local_path(url)
    return S3Prefix(url) if p is None else LocalDirectory(p)


@contextlib.contextmanager
def create_new(url: str, what: str, warn: Callable[[str], None] | None = None) -> Iterator[Storage]:
    """A new place to write: a local directory, new or existing and empty (removed again
    on failure when this call created it, as the writers leave it empty); an ``s3://``
    prefix holding nothing yet, in a bucket that exists. Either is claimed first
    (CLAIM_NAME, naming ``what`` holds it): of two runs given one place, one goes on and
    the other is refused. The claim is released when the block ends; one that cannot be
    removed is named in the error, or after a run that succeeded passed to ``warn``.
    ``-`` (standard output) is refused: a directory cannot go there."""
    if url == STREAM:
        raise UsageError(
            f"- is standard output, which cannot hold the directory {what} writes:"
            " name a new directory"
        )
    p = local_path(url)
    if p is None:
        s3 = S3Prefix(url, create=True)
        s3.claim(what)
        with _claimed(s3, warn):
            yield s3
        return
    held = (p / CLAIM_NAME).exists()  # then claim() says by whom
    if p.exists() and (not p.is_dir() or (not held and any(p.iterdir()))):
        raise FileError(f"{p} exists and is not an empty directory; choose a new name")
    created = not p.exists()
    storage = LocalDirectory(p, create=True)
    try:
        storage.claim(what)
        with _claimed(storage, warn):
            yield storage
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                p.rmdir()  # not when another run's files are in it
        raise


@contextlib.contextmanager
def _claimed(storage: Storage, warn: Callable[[str], None] | None) -> Iterator[None]:
    try:
        yield
    except BaseException as e:
        try:
            storage.release()
        except PgBlobDumpError as failure:
            claim = f"{storage.description}/{CLAIM_NAME}"
            wider = widened(e, f"could not remove {claim} ({why(failure)}): delete it")
            if wider is not e:
                raise wider from e
        raise
    try:
        storage.release()
    except PgBlobDumpError as failure:
        if warn is not None:
            warn(f"the archive is complete, but: {failure}; delete it")
