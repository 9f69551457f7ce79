"""``unpack``: a packed archive made by ``pack`` from a pg_dump directory archive back
into that directory archive: its kept files (toc.dat, table data, the LO list files,
the members of pg_dump.tar) unchanged, and a ``blob_<oid>.dat`` file per LO written
from the packed bytes with the archive's compression (gzip, lz4, zstd or none), as
pg_dump names them. pg_restore reads it as it read the original (same toc.dat, same LO
list files): ``pg_restore -l`` is identical and every LO comes back.

``unpack_custom`` writes the same archive as one custom-format file (tocwrite.py), and
puts an archive packed from a custom archive back together. A packed dump has no TOC to
start from: tocbuild.py writes one in the layout of pg_dump 16 (1.15) or 17 (1.16).
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
from pgblobdump.packed.full import local_file
from pgblobdump.packed.pack import REST, REST_CUSTOM
from pgblobdump.packed.reader import PackedDirectory
from pgblobdump.packed.tocwrite import (
    BLK_BLOBS,
    BLK_DATA,
    set_offset,
    write_custom,
    write_entry,
    write_int,
    write_stream,
)
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.toc.compression import SUFFIXES
from pgblobdump.toc.primitives import K_OFFSET_POS_NOT_SET as K_OFFSET_NOT_SET

T = TypeVar("T")


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
    t0 = time.perf_counter()
    source = (archive.manifest or {}).get("source", {})
    if "format" not in source:  # a packed dump: its LOs, as pg_dump would write them
        return _directory_from_scratch(archive, output, reporter, major or 16, t0)
    if source.get("format") != "directory" or not archive.storage.exists(REST):
        raise UsageError(
            f"{archive.where} was packed from a pg_dump {source['format']} archive: unpack it"
            " with --format custom (a directory archive would lose what it kept)"
        )
    if major is not None:
        raise UsageError(
            f"{archive.where} keeps its pg_dump {source.get('pg_dump_version')} TOC, which"
            " unpack gives back as it was: leave out --pg-dump-major"
        )
    algorithm = str(source.get("compression") or "none")
    written: list[Path] = []
    try:
        output.mkdir(parents=True, exist_ok=True)
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
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    reporter.progress(los, nbytes)
    return UnpackResult(los, nbytes, len(written), time.perf_counter() - t0)


def _directory_from_scratch(
    archive: PackedDirectory, output: Path, reporter: Reporter, major: int, t0: float
) -> UnpackResult:
    from pgblobdump.packed.tocbuild import write_directory

    if not 16 <= major <= 18:
        raise UsageError(f"--pg-dump-major {major}: unpack writes the layouts of 16, 17 and 18")
    written: list[Path] = []
    try:
        output.mkdir(parents=True, exist_ok=True)
        written.append(output / "toc.dat")

        def lists(name: str) -> contextlib.AbstractContextManager[BinaryIO]:
            written.append(output / name)
            return _create(output / name)

        with _create(output / "toc.dat") as toc:
            write_directory(archive, toc, lists, "gzip", major)
        los, nbytes = write_blob_files(archive, output, "gzip", written, reporter)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return UnpackResult(los, nbytes, len(written), time.perf_counter() - t0)


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


def unpack_custom(
    archive: PackedDirectory, output: Path, reporter: Reporter = QUIET, major: int | None = None
) -> UnpackResult:
    """The custom-format archive equal to the directory archive ``archive`` was packed
    from: the directory archive is unpacked into a temporary directory, then its header,
    TOC and data files are written as one custom file (tocwrite.py). ``output`` must not
    exist; on failure nothing is left under its name."""
    from pgblobdump.toc import blobs
    from pgblobdump.toc.compression import decompressor
    from pgblobdump.toc.fields import F_DESC, F_DUMP_ID, F_FILENAME
    from pgblobdump.toc.header import read_header
    from pgblobdump.toc.primitives import Reader
    from pgblobdump.toc.reader import TOC_FILE, open_archive

    if output.exists():
        raise FileError(f"{output} exists; choose a new file name")
    t0 = time.perf_counter()
    source = (archive.manifest or {}).get("source", {})
    if major is not None and not 16 <= major <= 18:
        raise UsageError(f"--pg-dump-major {major}: unpack writes the layouts of 16, 17 and 18")
    if source.get("format") == "custom" and archive.storage.exists(REST_CUSTOM):
        if major is not None:
            raise UsageError(
                f"{archive.where} keeps its pg_dump {source.get('pg_dump_version')} TOC,"
                " which unpack gives back as it was: leave out --pg-dump-major"
            )
        with local_file(archive.storage, REST_CUSTOM) as rest:
            los = _write_file(output, lambda out: _rebuild_custom(out, archive, rest))
        return UnpackResult(los, int((archive.manifest or {}).get("bytes", 0)), 1,
                            time.perf_counter() - t0)  # fmt: skip
    kept = source.get("format") == "directory" and archive.storage.exists(REST)
    if kept and major is not None:
        raise UsageError(
            f"{archive.where} keeps its pg_dump {source.get('pg_dump_version')} TOC, which"
            " unpack gives back as it was: leave out --pg-dump-major"
        )
    if not kept:
        # No directory TOC to start from: the LOs alone, in pg_dump 16's layout (every
        # pg_restore from 16 reads it), or 17's (--pg-dump-major 17 or 18).
        from pgblobdump.packed.tocbuild import write_archive, write_archive_16

        algorithm = str(source.get("compression") or "gzip")
        writer = write_archive if (major or 16) <= 16 else write_archive_16
        los = _write_file(output, lambda out: writer(out, archive, algorithm))
        return UnpackResult(los, int((archive.manifest or {}).get("bytes", 0)), 1,
                            time.perf_counter() - t0)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="pgblobdump-unpack-", dir=output.parent) as tmp:
        done = unpack(archive, Path(tmp) / "dir", reporter)
        with open_archive(Path(tmp) / "dir") as a:
            algorithm = a.header.compression
            suffix = SUFFIXES.get(algorithm, "")
            with (Path(tmp) / "dir" / TOC_FILE).open("rb") as f:
                r = Reader(f, a.name)
                read_header(r)
                size = r.offset
                f.seek(0)
                header = f.read(size)
            entries = list(a.iter_raw())

            def file_pieces(name: str) -> Iterator[bytes]:
                compressed = a.member_size(name + suffix) is not None
                member = name + suffix if compressed else name
                d = decompressor(algorithm if compressed else "none", whole_file=True)
                with a.open_member(member) as fh:
                    while chunk := fh.read(1 << 20):
                        if out := d.feed(chunk):
                            yield out
                if out := d.finish():
                    yield out

            def blocks() -> Iterator[tuple[int, int, Callable[[BinaryIO], None]]]:
                for e in entries:
                    fname = e[F_FILENAME]
                    if not fname:
                        continue
                    if e[F_DESC] == b"BLOBS":
                        entry = blobs.blobs_entry(e)

                        def body(out: BinaryIO, entry: blobs.BlobsEntry = entry) -> None:
                            for oid, member in blobs.list_oids(a, entry):
                                write_int(out, oid)
                                write_stream(out, file_pieces(member), algorithm)
                            write_int(out, 0)

                        yield e[F_DUMP_ID], BLK_BLOBS, body
                    else:
                        name = fname.decode()

                        def data(out: BinaryIO, name: str = name) -> None:
                            write_stream(out, file_pieces(name), algorithm)

                        yield e[F_DUMP_ID], BLK_DATA, data

            _write_file(
                output, lambda out: write_custom(out, header, a.header.version, entries, blocks())
            )
    return UnpackResult(done.los, done.bytes, 1, time.perf_counter() - t0)


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


def _rebuild_custom(out: BinaryIO, archive: PackedDirectory, rest: Path) -> int:
    """The custom archive ``archive`` was packed from: the kept archive's header and TOC,
    its data blocks copied, and each BLOBS entry's block written again from the packed
    LOs (1.16: the OIDs of the BLOB METADATA entry it depends on; before: every LO)."""
    from pgblobdump.toc.blobs import BLK_DATA as DATA
    from pgblobdump.toc.blobs import data_blocks
    from pgblobdump.toc.entry import parse_oids
    from pgblobdump.toc.fields import F_DEFN, F_DEPENDENCIES, F_DESC, F_DUMP_ID
    from pgblobdump.toc.header import K_VERS_1_16, read_header
    from pgblobdump.toc.primitives import Reader
    from pgblobdump.toc.reader import open_archive

    with open_archive(rest) as a:
        algorithm = a.header.compression
        with rest.open("rb") as f:
            r = Reader(f, a.name)
            read_header(r)
            size = r.offset
            f.seek(0)
            out.write(f.read(size))
        blocks = {i: (s, e) for kind, i, s, e in data_blocks(a) if kind == DATA}
        metadata: dict[int, bytes] = {}
        blobs_deps: dict[int, tuple[int, ...]] = {}
        where: dict[int, int] = {}
        for e in a.iter_raw():
            desc = e[F_DESC]
            if desc == b"BLOB METADATA":
                metadata[e[F_DUMP_ID]] = e[F_DEFN] or b""
            has_data = e[F_DUMP_ID] in blocks or desc == b"BLOBS"
            if desc == b"BLOBS":
                blobs_deps[e[F_DUMP_ID]] = e[F_DEPENDENCIES]
            at = write_entry(out, e, a.header.version, K_OFFSET_NOT_SET if has_data else 3)
            if has_data:
                where[e[F_DUMP_ID]] = at
        with rest.open("rb") as src:
            for dump_id, (start, end) in blocks.items():
                set_offset(out, where[dump_id], out.tell())
                src.seek(start)
                out.write(src.read(end - start))
        los = 0
        grouped = a.header.version >= K_VERS_1_16
        for dump_id, deps in blobs_deps.items():
            set_offset(out, where[dump_id], out.tell())
            out.write(bytes([BLK_BLOBS]))
            write_int(out, dump_id)
            if grouped:
                oids = [o for d in deps if d in metadata for o in parse_oids(metadata[d], a.name)]
            else:
                oids = [rec.oid for rec in archive.index]
            for oid in oids:
                write_int(out, oid)
                write_stream(out, (bytes(p) for p in archive.read_lo(oid)), algorithm)
                los += 1
            write_int(out, 0)
    return los
