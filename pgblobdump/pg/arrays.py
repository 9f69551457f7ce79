"""Binary array parameters built at C speed: a million OIDs (or LO contents) sent as one
``oid[]`` (or ``bytea[]``) without psycopg's per-element Python dumping.

The binary array format (array_send in arrayfuncs.c): int32 ndim (1), int32 has-nulls
(0), uint32 element type OID, then per dimension int32 length and int32 lower bound (1),
then per element int32 byte length and the element's binary form; all big-endian. An
``oid`` element is 4 bytes, so the element part is the uint32 pairs (4, oid) and is built
by slicing one array into another.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

import psycopg
from psycopg.abc import DumperKey
from psycopg.adapt import Dumper, PyFormat
from psycopg.pq import Format

OID = psycopg.postgres.types["oid"]
BYTEA = psycopg.postgres.types["bytea"]
_HEAD = struct.Struct(">iiIii")
_LEN = struct.Struct(">i")

assert array("I").itemsize == 4


class BinaryArray:
    """An array parameter already in binary form: ``data`` for the type ``array_oid``."""

    __slots__ = ("array_oid", "data")

    def __init__(self, array_oid: int, data: bytes) -> None:
        self.array_oid = array_oid
        self.data = data


class _BinaryArrayDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: BinaryArray) -> bytes:
        return obj.data

    def get_key(self, obj: BinaryArray, format: PyFormat) -> DumperKey:
        return (BinaryArray, obj.array_oid)  # type: ignore[return-value]

    def upgrade(self, obj: BinaryArray, format: PyFormat) -> Dumper:
        dumper = _BinaryArrayDumper(BinaryArray)
        dumper.oid = obj.array_oid
        return dumper


psycopg.adapters.register_dumper(BinaryArray, _BinaryArrayDumper)


def oid_array(oids: Sequence[int]) -> BinaryArray:
    """``oids`` as one binary ``oid[]`` parameter (each 0 .. 2^32-1)."""
    n = len(oids)
    pairs = array("I", [4]) * (2 * n)
    pairs[1::2] = oids if isinstance(oids, array) and oids.typecode == "I" else array("I", oids)
    if sys.byteorder == "little":
        pairs.byteswap()
    return BinaryArray(OID.array_oid, _HEAD.pack(1, 0, OID.oid, n, 1) + pairs.tobytes())


def bytea_array(datas: Sequence[bytes | memoryview]) -> BinaryArray:
    """``datas`` as one binary ``bytea[]`` parameter (each under 1 GB)."""
    pack = _LEN.pack
    parts: list[bytes | memoryview] = [_HEAD.pack(1, 0, BYTEA.oid, len(datas), 1)]
    for d in datas:
        parts.append(pack(len(d)))
        parts.append(d)
    return BinaryArray(BYTEA.array_oid, b"".join(parts))
