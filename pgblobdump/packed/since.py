"""``dump --since PREV``: an incremental archive, holding the bytes of the LOs new or
changed since PREV's snapshot, the metadata of every LO, and the OIDs gone since.

Which LOs changed comes from the tuples' transaction ids against PREV's snapshot mark
(``pg/changes.py``, the module ``sync`` reads them with): an LO whose metadata row, pages
and comment are all older than the mark is the one PREV holds. Every LO of the selection
then gets an index record: the LOs it packs point at its own volumes, the others at the
base in the chain that holds their bytes (``CHAIN_VOLUME``, the base's depth), with the
metadata read now (an owner renamed since PREV is the name today).
"""

from __future__ import annotations

import array
import copy
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import xxhash
import zstandard
from psycopg import sql

from pgblobdump import storage
from pgblobdump.errors import CorruptArchive, UsageError
from pgblobdump.packed import source
from pgblobdump.packed.bychecksum import Comparer, merge_taken
from pgblobdump.packed.format import CHAIN_VOLUME, INDEX_NAME
from pgblobdump.packed.index import IndexBuilder, MetaTable
from pgblobdump.packed.reader import PackedDirectory
from pgblobdump.pg import changes, lometa
from pgblobdump.pg.changes import Mark
from pgblobdump.pg.lostream import WINDOW, Selection


def where_of(path: str) -> str:
    """Where an archive is, as a chain records it: a local path made absolute (the
    restore may run from another directory), an ``s3://`` URL as given."""
    local = storage.local_path(path)
    return str(local.resolve()) if local is not None else path


def check_index(archive: PackedDirectory) -> None:
    """``index.pbi`` against the manifest's size and xxh3-128 (CorruptArchive naming it):
    a base's index is trusted for every LO it places."""
    assert archive.manifest is not None
    listed = {f["name"]: f for f in archive.manifest["files"]}
    entry = listed.get(INDEX_NAME)
    where = f"{archive.where}/{INDEX_NAME}"
    if entry is None:
        raise CorruptArchive(f"{archive.where}: its manifest lists no {INDEX_NAME}")
    if not archive.storage.exists(INDEX_NAME):
        raise CorruptArchive(f"{where}: missing (the manifest lists it)")
    h = xxhash.xxh3_128()
    size = 0
    with archive.storage.open(INDEX_NAME) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    if size != entry["size"] or h.hexdigest() != entry["xxh3_128"]:
        raise CorruptArchive(f"{where}: damaged (its checksum differs from the manifest's)")


@dataclass(frozen=True)
class Base:
    """PREV, opened and checked: its archive, its snapshot mark, the chain it is the
    last link of (``chain``: its own bases, root first) and how NEW names it."""

    archive: PackedDirectory
    mark: Mark
    chain: list[dict[str, Any]]
    link: dict[str, Any]

    @property
    def depth(self) -> int:
        return len(self.chain)


def open_base(path: str) -> Base:
    """PREV as given to ``--since``: a complete packed archive made by ``dump`` (full or
    incremental), its index sound. Refused in one line otherwise."""
    archive = source.directory(path)
    manifest = archive.manifest
    assert manifest is not None  # an archive without one is refused by PackedDirectory
    src = manifest.get("source") or {}
    mark = src.get("mark")
    if mark is None:
        what = ("made by pack from a pg_dump archive" if "format" in src
                else "made by a pgblobdump from before incremental dumps")  # fmt: skip
        raise UsageError(
            f"--since {path}: {what}, it records no snapshot to compare with; take a full"
            " dump with this pgblobdump first"
        )
    check_index(archive)
    inc = archive.incremental or {}
    chain = [dict(link) for link in inc.get("chain", [])]
    link = {"manifest": archive.manifest_sum, "where": where_of(path),
            "created": manifest.get("created"), "snapshot": src.get("snapshot")}  # fmt: skip
    return Base(archive, Mark.from_json(json.dumps(mark)), chain, link)


def check_source(base: Base, now: Mark, source_now: dict[str, Any], path: str) -> None:
    """PREV must have been read from this cluster's database (UsageError naming both)."""
    if (base.mark.cluster, base.mark.database) != (now.cluster, now.database):
        prev = (base.archive.manifest or {}).get("source") or {}
        raise UsageError(
            f"--since {path} was dumped from database {prev.get('database')!r}"
            f" (OID {base.mark.database}, {base.mark.cluster}); this is database"
            f" {source_now.get('database')!r} (OID {now.database}, {now.cluster}): an"
            " incremental dump reads the database its base read"
        )


