"""``unpack``: a packed archive made by ``pack`` from a pg_dump directory archive back
into that directory archive: its kept files (toc.dat, table data, the LO list files,
the members of pg_dump.tar) unchanged, and a ``blob_<oid>.dat`` file per LO written
from the packed bytes with the archive's compression (gzip, lz4, zstd or none), as
pg_dump names them. pg_restore reads it as it read the original (same toc.dat, same LO
list files): ``pg_restore -l`` is identical and every LO comes back.

``unpack_custom`` writes the same archive as one custom-format file (toc/write.py), and
puts an archive packed from a custom archive back together. A packed dump has no TOC to
start from: toc/build.py writes one in the layout of pg_dump 16 (1.15) or 17 (1.16).
Not done: an archive packed from a tar archive as a tar archive.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, TypeVar

from pgblobdump.errors import (
    CorruptArchive,
    FileError,
    UnsupportedArchive,
    UsageError,
    from_os_error,
)
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.format.manifest import DumpSource, PackSource, Source
from pgblobdump.packed.pgdump.database import local_file
from pgblobdump.packed.pgdump.pack import REST, REST_CUSTOM
from pgblobdump.packed.read.items import LoPiece
from pgblobdump.packed.read.reader import PackedDirectory
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.toc import build
from pgblobdump.toc.compression import SUFFIXES
from pgblobdump.toc.write import directory_as_custom, rebuild_custom

T = TypeVar("T")


class _Source:
    """A packed archive as toc.build builds a pg_dump archive from it (a LoSource)."""

    def __init__(self, archive: PackedDirectory) -> None:
        self.archive = archive
        source = _source(archive)
        self.database = source.database or "postgres"
        self.server_version = source.server_version or ""

    def los(self) -> Iterator[tuple[int, Meta]]:
        index = self.archive.index
        return ((r.oid, index.meta(r.meta)) for r in index)

    def pieces(self) -> Iterator[LoPiece]:
        return self.archive.pieces()

    def read_lo(self, oid: int) -> Iterator[bytes | memoryview]:
        return self.archive.read_lo(oid)


@dataclass(frozen=True)
class UnpackResult:
    los: int
    bytes: int
    files: int
    seconds: float


def _compressor(algorithm: str, out: BinaryIO) -> IO[bytes]:
    """A writer that compresses into ``out`` as pg_dump's directory format does."""
    if algorithm == "gzip":
        return gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6, mtime=0)  # type: ignore[return-value]
    if algorithm == "lz4":
        import lz4.frame

        return lz4.frame.LZ4FrameFile(out, mode="wb")  # type: ignore[no-any-return]
    if algorithm == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().stream_writer(out, closefd=False)
    if algorithm == "none":
        return out
    raise UnsupportedArchive(f"unknown compression {algorithm!r}")


def unpack(
    archive: PackedDirectory, output: Path, reporter: Reporter = QUIET, major: int | None = None
) -> UnpackResult:
    """Write the pg_dump directory archive ``archive`` was packed from into ``output``
    (a new or empty directory); for a packed dump, a directory archive of its LOs in
    the layout of pg_dump ``major`` (16 by default, or 17/18). On failure the files
    written are removed."""
    archive.whole()
    t0 = time.perf_counter()
    source = _source(archive)
    _keeps_toc(archive, source, major)
    if not isinstance(source, PackSource):  # a packed dump: its LOs, as pg_dump would write them
        return _directory_from_scratch(archive, output, reporter, major or 16, t0)
    if source.format != "directory" or not archive.storage.exists(REST):
        raise UsageError(
            f"{archive.where} was packed from a pg_dump {source.format} archive: unpack it"
            " with --format custom (a directory archive would lose what it kept)"
        )
    algorithm = source.compression or "none"
    written: list[Path] = []
    with _removed_on_failure(written):
        output.mkdir(exist_ok=True)
        with archive.storage.open(REST) as f, tarfile.open(fileobj=f, mode="r|") as tar:
            for member in tar:
                name = member.name
                if not member.isfile() or "/" in name or name in ("", ".", ".."):
                    raise CorruptArchive(f"{archive.where}/{REST}: unexpected member {name!r}")
                data = tar.extractfile(member)
                assert data is not None
                target = output / name
                written.append(target)
                with data, _create(target) as copy:
                    while chunk := data.read(1 << 20):
                        copy.write(chunk)
        los, nbytes = write_blob_files(archive, output, algorithm, written, reporter)
    reporter.progress(los, nbytes)
    return UnpackResult(los, nbytes, len(written), time.perf_counter() - t0)


def _directory_from_scratch(
    archive: PackedDirectory, output: Path, reporter: Reporter, major: int, t0: float
) -> UnpackResult:
    written: list[Path] = []
    with _removed_on_failure(written):
        output.mkdir(exist_ok=True)
        written.append(output / "toc.dat")

        def lists(name: str) -> contextlib.AbstractContextManager[BinaryIO]:
            written.append(output / name)
            return _create(output / name)

        with _create(output / "toc.dat") as toc:
            build.write_directory(_Source(archive), toc, lists, "gzip", major)
        los, nbytes = write_blob_files(archive, output, "gzip", written, reporter)
    return UnpackResult(los, nbytes, len(written), time.perf_counter() - t0)


