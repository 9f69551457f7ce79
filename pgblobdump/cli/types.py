"""click parameter types for values the core parses (sizes, counts, OID ranges, --part
K/N): a bad value is a click usage error (exit 2) with the core's own message, raised
while options are parsed, before a command does anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from pgblobdump.errors import PgBlobDumpError, UsageError
from pgblobdump.pgconstants import OID_MAX
from pgblobdump.units import parse_count, parse_size


def parse_oids(text: str, what: str = "--oids") -> tuple[int, int]:
    """``1000-5000`` (inclusive) or one OID; empty: every OID."""
    if not text:
        return 0, OID_MAX
    lo, sep, hi = text.partition("-")
    try:
        first = parse_count(lo, what)
        last = parse_count(hi, what) if sep else first
    except PgBlobDumpError as e:
        raise UsageError(f"{what} {text!r} is not an OID or a range like 1000-5000") from e
    if not 0 <= first <= last <= OID_MAX:
        raise UsageError(f"{what} {text!r}: the range must ascend within 0..{OID_MAX}")
    return first, last


def parse_sizes(text: str, what: str) -> tuple[int, ...]:
    """``350MB,4.5MB``: a comma list of sizes."""
    return tuple(parse_size(s.strip(), what) for s in text.split(",") if s.strip())


def parse_column(text: str, what: str) -> tuple[str, str]:
    """``[schema.]table.column`` -> (``[schema.]table``, ``column``)."""
    table, dot, column = text.rpartition(".")
    if not dot or not table or not column:
        raise UsageError(f"{what} {text!r} must be TABLE.COLUMN (or SCHEMA.TABLE.COLUMN)")
    return table, column


def parse_part(text: str, what: str = "--part") -> tuple[int, int]:
    from pgblobdump.packed.restore.request import parse_part  # the archive's modules only when used

    return parse_part(text)


class Parsed(click.ParamType):  # type: ignore[type-arg,unused-ignore]  # generic from click 8.2
    """A string option turned into a value by ``parse(text, flag)``; its UsageError
    becomes click's, message unchanged. ``name`` is what help shows as the metavar."""

    def __init__(self, name: str, parse: Callable[[str, str], Any]) -> None:
        self.name = name
        self._parse = parse

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # already parsed (a default given as a value)
        flags = [o for o in (param.opts if param is not None else []) if o.startswith("--")]
        try:
            return self._parse(value, flags[0] if flags else (param.name if param else "") or "")
        except UsageError as e:
            raise click.UsageError(str(e), ctx) from e


class _Oid(click.ParamType):  # type: ignore[type-arg,unused-ignore]  # generic from click 8.2
    """One LO's OID, 1 to 4294967295 (click's own error for what is not a number)."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        oid = click.INT.convert(value, param, ctx)
        if not 0 < oid <= OID_MAX:
            raise click.UsageError(f"OID {oid} is out of range (1 to {OID_MAX})", ctx)
        return oid


OID = _Oid()
"""One LO's OID."""
SIZE = Parsed("size", parse_size)
"""Bytes: ``512``, ``4KiB``, ``1.5MB``."""
SIZES = Parsed("sizes", parse_sizes)
"""A comma list of sizes."""
COUNT = Parsed("count", parse_count)
"""A whole number: ``1000``, ``100k``, ``1M``."""
OIDS = Parsed("oids", parse_oids)
"""One OID or an inclusive range ``1000-5000``: (first, last)."""
COLUMN = Parsed("table.column", parse_column)
"""``[schema.]table.column``: (table, column)."""
PART = Parsed("part", parse_part)


def _oid_range(text: str, what: str = "--oid-range") -> tuple[int, int]:
    from pgblobdump.remap.plan import parse_range

    return parse_range(text)


OID_RANGE = Parsed("oid range", _oid_range)
"""``K/N``: (K, N)."""