@dataclass
class Plan:
    """What an incremental dump does: ``dump`` the OIDs to read (new or changed, in
    order); the others are carried (index records pointing at the base that holds their
    bytes, written into the writer's ``carried`` builder as they are found)."""

    dump: array.array[int] = field(default_factory=lambda: array.array("I"))
    gone: array.array[int] = field(default_factory=lambda: array.array("I"))
    new: int = 0
    changed: int = 0
    carried: int = 0
    carried_bytes: int = 0
    taken: dict[int, list[int]] = field(default_factory=dict)
    """Per depth in the chain: [LOs, bytes] whose bytes that base supplies."""
    compared: int = 0
    """LOs the base holds that the workers compare by checksum (no exact detection)."""
    detection: str = "transaction ids"

    def absorb(self, c: Comparer) -> None:
        """What a worker comparing checksums carried (``changed`` counted every compared
        LO until then)."""
        self.carried += c.los
        self.carried_bytes += c.bytes
        self.changed -= c.los
        merge_taken(self.taken, c.taken)

    def chain(self, base: Base) -> list[dict[str, Any]]:
        """NEW's chain: PREV's bases and PREV, each with what NEW takes from it."""
        out = []
        for depth, link in enumerate([*base.chain, base.link]):
            link = copy.deepcopy(link)
            los, nbytes = self.taken.get(depth, [0, 0])
            link["los"], link["bytes"] = los, nbytes
            out.append(link)
        return out

    def gone_file(self) -> bytes:
        data = array.array("I", self.gone)
        if data.itemsize != 4:
            raise RuntimeError("array('I') is not 32 bits here")
        if sys.byteorder == "big":
            data.byteswap()
        return zstandard.ZstdCompressor().compress(data.tobytes())


def plan(conn: psycopg.Connection, sel: Selection, base: Base, metas: MetaTable,
         carried: IndexBuilder, exact: bool = True) -> Plan:  # fmt: skip
    """Under the dump's snapshot (``conn``'s transaction): which selected LOs changed
    since the base's mark, merged with the base's index and every LO's metadata, in OID
    order (three sorted streams: memory is the changed OIDs' list). Not ``exact``: every
    LO the base holds is to be read and compared by checksum (``bychecksum``)."""
    out = Plan()
    changed = array.array("I")
    if exact:
        scan = changes.scan(conn, sel, base.mark, sparse=True)
        changed.extend(s.oid for s in scan if s.changed)
    else:
        out.detection = "checksums"
    index = base.archive.index
    base_it: Iterator[Any] = iter(index)
    b = next(base_it, None)
    ci, nchanged = 0, len(changed)
    cond = sel.where(sql.SQL("m.oid"))
    for w in lometa.windows(conn, cond, sel.first, sel.last, WINDOW):
        for oid, meta in zip(w.oids, w.metas, strict=True):
            while b is not None and b.oid < oid:
                out.gone.append(b.oid)
                b = next(base_it, None)
            while ci < nchanged and changed[ci] < oid:
                ci += 1
            if b is not None and b.oid == oid:
                if not exact:  # changed until a worker finds it equal
                    out.dump.append(oid)
                    out.compared += 1
                    out.changed += 1
                elif ci < nchanged and changed[ci] == oid:
                    out.dump.append(oid)
                    out.changed += 1
                else:
                    depth = b.offset if b.volume == CHAIN_VOLUME else base.depth
                    carried.add(oid, metas.id(meta), b.size, CHAIN_VOLUME, depth, b.checksum)
                    taken = out.taken.setdefault(depth, [0, 0])
                    taken[0] += 1
                    taken[1] += b.size
                    out.carried += 1
                    out.carried_bytes += b.size
                b = next(base_it, None)
            else:
                out.dump.append(oid)
                out.new += 1
    while b is not None:
        out.gone.append(b.oid)
        b = next(base_it, None)
    return out


def selections(oids: array.array[int], sel: Selection, jobs: int) -> list[list[Selection]]:
    """The OIDs to dump cut into ``jobs`` contiguous shares of as many LOs each (at least
    one share, maybe empty), each a list of selections of at most WINDOW OIDs."""
    jobs = max(1, min(jobs, len(oids)))
    out: list[list[Selection]] = []
    for k in range(jobs):
        lo, hi = len(oids) * k // jobs, len(oids) * (k + 1) // jobs
        mine = []
        for i in range(lo, hi, WINDOW):
            chunk = tuple(oids[i : min(i + WINDOW, hi)])
            mine.append(Selection(chunk[0], chunk[-1], sel.referenced_by, chunk))
        out.append(mine)
    return out


def describe(inc: dict[str, Any]) -> dict[str, Any]:
    """The counts of an incremental manifest's ``incremental``, for a summary."""
    return {k: inc[k] for k in ("new", "changed", "carried", "gone") if k in inc}
