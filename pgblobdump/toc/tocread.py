"""ReadToc: decode TOC entries one at a time from a buffered reader.

The loop is written out field by field on local variables, not through Reader methods:
a million-entry TOC has seventeen million fields, and a method call per field would cost
more than the whole decode. Each entry is decoded optimistically from the buffer; if it
runs past the buffered bytes, the buffer is refilled and the entry decoded again. Strings
stay ``bytes`` here; consumers decode only the fields they use.

As in ReadInt, any non-zero sign byte means negative; as in ReadStr, any negative length
means NULL.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from pgblobdump.errors import CorruptArchive
from pgblobdump.toc.blobruns import BlobFamily, BlobRun, Families
from pgblobdump.toc.fields import RawEntry
from pgblobdump.toc.header import K_VERS_1_14, K_VERS_1_16, ArchiveHeader
from pgblobdump.toc.primitives import INT4, OFFSET8, OFFSET_FLAGS, Reader

TWO_INTS = struct.Struct("<BIBI")
"""Two consecutive Ints (or an Int and a Str length) decoded in one call."""


class _Overrun(Exception):
    """The entry continues past the buffered bytes (internal: refill and retry)."""


def read_items(r: Reader, header: ArchiveHeader, with_offset: bool) -> Iterator[RawEntry | BlobRun]:
    """Each TOC entry in order (``with_offset`` for custom format, else a data filename),
    consecutive same-shape BLOB entries grouped into a BlobRun (matched by blobruns at C
    speed)."""
    if r.int_size != 4 or (with_offset and r.off_size != 8):
        yield from _read_entries_generic(r, header, with_offset)
        return
    one = INT4.unpack_from
    two = TWO_INTS.unpack_from
    unpack_off = OFFSET8.unpack_from
    has_tableam = header.version >= K_VERS_1_14
    has_relkind = header.version >= K_VERS_1_16
    name = r.name
    families = Families(has_tableam, has_relkind, with_offset)
    family: BlobFamily | None = None
    fresh = False  # the family comes from the entry just decoded (not from a run)
    index = 0
    toc_count = header.toc_count
    while index < toc_count:
        if family is not None:
            run = family.match(r.buf, r.pos, index, toc_count - index)
            if run is not None:
                families.hit()
                r.pos = run.end
                index += run.count
                fresh = False
                yield run
                continue  # another run of the same family may follow at once
            if fresh:
                families.miss()
            family = None
        while True:
            buf = r.buf
            end = len(buf)
            start = pos = r.pos
            try:
                s, dump_id, s2, had_dumper = two(buf, pos)
                if s or dump_id == 0:
                    raise CorruptArchive(
                        f"{name}: entry ID {'-' if s else ''}{dump_id} out of range at byte"
                        f" {r.base + pos} (TOC entry {index + 1}) -- corrupt TOC?"
                    )
                pos += 10
                s, n = one(buf, pos)
                pos += 5
                if s:
                    tableoid = None
                else:
                    tableoid = buf[pos : pos + n]
                    pos += n
                s, n = one(buf, pos)
                pos += 5
                if s:
                    oid = None
                else:
                    oid = buf[pos : pos + n]
                    pos += n
                s, n = one(buf, pos)
                pos += 5
                if s:
                    tag = None
                else:
                    tag = buf[pos : pos + n]
                    pos += n
                s, n = one(buf, pos)
                pos += 5
                if s:
                    desc = None
                else:
                    desc = buf[pos : pos + n]
                    pos += n
                s, section, s2, n = two(buf, pos)
                if s:
                    section = -section
                pos += 10
                if s2:
                    defn = None
                else:
                    defn = buf[pos : pos + n]
                    pos += n
                s, n = one(buf, pos)
                pos += 5
                if s:
                    drop = None
                else:
                    drop = buf[pos : pos + n]
                    pos += n
                s, n = one(buf, pos)
                pos += 5
                if s:
                    copy = None
                else:
                    copy = buf[pos : pos + n]
                    pos += n
                s, n = one(buf, pos)
                pos += 5
                if s:
                    nsp = None
                else:
                    nsp = buf[pos : pos + n]
                    pos += n
                s, n = one(buf, pos)
                pos += 5
                if s:
                    tblspc = None
                else:
                    tblspc = buf[pos : pos + n]
                    pos += n
                tableam = None
                if has_tableam:
                    s, n = one(buf, pos)
                    pos += 5
                    if not s:
                        tableam = buf[pos : pos + n]
                        pos += n
                relkind = 0
                if has_relkind:
                    s, relkind = one(buf, pos)
                    pos += 5
                s, n = one(buf, pos)
                pos += 5
                if s:
                    owner = None
                else:
                    owner = buf[pos : pos + n]
                    pos += n
                s, n = one(buf, pos)  # with-oids, always "false" since 12
                pos += 5
                if not s:
                    pos += n
                deps: tuple[int, ...] = ()
                s, n = one(buf, pos)
                pos += 5
                if not s:
                    dep_list = []
                    while not s:
                        if pos + n > end:
                            raise _Overrun
                        dep_list.append(int(buf[pos : pos + n]))
                        pos += n
                        s, n = one(buf, pos)
                        pos += 5
                    deps = tuple(dep_list)
                if with_offset:
                    state, offset = unpack_off(buf, pos)
                    pos += 9
                    filename = None
                    if state not in OFFSET_FLAGS:
                        raise CorruptArchive(
                            f"{name}: bad data offset flag {state} at byte {r.base + pos - 9}"
                            f" (TOC entry {index + 1})"
                        )
                else:
                    s, n = one(buf, pos)
                    pos += 5
                    state = None
                    offset = 0
                    if s:
                        filename = None
                    else:
                        filename = buf[pos : pos + n]
                        pos += n
                if pos > end:
                    raise _Overrun
            except (struct.error, _Overrun):
                need = max(pos - start, end - start) + 16
                left = None if r.size is None else r.size - r.base - start
                if left is not None and end - start < left < need:
                    need = left  # the entry may end within the slack: no early EOF error
                r.fill(need, f"TOC entry {index + 1}")
                continue
            except ValueError as e:  # a dependency that is not a number
                raise CorruptArchive(
                    f"{name}: bad dependency in TOC entry {index + 1} near byte {r.base + pos}"
                ) from e
            r.pos = pos
            break
        raw = (  # in the order of fields.F_*
            dump_id, had_dumper, tableoid, oid, tag, desc, section, defn, drop, copy, nsp,
            tblspc, tableam, relkind, owner, deps, state, offset, filename,
        )  # fmt: skip
        index += 1
        if desc == b"BLOB":
            family = families.get(raw)
            fresh = True
        yield raw


def _read_entries_generic(
    r: Reader, header: ArchiveHeader, with_offset: bool
) -> Iterator[RawEntry]:
    """read_items without runs, through Reader methods, for unusual Int or Offset widths."""
    has_tableam = header.version >= K_VERS_1_14
    has_relkind = header.version >= K_VERS_1_16
    for index in range(header.toc_count):
        what = f"TOC entry {index + 1}"
        at = r.offset
        dump_id = r.read_int(what)
        if dump_id <= 0:
            raise CorruptArchive(f"{r.name}: entry ID {dump_id} out of range at byte {at}")
        had_dumper = r.read_int(what)
        tableoid, oid, tag, desc = (r.read_raw_str(what) for _ in range(4))
        section = r.read_int(what)
        defn, drop, copy, nsp, tblspc = (r.read_raw_str(what) for _ in range(5))
        tableam = r.read_raw_str(what) if has_tableam else None
        relkind = r.read_int(what) if has_relkind else 0
        owner = r.read_raw_str(what)
        r.read_raw_str(what)  # with-oids
        deps: list[int] = []
        while (dep := r.read_raw_str(what)) is not None:
            try:
                deps.append(int(dep))
            except ValueError as e:
                raise CorruptArchive(f"{r.name}: bad dependency {dep!r} in {what}") from e
        if with_offset:
            state: int | None
            state, offset = r.read_offset(what)
            filename = None
        else:
            state, offset = None, 0
            filename = r.read_raw_str(what)
        yield (  # in the order of fields.F_*
            dump_id, had_dumper, tableoid, oid, tag, desc, section, defn, drop, copy, nsp,
            tblspc, tableam, relkind, owner, tuple(deps), state, offset, filename,
        )  # fmt: skip
