"""Runs of same-shape BLOB entries (archives up to 1.15), matched in one regex call.

pg_dump up to 16 writes one BLOB entry per large object, and in a million-LO archive
nearly all of them differ only in the dump id, the OID digits (written four times: oid,
tag, lo_create, lo_unlink) and the data offset. Once tocread has decoded one such entry
field by field, a BlobFamily compiles a pattern in which every length prefix and every
constant field is a literal and only those parts vary, each with a fixed width (one
alternative per OID digit count, the digits captured once and back-referenced). A match
is therefore exactly a valid encoding of consecutive entries that ReadToc would decode
to the same fields as the first, except the varying ones; a run of up to MAX_RUN of them
is matched by one ``re.match``. Anything else (another owner, an ACL, a damaged byte)
simply does not match and goes back to the field-by-field decoder.
"""

from __future__ import annotations

import re
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate, islice

from pgblobdump.pgconstants import OID_MAX
from pgblobdump.toc.fields import (
    F_COPY_STMT,
    F_DATA_STATE,
    F_DEFN,
    F_DEPENDENCIES,
    F_DESC,
    F_DROP_STMT,
    F_FILENAME,
    F_HAD_DUMPER,
    F_NAMESPACE,
    F_OID,
    F_OWNER,
    F_RELKIND,
    F_SECTION,
    F_TABLEAM,
    F_TABLEOID,
    F_TABLESPACE,
    F_TAG,
    RawEntry,
)

NULL_STR = b"\x01\x01\x00\x00\x00"
"""WriteStr(NULL) as pg_dump writes it: WriteInt(-1), sign byte 1 and value 1."""

LO_CREATE = b"SELECT pg_catalog.lo_create('"
LO_UNLINK = b"SELECT pg_catalog.lo_unlink('"
STMT_END = b"');\n"

MAX_RUN = 4096
"""Entries per regex call: bounds sre's backtracking stack (one mark save per repeat)."""

MAX_DIGITS = 10
"""OIDs are 32-bit: at most ten decimal digits."""

MAX_FAMILIES = 64
"""Distinct shapes compiled per TOC (owners, sections...); beyond it, decode generically."""

_ANY, _DIGIT = -1, -2


def _int(v: int) -> bytes:
    """WriteInt with intSize 4."""
    return (b"\x01" if v < 0 else b"\x00") + abs(v).to_bytes(4, "little")


def _str(v: bytes | None) -> bytes:
    """WriteStr: NULL or Int length + bytes."""
    return NULL_STR if v is None else _int(len(v)) + v


@dataclass(frozen=True, slots=True)
class BlobRun:
    """``count`` consecutive BLOB entries at ``buf[start:end]``, all of ``family``.

    Invariants: every entry has the family template's constant fields (owner, section,
    offset flag...), an OID of 1-10 ASCII digits equal to its tag and no dependencies;
    ``first_index`` is the 0-based TOC index of the first one.
    """

    buf: bytes
    start: int
    end: int
    count: int
    first_index: int
    family: BlobFamily

    @property
    def owner(self) -> bytes | None:
        return self.family.template[F_OWNER]

    @property
    def section(self) -> int:
        return self.family.template[F_SECTION]

    def _walk(self) -> Iterator[tuple[int, int]]:
        """(entry start, digit count) of each entry."""
        buf, p, at, base = self.buf, self.start, self.family.prefix + 1, self.family.base
        for _ in range(self.count):
            d = buf[p + at]
            yield p, d
            p += base + 4 * d

    def _digits(self) -> list[bytes]:
        """The OID digits of each entry."""
        found = self.family.digits
        if found is not None:
            return found.findall(self.buf, self.start, self.end)
        buf, at = self.buf, self.family.prefix + 5
        return [buf[p + at : p + at + d] for p, d in self._walk()]

    def tags(self) -> list[bytes]:
        """The tag of each entry: its OID's digits, as written."""
        return self._digits()

    def oids(self) -> array[int]:
        """The OID of each entry as los.blobs_oid reads it (0 when beyond 32 bits)."""
        values = list(map(int, self._digits()))
        try:
            return array("I", values)
        except OverflowError:  # ten digits can exceed 2^32 - 1; ReadToc's sscanf fails
            return array("I", (v if v <= OID_MAX else 0 for v in values))

    def dump_ids(self, digits: list[bytes] | None = None) -> array[int]:
        """The dump id of each entry: the four bytes after each entry's start.
        ``digits``: the run's ``tags()`` when the caller has them already."""
        base = self.family.base
        if digits is None:
            digits = self._digits()
        starts = accumulate((base + 4 * len(d) for d in digits), initial=self.start)
        buf = self.buf
        raw = b"".join([buf[p + 1 : p + 5] for p in islice(starts, self.count)])
        out = array("I", raw)
        if sys.byteorder == "big":
            out.byteswap()
        return out

    def entries(self) -> Iterator[RawEntry]:
        """The entries as tocread decodes them field by field, tuple for tuple."""
        t, buf = self.family.template, self.buf
        at, base, with_offset = self.family.prefix + 5, self.family.base, self.family.with_offset
        had_dumper, tableoid, desc, section = (
            t[F_HAD_DUMPER],
            t[F_TABLEOID],
            t[F_DESC],
            t[F_SECTION],
        )
        copy, nsp, tblspc, tableam = t[F_COPY_STMT], t[F_NAMESPACE], t[F_TABLESPACE], t[F_TABLEAM]
        relkind, owner, state, filename = t[F_RELKIND], t[F_OWNER], t[F_DATA_STATE], t[F_FILENAME]
        for p, d in self._walk():
            oid = buf[p + at : p + at + d]
            end = p + base + 4 * d
            yield (  # in the order of fields.F_*
                int.from_bytes(buf[p + 1 : p + 5], "little"), had_dumper, tableoid, oid, oid,
                desc, section, LO_CREATE + oid + STMT_END, LO_UNLINK + oid + STMT_END, copy, nsp,
                tblspc, tableam, relkind, owner, (), state,
                int.from_bytes(buf[end - 8 : end], "little") if with_offset else 0, filename,
            )  # fmt: skip


