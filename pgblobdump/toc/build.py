"""A pg_dump custom archive built from scratch for a set of LOs (a packed archive's), in pg_dump
16's layout (archive 1.15), which pg_restore 16, 17 and 18 all read: the three settings
entries, then per LO a ``BLOB`` entry (pre-data: ``lo_create``, its owner), an ``ACL``
entry with the GRANT/REVOKE commands pg_dump would write for its ``aclitem[]`` and a
``COMMENT`` entry when it has them, and one ``BLOBS`` entry whose data block holds every
LO (entry shapes as a real pg_dump 16 archive has them). Written in one pass over the
index (the entries) and one over the volumes (the data), in constant memory. What it
is built from is a LoSource (packed/pgdump/unpack.py gives one for a packed archive).
"""

from __future__ import annotations

import contextlib
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, Protocol

from pgblobdump import __version__
from pgblobdump.aclitem import AclItem, parse
from pgblobdump.toc.fields import RawEntry
from pgblobdump.toc.header import K_VERS_1_15, K_VERS_1_16
from pgblobdump.toc.write import (
    BLK_BLOBS,
    compressor,
    set_offset,
    write_entry,
    write_int,
    write_str,
    write_stream,
)


class LoMeta(Protocol):
    """An LO's owner, ACL (``aclitem[]`` as text items, None for the default), comment."""

    @property
    def owner(self) -> str | None: ...
    @property
    def acl(self) -> tuple[str, ...] | None: ...
    @property
    def comment(self) -> str | None: ...


