"""A packed archive's manifest (``manifest.json``, or a stream's MANIFEST frame) as typed
records: read and checked in one place (``Manifest.parse``), written in one place
(``Manifest.to_json``), byte for byte as pgblobdump has always written it.

Keys a newer pgblobdump may add (as ``index_tail`` was added without a version bump) are
kept, in the order read, in ``extra`` of the manifest and of its source, and written back
after the known keys (the source is what ``merge`` carries into its output); unknown keys
inside the other objects (files, chain links, ``incremental``, ``index_tail``) are
ignored, as every reader ignored them before.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pgblobdump.errors import CorruptArchive, NotAnArchive, UnsupportedArchive
from pgblobdump.packed.format.spec import INDEX_NAME, MANIFEST_FORMAT, version_problem
from pgblobdump.storage.base import FileInfo

REQUIRED = ("los", "bytes", "files", "created", "source", "metadata_values", "workers")
"""Top-level keys every manifest has had since the first format version, checked in this
order after ``format`` and ``version``."""


def shown(value: object) -> str:
    """A manifest value as a message shows it: ``"16.x"``, ``42``, ``missing (or null)``,
    ``an array``."""
    if value is None:
        return "missing (or null)"
    if isinstance(value, dict | list):
        return "an object" if isinstance(value, dict) else "an array"
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


class _Object:
    """A JSON object of the manifest being read, at ``path`` (``source.pg_dump``), its
    values taken by type: a wrong one is a CorruptArchive naming the key and the file."""

    def __init__(self, value: object, path: str, where: str) -> None:
        if not isinstance(value, dict):
            raise CorruptArchive(f"{where}: '{path}' is {shown(value)}, not an object")
        self.value: dict[str, Any] = value
        self.path = path
        self.where = where

    def name(self, key: str) -> str:
        """``key`` as messages name it: ``source.pg_dump.file``; a top-level key alone."""
        return f"{self.path}.{key}" if self.path else key

    def _bad(self, key: str, what: str) -> CorruptArchive:
        v = self.value.get(key)
        return CorruptArchive(f"{self.where}: '{self.name(key)}' is {shown(v)}, not {what}")

    def text(self, key: str) -> str:
        v = self.value.get(key)
        if not isinstance(v, str):
            raise self._bad(key, "a string")
        return v

    def integer(self, key: str) -> int:
        v = self.value.get(key)
        if not isinstance(v, int) or isinstance(v, bool):
            raise self._bad(key, "an integer")
        return v

    def optional_str(self, key: str) -> str | None:
        """A string or null (None); absent is None too."""
        return None if self.value.get(key) is None else self.text(key)

    def nullable_str(self, key: str) -> str | None:
        """A key always written, its value a string or null."""
        if key not in self.value:
            raise CorruptArchive(f"{self.where}: '{self.name(key)}' is missing")
        return self.optional_str(key)

    def optional_int(self, key: str) -> int | None:
        return None if self.value.get(key) is None else self.integer(key)

    def object(self, key: str) -> _Object:
        return _Object(self.value.get(key), self.name(key), self.where)

    def array(self, key: str) -> list[Any]:
        v = self.value.get(key)
        if not isinstance(v, list):
            raise self._bad(key, "an array")
        return v

    def items(self, key: str) -> list[_Object]:
        """The objects of the array at ``key``."""
        return [_Object(v, f"{self.name(key)}[{k}]", self.where)
                for k, v in enumerate(self.array(key))]  # fmt: skip

    def extra(self, known: tuple[str, ...]) -> dict[str, Any]:
        """The keys not ``known``, in the order read."""
        return {k: v for k, v in self.value.items() if k not in known}


@dataclass(frozen=True)
class IndexTail:
    """The manifest's ``index_tail``: where index.pbi's tables begin (its block table;
    the metadata table and the footer follow, to the end of the file) and the xxh3-128 of
    those bytes. A reader checks them on opening the index, reading them in one piece,
    whatever part of the index it goes on to read; their presence also says that every
    block's zstd frame has a checksum, which a reader then requires. An archive written
    before it has none (its reader checks its index whole, ``check_whole``)."""

    offset: int
    xxh3_128: str

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "xxh3_128": self.xxh3_128}

    @classmethod
    def parse(cls, v: object, where: str) -> IndexTail:
        if (not isinstance(v, dict) or not isinstance(v.get("offset"), int)
                or not isinstance(v.get("xxh3_128"), str)):  # fmt: skip
            raise CorruptArchive(f"{where}: the manifest's index_tail is damaged ({v!r})")
        return cls(v["offset"], v["xxh3_128"])


@dataclass(frozen=True)
class PgDumpFile:
    """``source.pg_dump`` of a ``dump --full`` archive: the version of the pg_dump that
    wrote ``file``, the archive of everything but the LOs (``database.dump``; whether the
    values are ones restore can use, ``full.dumped_by`` checks)."""

    version: str
    file: str

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "file": self.file}

    @classmethod
    def parse(cls, o: _Object) -> PgDumpFile:
        return cls(o.text("version"), o.text("file"))


@dataclass(frozen=True)
class DumpSource:
    """``source`` of an archive ``dump`` wrote: the server's version, the database, the
    role, the exported snapshot every worker read, the connection (never a password).
    ``mark``: the snapshot mark a later ``dump --since`` compares with, as
    ``pg.changes.Mark.to_json`` wrote it (a JSON array, kept as written; read with
    ``Mark.from_json`` where it is compared, so reading a manifest loads no libpq);
    None from servers before 13. ``pg_dump``: a ``--full`` archive's pg_dump file.
    ``dump`` writes every string; each is None (and not written) where a manifest
    edited by hand lacks it: nothing restore does depends on them."""

    server_version: str | None = None
    database: str | None = None
    user: str | None = None
    snapshot: str | None = None
    connection: str | None = None
    mark: tuple[Any, ...] | None = None
    pg_dump: PgDumpFile | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    KEYS = ("server_version", "database", "user", "snapshot", "connection", "mark", "pg_dump")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in self.KEYS[:5]:
            if (v := getattr(self, key)) is not None:
                out[key] = v
        if self.mark is not None:
            out["mark"] = list(self.mark)
        if self.pg_dump is not None:
            out["pg_dump"] = self.pg_dump.to_json()
        return {**out, **self.extra}

    @classmethod
    def parse(cls, o: _Object) -> DumpSource:
        strings = {key: o.optional_str(key) for key in cls.KEYS[:5]}
        mark = None if o.value.get("mark") is None else tuple(o.array("mark"))
        info = None if o.value.get("pg_dump") is None else PgDumpFile.parse(o.object("pg_dump"))
        return cls(**strings, mark=mark, pg_dump=info, extra=o.extra(cls.KEYS))


@dataclass(frozen=True)
class PackSource:
    """``source`` of an archive ``pack`` wrote from a pg_dump archive: its name, its
    format (``custom``, ``directory``, ``tar``), archive version (``1.16-0``),
    compression, the pg_dump and server versions and database its header names (None
    where it names none), and the file that keeps what is not LO data (``kept``: None
    when nothing was kept). Told from a ``DumpSource`` by its ``format``."""

    pg_dump_archive: str
    format: str
    archive_version: str
    compression: str
    pg_dump_version: str | None
    server_version: str | None
    database: str | None
    kept: str | None
    extra: Mapping[str, Any] = field(default_factory=dict)

    KEYS = ("pg_dump_archive", "format", "archive_version", "compression", "pg_dump_version",
            "server_version", "database", "kept")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {**{key: getattr(self, key) for key in self.KEYS}, **self.extra}

    @classmethod
    def parse(cls, o: _Object) -> PackSource:
        return cls(o.text("pg_dump_archive"), o.text("format"), o.text("archive_version"),
                   o.text("compression"), o.nullable_str("pg_dump_version"),
                   o.nullable_str("server_version"), o.nullable_str("database"),
                   o.nullable_str("kept"), extra=o.extra(cls.KEYS))  # fmt: skip


Source = DumpSource | PackSource


def _source(o: _Object) -> Source:
    return PackSource.parse(o) if "format" in o.value else DumpSource.parse(o)


@dataclass(frozen=True)
class ChainLink:
    """A base in an incremental archive's chain: the xxh3-128 of its manifest.json,
    where it was when the incremental was made (an absolute path or an ``s3://`` URL),
    when it was dumped and its snapshot (as its manifest said: None where it said
    none), and how many of the incremental's LOs (and bytes) it holds."""

    manifest: str
    where: str
    created: str | None
    snapshot: str | None
    los: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"manifest": self.manifest, "where": self.where, "created": self.created,
                "snapshot": self.snapshot, "los": self.los, "bytes": self.bytes}  # fmt: skip

    @classmethod
    def parse(cls, o: _Object) -> ChainLink:
        return cls(o.text("manifest"), o.text("where"), o.nullable_str("created"),
                   o.nullable_str("snapshot"), o.integer("los"), o.integer("bytes"))  # fmt: skip