class BlobFamily:
    """The compiled shape of BLOB entries sharing ``template``'s constant fields."""

    def __init__(self, template: RawEntry, has_tableam: bool, has_relkind: bool,
                 with_offset: bool) -> None:  # fmt: skip
        t = template
        self.template = t
        self.with_offset = with_offset
        head = _int(t[F_HAD_DUMPER]) + _str(t[F_TABLEOID])
        self.prefix = 5 + len(head)  # where the oid Str's length Int starts
        tail = (
            _str(t[F_COPY_STMT]) + _str(t[F_NAMESPACE]) + _str(t[F_TABLESPACE])
            + (_str(t[F_TABLEAM]) if has_tableam else b"")
            + (_int(t[F_RELKIND]) if has_relkind else b"") + _str(t[F_OWNER]) + _str(b"false")
            + NULL_STR
        )  # fmt: skip
        tail += bytes([t[F_DATA_STATE] or 0]) if with_offset else _str(t[F_FILENAME])
        desc = _str(t[F_DESC]) + _int(t[F_SECTION])
        esc = re.escape
        alts = []
        cells: list[list[int]] = []
        for d in range(1, MAX_DIGITS + 1):
            ref = b"(?P=o%d)" % d
            stmt = _int(len(LO_CREATE) + d + len(STMT_END))
            alts.append(
                esc(_int(d)) + b"(?P<o%d>[0-9]{%d})" % (d, d) + esc(_int(d)) + ref
                + esc(desc + stmt + LO_CREATE) + ref + esc(STMT_END + stmt + LO_UNLINK) + ref
                + esc(STMT_END)
            )  # fmt: skip
            digits = [_DIGIT] * d
            lits = [_int(d), _int(d), desc + stmt + LO_CREATE, STMT_END + stmt + LO_UNLINK]
            cells.append(
                [0, *[_ANY] * 4, *head, *lits[0], *digits, *lits[1], *digits, *lits[2],
                 *digits, *lits[3], *digits, *STMT_END, *tail,
                 *([_ANY] * 8 if with_offset else [])]
            )  # fmt: skip
        entry = (
            b"\x00(?!\x00{4})(?s:....)" + esc(head) + b"(?:" + b"|".join(alts) + b")"
            + esc(tail) + (b"(?s:.{8})" if with_offset else b"")
        )  # fmt: skip
        self.base = len(cells[0]) - 4  # entry length = base + 4 * digits
        self.run = re.compile(b"(?:" + entry + b"){1,%d}" % MAX_RUN)
        self.one = re.compile(entry)
        # Counting entries: bytes.count of a literal that no other alignment can match
        # (checked below, cell by cell), else one more regex pass. The first candidate
        # ends with a byte rare in a TOC ('k'), which lets the search skip ahead.
        self.marker: bytes | None = next(
            (m for m in (LO_UNLINK[:-2], desc) if _occurs_once(m, cells)), None
        )
        # When that marker is the lo_unlink statement, each of its occurrences in a run is
        # one entry's, followed by the quoted OID: findall reads the OIDs in one call.
        self.digits = (
            re.compile(re.escape(LO_UNLINK[:-2]) + rb"\('([0-9]+)'")
            if self.marker == LO_UNLINK[:-2]
            else None
        )

    def match(self, buf: bytes, pos: int, index: int, limit: int) -> BlobRun | None:
        """The run of this family's entries at ``buf[pos:]``, at most ``limit`` of them."""
        m = self.run.match(buf, pos)
        if m is None:
            return None
        end = m.end()
        if self.marker is not None:
            count = buf.count(self.marker, pos, end)
        else:
            count = self.one.subn(b"", memoryview(buf)[pos:end])[1]
        if count > limit:  # the TOC ends inside the run: what follows is data
            count, end = limit, pos
            at = self.prefix + 1
            for _ in range(limit):
                end += self.base + 4 * buf[end + at]
        return BlobRun(buf, pos, end, count, index, self)