@contextlib.contextmanager
def _removed_on_failure(written: list[Path]) -> Iterator[None]:
    """Remove the files listed in ``written`` if the block fails."""
    try:
        yield
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def write_blob_files(
    archive: PackedDirectory, output: Path, algorithm: str, written: list[Path],
    reporter: Reporter = QUIET,
) -> tuple[int, int]:  # fmt: skip
    """A ``blob_<oid>.dat[.gz|.lz4|.zst]`` file per LO in ``output``, as pg_dump's
    directory format writes them, reading the volumes front to back once (an LO's file
    is open from its first piece to its last); each path goes into ``written``."""
    suffix = SUFFIXES.get(algorithm, "")
    los = nbytes = 0
    raw: BinaryIO | None = None
    out: IO[bytes] | None = None
    for p in archive.pieces():
        if p.offset == 0:
            target = output / f"blob_{p.oid}.dat{suffix}"
            written.append(target)
            raw = _open_new(target)
            out = _compressor(algorithm, raw)
        assert raw is not None and out is not None
        out.write(p.data)
        if p.last:
            if out is not raw:
                out.close()
            raw.close()
            raw = out = None
            los += 1
            nbytes += p.size
            if los % 2000 == 0:
                reporter.progress(los, nbytes)
    return los, nbytes


def _open_new(path: Path) -> BinaryIO:
    """A new file (never an existing one: unpack goes into an empty directory)."""
    try:
        return path.open("xb")
    except FileExistsError as e:
        raise FileError(f"{path} exists; unpack into a new or empty directory") from e
    except OSError as e:
        raise from_os_error(e, "create") from e


@contextlib.contextmanager
def _create(path: Path) -> Iterator[BinaryIO]:
    f = _open_new(path)
    try:
        with f:
            yield f
    except OSError as e:
        raise from_os_error(e, "write") from e


def _source(archive: PackedDirectory) -> Source:
    """Where the archive's LOs came from (a dump's, with nothing known, when it has no
    manifest)."""
    return archive.manifest.source if archive.manifest is not None else DumpSource()


def _keeps_toc(archive: PackedDirectory, source: Source, major: int | None) -> None:
    """--pg-dump-major makes sense only for a packed dump: an archive packed from pg_dump
    keeps its TOC, which unpack gives back as it was."""
    if major is None:
        return
    if isinstance(source, PackSource):
        raise UsageError(
            f"{archive.where} keeps its pg_dump {source.pg_dump_version} TOC, which"
            " unpack gives back as it was: leave out --pg-dump-major"
        )
    if not 16 <= major <= 18:
        raise UsageError(f"--pg-dump-major {major}: unpack writes the layouts of 16, 17 and 18")


def unpack_custom(
    archive: PackedDirectory, output: Path, reporter: Reporter = QUIET, major: int | None = None
) -> UnpackResult:
    """The pg_dump archive ``archive`` was packed from, as one custom-format file: a
    kept custom archive with its LO data put back, a kept directory archive unpacked
    into a temporary directory and rewritten as one file; for a packed dump, a custom
    archive of its LOs in pg_dump ``major``'s layout (toc/build.py). ``output`` must not
    exist; on failure nothing is left under its name."""
    archive.whole()
    if output.exists():
        raise FileError(f"{output} exists; choose a new file name")
    if not output.parent.is_dir():  # as pg_dump -Fc -f: no parents made
        raise FileError(f"cannot create {output}: no directory {output.parent}")
    t0 = time.perf_counter()
    source = _source(archive)
    _keeps_toc(archive, source, major)
    total = archive.manifest.bytes if archive.manifest is not None else 0
    packed_from = source.format if isinstance(source, PackSource) else None
    if packed_from == "custom" and archive.storage.exists(REST_CUSTOM):
        with local_file(archive.storage, REST_CUSTOM) as rest:
            los = _write_file(output, lambda out: rebuild_custom(
                out, rest, lambda oid: (bytes(p) for p in archive.read_lo(oid)),
                lambda: (r.oid for r in archive.index)))  # fmt: skip
        return UnpackResult(los, total, 1, time.perf_counter() - t0)
    if packed_from == "directory" and archive.storage.exists(REST):
        with tempfile.TemporaryDirectory(prefix="pgblobdump-unpack-", dir=output.parent) as tmp:
            done = unpack(archive, Path(tmp) / "dir", reporter)
            _write_file(output, lambda out: directory_as_custom(out, Path(tmp) / "dir"))
        return UnpackResult(done.los, done.bytes, 1, time.perf_counter() - t0)
    if packed_from is not None:
        raise UsageError(
            f"{archive.where} was packed from a pg_dump {packed_from} archive, which"
            " unpack cannot write back (only directory and custom archives)"
        )
    # A packed dump: no TOC to start from. pg_dump 16's layout (every pg_restore from 16
    # reads it), or 17's (--pg-dump-major 17 or 18).
    writer = build.write_archive if (major or 16) <= 16 else build.write_archive_16
    los = _write_file(output, lambda out: writer(out, _Source(archive), "gzip"))
    return UnpackResult(los, total, 1, time.perf_counter() - t0)


def _write_file(output: Path, write: Callable[[BinaryIO], T]) -> T:
    """``write(f)`` into a hidden ``.NAME.part`` next to ``output``, fsynced and renamed
    to it; on any failure the part is removed and nothing is left under the name."""
    part = output.with_name(f".{output.name}.part")
    try:
        with part.open("xb") as out:
            result = write(out)
            out.flush()
            os.fsync(out.fileno())
        part.replace(output)
    except OSError as e:
        part.unlink(missing_ok=True)
        raise from_os_error(e, "write") from e
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return result
