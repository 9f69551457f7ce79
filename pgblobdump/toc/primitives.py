"""Buffered decoding of the archive's primitive values: Int, Str, Offset and bytes.

Mirrors ReadInt, ReadStr, ReadOffset and ReadBuf of pg_backup_archiver.c: every Int is a
sign byte (1 = negative) followed by ``intSize`` little-endian bytes of the absolute value;
a Str is an Int length followed by that many bytes, length -1 meaning NULL; an Offset is a
flag byte followed by ``offSize`` little-endian bytes.
"""

from __future__ import annotations

import struct
from typing import IO

from pgblobdump.errors import CorruptArchive, UnsupportedArchive, from_os_error

CHUNK = 1 << 20
"""Bytes read from the file at a time; big enough that refills are rare, small enough that
a million-entry TOC is never held in memory."""

INT4 = struct.Struct("<BI")
"""An Int as every pg_dump since 7.x writes it (``intSize`` 4): sign byte, uint32 LE."""

OFFSET8 = struct.Struct("<BQ")
"""An Offset with ``offSize`` 8: flag byte, uint64 LE."""

K_OFFSET_POS_NOT_SET = 1
"""The entry has data but its position was not recorded (dump written to a pipe)."""

K_OFFSET_POS_SET = 2
"""The entry has data at the recorded file position."""

K_OFFSET_NO_DATA = 3
"""The entry has no data block."""

OFFSET_FLAGS = (K_OFFSET_POS_NOT_SET, K_OFFSET_POS_SET, K_OFFSET_NO_DATA)


class Reader:
    """Reads primitives from a binary file object through a large buffer.

    ``name`` is used in every error message; ``size`` (the file's length, when known)
    lets an absurd Str length fail at once instead of reading gigabytes. ``buf`` and
    ``pos`` are public so that hot loops (the TOC entry parser) can decode in place.
    """

    def __init__(self, f: IO[bytes], name: str, int_size: int = 4, off_size: int = 8,
                 size: int | None = None, start: int = 0) -> None:  # fmt: skip
        self.f = f
        self.name = name
        self.size = size
        self.buf = b""
        self.pos = 0
        self.base = start  # file offset of buf[0]
        self.set_sizes(int_size, off_size)

    def set_sizes(self, int_size: int, off_size: int) -> None:
        """Adopt the Int and Offset widths read from the header (ReadHead)."""
        if not 1 <= int_size <= 8 or not 1 <= off_size <= 8:
            raise UnsupportedArchive(
                f"{self.name}: integer size {int_size} / offset size {off_size} bytes"
                " is not supported (pg_dump writes 4 and 8)"
            )
        self.int_size = int_size
        self.off_size = off_size

    # -- position -------------------------------------------------------------------
    @property
    def offset(self) -> int:
        """The file offset of the next byte to decode."""
        return self.base + self.pos

    def seek(self, offset: int) -> None:
        """Continue decoding at file ``offset`` (a data block position from the TOC)."""
        if self.base <= offset <= self.base + len(self.buf):
            self.pos = offset - self.base
            return
        if self.size is not None and offset > self.size:
            raise CorruptArchive(
                f"{self.name}: data offset {offset} lies beyond the end of the file"
                f" ({self.size} bytes)"
            )
        self.f.seek(offset)
        self.base = offset
        self.buf = b""
        self.pos = 0

    def skip(self, n: int, what: str = "data") -> None:
        """Move past ``n`` bytes without keeping them (seeking when they are not buffered)."""
        end = self.pos + n
        if end <= len(self.buf):
            self.pos = end
            return
        target = self.base + end
        if self.size is not None and target > self.size:
            self.eof(what)
        try:
            self.f.seek(target)
        except OSError:  # not seekable (never the case for a path, kept for safety)
            self.read_bytes(n, what)
            return
        self.base = target
        self.buf = b""
        self.pos = 0

    # -- buffer ---------------------------------------------------------------------
    def fill(self, need: int, what: str) -> None:
        """Make ``need`` bytes available from ``pos`` or raise CorruptArchive (early EOF)."""
        have = len(self.buf) - self.pos
        if have >= need:
            return
        if self.size is not None and self.offset + need > self.size:
            self.eof(what)
        parts = [self.buf[self.pos :]]
        self.base += self.pos
        self.pos = 0
        want = max(need - have, CHUNK, have)  # grow geometrically for huge strings
        while have < need:
            try:
                data = self.f.read(want)
            except OSError as e:
                self.buf = b"".join(parts)
                raise from_os_error(  # the OS failed us (EIO): 11, the bytes may be fine
                    e, what=f"{self.name}: cannot read at byte {self.base + have}"
                ) from e
            if not data:
                self.buf = b"".join(parts)
                self.eof(what)
            parts.append(data)
            have += len(data)
        self.buf = b"".join(parts)

    def eof(self, what: str) -> None:
        """Raise the error for an archive that ends in the middle of ``what``."""
        raise CorruptArchive(
            f"{self.name}: file ends early (truncated?) at byte {self.base + len(self.buf)}"
            f" while reading {what}"
        )

    def at_eof(self) -> bool:
        """Whether no byte is left to decode."""
        if self.pos < len(self.buf):
            return False
        try:
            self.fill(1, "end of file")
        except CorruptArchive:
            return True
        return False

    # -- primitives -------------------------------------------------------------------
    def read_byte(self, what: str = "a byte") -> int:
        self.fill(1, what)
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def read_bytes(self, n: int, what: str = "data") -> bytes:
        """ReadBuf: exactly ``n`` bytes."""
        self.fill(n, what)
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def read_int(self, what: str = "an integer") -> int:
        """ReadInt: a sign byte then ``intSize`` bytes, little-endian."""
        if self.int_size == 4:
            self.fill(5, what)
            sign, value = INT4.unpack_from(self.buf, self.pos)
            self.pos += 5
            value = int(value)
        else:
            n = self.int_size
            self.fill(n + 1, what)
            sign = self.buf[self.pos]
            value = int.from_bytes(self.buf[self.pos + 1 : self.pos + 1 + n], "little")
            self.pos += n + 1
        return -value if sign else value  # any non-zero sign byte is negative, as in C

    def read_str(self, what: str = "a string") -> str | None:
        """ReadStr: an Int length then the bytes; length -1 is NULL, 0 is ''."""
        raw = self.read_raw_str(what)
        return None if raw is None else raw.decode("utf-8", "replace")

    def read_raw_str(self, what: str = "a string") -> bytes | None:
        n = self.read_int(what)
        if n < 0:  # ReadStr takes any negative length as NULL
            return None
        return self.read_bytes(n, what)

    def read_offset(self, what: str = "a data offset") -> tuple[int, int]:
        """ReadOffset: (flag, position); flag is one of OFFSET_FLAGS."""
        start = self.offset
        if self.off_size == 8:
            self.fill(9, what)
            flag, value = OFFSET8.unpack_from(self.buf, self.pos)
            self.pos += 9
        else:
            n = self.off_size
            self.fill(n + 1, what)
            flag = self.buf[self.pos]
            value = int.from_bytes(self.buf[self.pos + 1 : self.pos + 1 + n], "little")
            self.pos += n + 1
        if flag not in OFFSET_FLAGS:
            raise CorruptArchive(f"{self.name}: bad data offset flag {flag} at byte {start}")
        return flag, value