def _occurs_once(marker: bytes, cells: list[list[int]]) -> bool:
    """Whether ``marker`` can start at exactly one place in each entry shape, whatever
    the varying bytes are, including places that run on into any next entry."""
    k = len(marker)

    def fits(text: list[int], i: int) -> bool:
        for j in range(k):
            cell, byte = text[i + j], marker[j]
            if cell != byte and cell != _ANY and (cell != _DIGIT or not 48 <= byte <= 57):
                return False
        return True

    for c in cells:
        if sum(fits(c, i) for i in range(len(c) - k + 1)) != 1:
            return False
        for c2 in cells:
            text = c + c2[: k - 1]
            if any(fits(text, i) for i in range(len(c) - k + 1, len(c))):
                return False
    return True


def eligible(raw: RawEntry) -> bool:
    """Whether a decoded entry has the shape a BlobFamily matches."""
    oid = raw[F_OID]
    return (
        raw[F_DESC] == b"BLOB"
        and oid is not None
        and 1 <= len(oid) <= MAX_DIGITS
        and oid.isdigit()
        and raw[F_TAG] == oid
        and raw[F_DEFN] == LO_CREATE + oid + STMT_END
        and raw[F_DROP_STMT] == LO_UNLINK + oid + STMT_END
        and not raw[F_DEPENDENCIES]
    )


class Families:
    """The BlobFamily of each shape met in one TOC, compiled on first use."""

    def __init__(self, has_tableam: bool, has_relkind: bool, with_offset: bool) -> None:
        self.has_tableam = has_tableam
        self.has_relkind = has_relkind
        self.with_offset = with_offset
        self.known: dict[tuple[object, ...], BlobFamily | None] = {}
        self.cool = 0  # BLOB entries to let pass before trying again after a miss
        self.misses = 0

    def get(self, raw: RawEntry) -> BlobFamily | None:
        """The family to try after ``raw`` (a BLOB entry just decoded), or None."""
        if self.cool:
            self.cool -= 1
            return None
        if not eligible(raw):
            return None
        # every field but dump_id, oid, tag, defn, drop_stmt, dependencies, data_offset
        key = (
            raw[F_HAD_DUMPER : F_TABLEOID + 1] + raw[F_DESC : F_SECTION + 1]
            + raw[F_COPY_STMT : F_OWNER + 1] + raw[F_DATA_STATE : F_DATA_STATE + 1]
            + raw[F_FILENAME:]
        )  # fmt: skip
        if key in self.known:
            return self.known[key]
        family = None
        if len(self.known) < MAX_FAMILIES:
            family = BlobFamily(raw, self.has_tableam, self.has_relkind, self.with_offset)
        self.known[key] = family
        return family

    def miss(self) -> None:
        """No run followed a BLOB entry: back off (BLOB entries alternate with others)."""
        self.misses = min(self.misses + 1, 6)
        self.cool = (1 << self.misses) - 1

    def hit(self) -> None:
        self.misses = self.cool = 0