def _chain(o: _Object) -> tuple[ChainLink, ...]:
    return tuple(ChainLink.parse(link) for link in o.items("chain"))


@dataclass(frozen=True)
class Incremental:
    """An incremental archive's ``incremental``: its chain (root first), the LOs and
    bytes of its snapshot, chain included, and what the dump found: ``new``,
    ``changed``, ``carried`` (bytes in a base), ``gone`` since the base,
    ``metadata_only`` (owner, ACL or comment changed alone) and ``detection`` (how:
    ``transaction ids`` or ``checksums (why)``). The last two are None in the first
    incremental archives, which lack them (and are not written then)."""

    chain: tuple[ChainLink, ...]
    los: int
    bytes: int
    new: int
    changed: int
    carried: int
    gone: int
    metadata_only: int | None = None
    detection: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"chain": [link.to_json() for link in self.chain],
                               "los": self.los, "bytes": self.bytes, "new": self.new,
                               "changed": self.changed, "carried": self.carried,
                               "gone": self.gone}  # fmt: skip
        if self.metadata_only is not None:
            out["metadata_only"] = self.metadata_only
        if self.detection is not None:
            out["detection"] = self.detection
        return out

    @classmethod
    def parse(cls, o: _Object) -> Incremental:
        return cls(_chain(o), o.integer("los"), o.integer("bytes"), o.integer("new"),
                   o.integer("changed"), o.integer("carried"), o.integer("gone"),
                   o.optional_int("metadata_only"), o.optional_str("detection"))  # fmt: skip