class LoPiece(Protocol):
    """An LO's bytes from ``offset``: the whole LO, or a piece of it (``last`` ends it)."""

    @property
    def oid(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def data(self) -> bytes | memoryview: ...
    @property
    def last(self) -> bool: ...


class LoSource(Protocol):
    """What an archive is built from: LOs in OID order with their metadata, their bytes
    (all in that order, or one LO's), the database and server version to name."""

    database: str
    server_version: str

    def los(self) -> Iterable[tuple[int, LoMeta]]: ...
    def pieces(self) -> Iterable[LoPiece]: ...
    def read_lo(self, oid: int) -> Iterable[bytes | memoryview]: ...


COMPRESSION_CODES = {"none": 0, "gzip": 1, "lz4": 2, "zstd": 3}
SECTION_NONE, SECTION_PRE_DATA, SECTION_DATA = 1, 2, 3
NO_DATA = 3
LO_CATALOG = b"2613"
"""pg_largeobject_metadata's OID: a BLOB entry's tableoid."""
SETTINGS = (
    (b"ENCODING", b"SET client_encoding = 'UTF8';\n"),
    (b"STDSTRINGS", b"SET standard_conforming_strings = 'on';\n"),
    (b"SEARCHPATH", b"SELECT pg_catalog.set_config('search_path', '', false);\n"),
)


def fmt_id(name: str) -> str:
    """A role name as pg_dump's fmtId quotes it: bare when a lower-case identifier."""
    if (
        name
        and (name[0].islower() or name[0] == "_")
        and all(c.islower() or c.isdigit() or c == "_" for c in name)
        and name.isascii()
    ):
        return name
    return '"' + name.replace('"', '""') + '"'


def _privs(words: tuple[str, ...]) -> str:
    return "ALL" if set(words) == {"SELECT", "UPDATE"} else ",".join(words)


def acl_commands(oid: int, owner: str | None, acl: tuple[str, ...]) -> str:
    """The commands that turn an LO's default privileges into ``acl`` (aclitem texts),
    as pg_dump's buildACLCommands writes them: REVOKE from the owner when its own entry
    is not the default, GRANTs by the owner, other grantors' GRANTs inside SET/RESET
    SESSION AUTHORIZATION."""
    lo = f"LARGE OBJECT {oid}"
    items = [parse(a) for a in acl]
    lines: list[str] = []
    mine = [i for i in items if i.grantee == owner and i.grantor == owner]
    if owner is not None and mine != [AclItem(owner, ("SELECT", "UPDATE"), (), owner)]:
        lines.append(f"REVOKE ALL ON {lo} FROM {fmt_id(owner)};")
        for i in mine:
            lines += _grants(lo, i)
    others = [i for i in items if i not in mine]
    for i in [i for i in others if i.grantor == owner]:
        lines += _grants(lo, i)
    for i in [i for i in others if i.grantor != owner]:
        lines.append(f"SET SESSION AUTHORIZATION {fmt_id(i.grantor)};")
        lines += _grants(lo, i)
        lines.append("RESET SESSION AUTHORIZATION;")
    return "".join(line + "\n" for line in lines)


def _grants(lo: str, i: AclItem) -> list[str]:
    to = "PUBLIC" if i.grantee is None else fmt_id(i.grantee)
    plain = tuple(p for p in i.privileges if p not in i.grantable)
    out = []
    if plain:
        out.append(f"GRANT {_privs(plain)} ON {lo} TO {to};")
    if i.grantable:
        out.append(f"GRANT {_privs(i.grantable)} ON {lo} TO {to} WITH GRANT OPTION;")
    return out


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _entries(archive: LoSource) -> Iterator[RawEntry]:
    """Every TOC entry but BLOBS, dump ids from 1 (the BLOBS entry takes the next one)."""
    dump_id = 0
    for tag, defn in SETTINGS:
        dump_id += 1
        yield (dump_id, 0, b"0", b"0", tag, tag, SECTION_PRE_DATA, defn, None, None, None,
               None, None, 0, None, (), None, 0, None)  # fmt: skip
    for lo_oid, meta in archive.los():
        o = str(lo_oid).encode()
        owner = meta.owner.encode() if meta.owner is not None else None
        dump_id += 1
        blob = dump_id
        yield (blob, 0, LO_CATALOG, o, o, b"BLOB", SECTION_PRE_DATA,
               b"SELECT pg_catalog.lo_create('" + o + b"');\n",
               b"SELECT pg_catalog.lo_unlink('" + o + b"');\n",
               None, None, None, None, 0, owner, (), None, 0, None)  # fmt: skip
        defn = acl_commands(lo_oid, meta.owner, meta.acl).encode() if meta.acl is not None else b""
        if defn:  # an ACL equal to the default needs no command (pg_dump writes none)
            dump_id += 1
            yield (dump_id, 0, b"0", b"0", b"LARGE OBJECT " + o, b"ACL", SECTION_NONE, defn,
                   None, None, None, None, None, 0, owner, (blob,), None, 0, None)  # fmt: skip
        if meta.comment is not None:
            dump_id += 1
            defn = f"COMMENT ON LARGE OBJECT {lo_oid} IS {_literal(meta.comment)};\n".encode()
            yield (dump_id, 0, b"0", b"0", b"LARGE OBJECT " + o, b"COMMENT", SECTION_NONE,
                   defn, None, None, None, None, None, 0, owner, (blob,), None, 0,
                   None)  # fmt: skip


def _header(count: int, algorithm: str, dbname: str, server: str, minor: int = 15) -> bytes:
    out = bytearray(b"PGDMP" + bytes([1, minor, 0, 4, 8, 1, COMPRESSION_CODES[algorithm]]))
    t = time.localtime()
    for v in (t.tm_sec, t.tm_min, t.tm_hour, t.tm_mday, t.tm_mon - 1, t.tm_year - 1900,
              max(t.tm_isdst, 0)):  # fmt: skip
        out += struct.pack("<BI", 0, v)

    class _Buf:
        def write(self, data: bytes) -> int:
            out.extend(data)
            return len(data)

    buf = _Buf()
    for text in (dbname, server, f"pgblobdump {__version__}"):
        write_str(buf, text.encode())  # type: ignore[arg-type]
    write_int(buf, count)  # type: ignore[arg-type]
    return bytes(out)


def write_archive(out: BinaryIO, archive: LoSource, algorithm: str = "gzip") -> int:
    """The custom archive of ``archive``'s LOs into ``out`` (seekable); returns the LOs."""
    count = sum(1 for _ in _entries(archive)) + 1  # one pass over the index to count
    out.write(_header(count, algorithm, archive.database, archive.server_version))
    last = 0
    for e in _entries(archive):
        write_entry(out, e, K_VERS_1_15, NO_DATA)
        last = e[0]
    blobs_id = last + 1
    blobs: RawEntry = (blobs_id, 1, b"0", b"0", b"BLOBS", b"BLOBS", SECTION_DATA, None, None,
                       None, None, None, None, 0, None, (), None, 0, None)  # fmt: skip
    at = write_entry(out, blobs, K_VERS_1_15)
    block = out.tell()
    out.write(bytes([BLK_BLOBS]))
    write_int(out, blobs_id)
    los = 0
    c = None
    for p in archive.pieces():
        if p.offset == 0:
            write_int(out, p.oid)
            c = compressor(algorithm)
        data = bytes(p.data)
        chunk = data if c is None else c.compress(data)
        if chunk:
            write_int(out, len(chunk))
            out.write(chunk)
        if p.last:
            if c is not None and (tail := c.flush()):
                write_int(out, len(tail))
                out.write(tail)
            write_int(out, 0)
            los += 1
    write_int(out, 0)
    set_offset(out, at, block)
    return los


# -- pg_dump 17's layout (archive 1.16) -----------------------------------------------
GROUP = 1000
"""LOs per BLOB METADATA group at most, as pg_dump 17 makes them."""


Group = tuple[str | None, "tuple[str, ...] | None", list[tuple[int, "str | None"]]]
"""(owner, ACL, [(oid, comment)]) of one BLOB METADATA group."""


def _groups(archive: LoSource) -> Iterator[Group]:
    """Consecutive LOs, in OID order, of one owner and one ACL, at most GROUP a group (a
    comment is the LO's own: it does not split groups); one LO a group when its ACL has
    a grant by another role than the owner."""
    key: tuple[str | None, tuple[str, ...] | None] | None = None
    los: list[tuple[int, str | None]] = []
    limit = GROUP
    for lo_oid, m in archive.los():
        k = (m.owner, m.acl)
        if los and (k != key or len(los) >= limit):
            assert key is not None
            yield key[0], key[1], los
            los = []
        if k != key:
            # A grant by another role than the owner needs SET SESSION AUTHORIZATION,
            # which pg_restore 17 and 18 re-issue per LO of a group as
            # "SET SESSION AUTHORIZATION role<oid>(null);", an error: one LO per group.
            limit = 1 if any(parse(a).grantor != m.owner for a in m.acl or ()) else GROUP
        key = k
        los.append((lo_oid, m.comment))
    if los:
        assert key is not None
        yield key[0], key[1], los


def _tag(oids: list[int]) -> bytes:
    return (str(oids[0]) if len(oids) == 1 else f"{oids[0]}..{oids[-1]}").encode()


def _entries_16(archive: LoSource, first_blobs: int) -> Iterator[RawEntry]:
    """Settings, then per group its BLOB METADATA, ACL and its LOs' COMMENTs; then the
    BLOBS entries, numbered from ``first_blobs`` (one per group, in group order)."""
    dump_id = 0
    for tag, defn in SETTINGS:
        dump_id += 1
        yield (dump_id, 0, b"0", b"0", tag, tag, SECTION_PRE_DATA, defn, None, None, None,
               None, None, 0, None, (), None, 0, None)  # fmt: skip
    metas: list[tuple[int, bytes, bytes | None]] = []
    for owner_s, acl_items, los in _groups(archive):
        oids = [o for o, _ in los]
        owner = owner_s.encode() if owner_s is not None else None
        dump_id += 1
        md = dump_id
        tag = _tag(oids)
        metas.append((md, tag, owner))
        yield (md, 0, LO_CATALOG, str(oids[0]).encode(), tag, b"BLOB METADATA", SECTION_DATA,
               "".join(f"{o}\n" for o in oids).encode(), b"-- dummy", None, None, None, None,
               0, owner, (), None, 0, None)  # fmt: skip
        acl = acl_commands(oids[0], owner_s, acl_items) if acl_items is not None else ""
        if acl:
            dump_id += 1
            acl_tag = (b"LARGE OBJECTS " if len(oids) > 1 else b"LARGE OBJECT ") + tag
            yield (dump_id, 0, b"0", b"0", acl_tag, b"ACL", SECTION_NONE, acl.encode(), None,
                   None, None, None, None, 0, owner, (md,), None, 0, None)  # fmt: skip
        for o, comment in los:
            if comment is None:
                continue
            dump_id += 1
            defn = f"COMMENT ON LARGE OBJECT {o} IS {_literal(comment)};\n".encode()
            yield (dump_id, 0, b"0", b"0", f"LARGE OBJECT {o}".encode(), b"COMMENT",
                   SECTION_NONE, defn, None, None, None, None, None, 0, owner, (md,), None,
                   0, None)  # fmt: skip
    for k, (md, tag, owner) in enumerate(metas):
        yield (first_blobs + k, 1, b"0", b"0", tag, b"BLOBS", SECTION_DATA, None, None, None,
               None, None, None, 0, owner, (md,), None, 0, None)  # fmt: skip


def write_archive_16(out: BinaryIO, archive: LoSource, algorithm: str = "gzip") -> int:
    """The custom archive of ``archive``'s LOs in pg_dump 17's layout (archive 1.16):
    BLOB METADATA groups of one owner and ACL, a BLOBS data block per group."""
    others = blobs = 0
    for e in _entries_16(archive, 1 << 30):  # a pass to count (dump ids of BLOBS aside)
        if e[5] == b"BLOBS":
            blobs += 1
        else:
            others += 1
    first_blobs = others + 1
    out.write(_header(others + blobs, algorithm, archive.database, archive.server_version,
                      minor=16))  # fmt: skip
    offsets: list[int] = []
    for e in _entries_16(archive, first_blobs):
        if e[5] == b"BLOBS":
            offsets.append(write_entry(out, e, K_VERS_1_16))
        else:
            write_entry(out, e, K_VERS_1_16, NO_DATA)
    los = 0
    for k, (_owner, _acl, group) in enumerate(_groups(archive)):
        set_offset(out, offsets[k], out.tell())
        out.write(bytes([BLK_BLOBS]))
        write_int(out, first_blobs + k)
        for oid, _comment in group:
            write_int(out, oid)
            write_stream(out, (bytes(p) for p in archive.read_lo(oid)), algorithm)
            los += 1
        write_int(out, 0)
    return los


# -- a directory archive ---------------------------------------------------------------
FORMAT_BYTE = 10
DIRECTORY_CODE = 3
"""What a real pg_dump -Fd writes as its toc.dat's format code (the tar format's)."""


Opener = Callable[[str], contextlib.AbstractContextManager[BinaryIO]]


def write_directory(
    archive: LoSource, toc: BinaryIO, lists: Opener, algorithm: str, layout: int
) -> None:
    """A directory archive's toc.dat into ``toc`` and its LO list files through
    ``lists(name)``, in pg_dump 16's layout (``layout`` 16: blobs.toc) or 17's (17, 18:
    a blobs_<dumpId>.toc per group); the data files are the caller's (unpack)."""
    db, server = archive.database, archive.server_version

    def line(oid: int) -> bytes:
        return f"{oid} blob_{oid}.dat\n".encode()

    if layout <= 16:
        count = sum(1 for _ in _entries(archive)) + 1
        head = bytearray(_header(count, algorithm, db, server, minor=15))
        head[FORMAT_BYTE] = DIRECTORY_CODE
        toc.write(head)
        last = 0
        for e in _entries(archive):
            write_entry(toc, e, K_VERS_1_15, filename=b"")
            last = e[0]
        write_entry(toc, (last + 1, 1, b"0", b"0", b"BLOBS", b"BLOBS", SECTION_DATA, None,
                          None, None, None, None, None, 0, None, (), None, 0, None),
                    K_VERS_1_15, filename=b"blobs.toc")  # fmt: skip
        with lists("blobs.toc") as f:
            for lo_oid, _meta in archive.los():
                f.write(line(lo_oid))
        return
    others = sum(1 for e in _entries_16(archive, 1 << 30) if e[5] != b"BLOBS")
    groups = sum(1 for _ in _groups(archive))
    first = others + 1
    head = bytearray(_header(others + groups, algorithm, db, server, minor=16))
    head[FORMAT_BYTE] = DIRECTORY_CODE
    toc.write(head)
    for e in _entries_16(archive, first):
        name = f"blobs_{e[0]}.toc".encode() if e[5] == b"BLOBS" else b""
        write_entry(toc, e, K_VERS_1_16, filename=name)
    for k, (_owner, _acl, los) in enumerate(_groups(archive)):
        with lists(f"blobs_{first + k}.toc") as f:
            for oid, _comment in los:
                f.write(line(oid))