@dataclass(frozen=True)
class MergedFrom:
    """A merged archive's ``merged_from``: the incremental it folded (where it was, the
    xxh3-128 of its manifest.json) and that incremental's chain."""

    archive: str
    manifest: str
    chain: tuple[ChainLink, ...]

    def to_json(self) -> dict[str, Any]:
        return {"archive": self.archive, "manifest": self.manifest,
                "chain": [link.to_json() for link in self.chain]}  # fmt: skip

    @classmethod
    def parse(cls, o: _Object) -> MergedFrom:
        return cls(o.text("archive"), o.text("manifest"), _chain(o))


def _file(o: _Object) -> FileInfo:
    return FileInfo(o.text("name"), o.integer("size"), o.text("xxh3_128"))


@dataclass(frozen=True)
class Manifest:
    """A packed archive's manifest: its format ``version``, when it was ``created``
    (UTC, ISO 8601 to the second), where the LOs came from (``source``), the LOs and
    bytes its own volumes hold (``los``, ``bytes``: an incremental's snapshot counts are
    in ``incremental``), distinct metadata values, workers, whether the volumes hold LOs
    in OID order (``ordered``: False for a pack of a pg_dump 17 archive), what an
    incremental or merged archive adds, the index's tables' checksum (``index_tail``:
    None before it was written) and every other file with its size and xxh3-128, in the
    order written: the files besides the volumes (pg_dump's, ``gone.oids``), the volumes
    worker by worker, the index (a stream's lists the index alone)."""

    version: int
    created: str
    source: Source
    los: int
    bytes: int
    metadata_values: int
    workers: int
    files: tuple[FileInfo, ...]
    ordered: bool = True
    incremental: Incremental | None = None
    merged_from: MergedFrom | None = None
    index_tail: IndexTail | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    KEYS = ("format", "version", "created", "source", "los", "bytes", "metadata_values",
            "workers", "ordered", "incremental", "merged_from", "index_tail", "files")  # fmt: skip

    def to_json(self) -> builtins.bytes:
        """The manifest's bytes: JSON indented by one space, a newline at the end; the
        optional keys only when they say something."""
        out: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "version": self.version,
            "created": self.created,
            "source": self.source.to_json(),
            "los": self.los,
            "bytes": self.bytes,
            "metadata_values": self.metadata_values,
            "workers": self.workers,
        }
        if not self.ordered:
            out["ordered"] = False  # volumes in the source's order, not by OID
        if self.incremental is not None:
            out["incremental"] = self.incremental.to_json()
        if self.merged_from is not None:
            out["merged_from"] = self.merged_from.to_json()
        if self.index_tail is not None:
            out["index_tail"] = self.index_tail.to_json()
        out["files"] = [{"name": f.name, "size": f.size, "xxh3_128": f.xxh3_128}
                        for f in self.files]  # fmt: skip
        return (json.dumps({**out, **self.extra}, indent=1) + "\n").encode()

    @classmethod
    def parse(cls, body: builtins.bytes, where: str) -> Manifest:
        """The manifest in ``body`` (read from ``where``, named in errors), checked: JSON
        (else CorruptArchive), our format (NotAnArchive), a version this pgblobdump reads
        (UnsupportedArchive), the keys every manifest has (CorruptArchive "has no"), and
        every known key's type (CorruptArchive naming the key)."""
        try:
            value = json.loads(body)
        except ValueError as e:
            raise CorruptArchive(f"{where}: the manifest is not JSON ({e})") from e
        if not isinstance(value, dict) or value.get("format") != MANIFEST_FORMAT:
            raise NotAnArchive(f"{where}: not a pgblobdump packed archive manifest")
        if (why := version_problem(value.get("version"))) is not None:
            raise UnsupportedArchive(f"{where}: {why}")
        for key in REQUIRED:
            if key not in value:
                raise CorruptArchive(f"{where}: the manifest has no {key!r}")
        o = _Object(value, "", where)
        ordered = value.get("ordered", True)
        if not isinstance(ordered, bool):
            raise CorruptArchive(f"{where}: 'ordered' is {shown(ordered)}, not true or false")
        return cls(
            version=o.integer("version"),
            created=o.text("created"),
            source=_source(o.object("source")),
            los=o.integer("los"),
            bytes=o.integer("bytes"),
            metadata_values=o.integer("metadata_values"),
            workers=o.integer("workers"),
            files=tuple(_file(f) for f in o.items("files")),
            ordered=ordered,
            incremental=None if value.get("incremental") is None
            else Incremental.parse(o.object("incremental")),
            merged_from=None if value.get("merged_from") is None
            else MergedFrom.parse(o.object("merged_from")),
            index_tail=None if value.get("index_tail") is None
            else IndexTail.parse(value["index_tail"], where),
            extra=o.extra(cls.KEYS),
        )  # fmt: skip

    def listed(self, name: str) -> FileInfo | None:
        """The file ``name`` as listed, None when it is not."""
        return next((f for f in self.files if f.name == name), None)

    def listed_index(self, where: str) -> FileInfo:
        """The entry for the index (CorruptArchive naming ``where`` when there is none)."""
        if (f := self.listed(INDEX_NAME)) is None:
            raise CorruptArchive(f"{where}: its manifest lists no {INDEX_NAME}")
        return f

    @property
    def volumes(self) -> list[str]:
        """The volumes' names, as listed."""
        return [f.name for f in self.files if f.name.startswith("data-")]

    @property
    def snapshot_totals(self) -> tuple[int, int]:
        """LOs and bytes of the archive's snapshot: an incremental's chain included."""
        counts = self.incremental or self
        return counts.los, counts.bytes
