"""Parse and format byte sizes (``4KiB``, ``1.5MB``, ``1KiB-64KiB``), counts and
durations, for people: one unit family (B, KiB, MiB, GiB, TiB) in every table and
progress line, and counts with their noun in the right number (``1 file``, ``2 files``)."""

from __future__ import annotations

import re
from decimal import Decimal

from pgblobdump.errors import UsageError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")
_COUNT_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*")


def parse_size(text: str, what: str = "size") -> int:
    """Bytes in ``text``: a number with an optional unit (B, KiB/K, KB, MiB/M, MB, ...)."""
    m = _SIZE_RE.fullmatch(text.replace("_", ""))
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(
            f"{what} {text!r} is not a size; use a number with an optional unit"
            " like 0, 512, 4KiB, 1.5MB, 2GiB"
        )
    # Decimal, not float: a 30-digit value is kept exactly (and refused by its caller as
    # too large with its own digits), and 1.5KiB is exactly 1536.
    value = Decimal(m.group(1)) * _UNITS[m.group(2).lower()]
    if value != value.to_integral_value():
        raise UsageError(f"{what} {text!r} is not a whole number of bytes")
    return int(value)


def parse_count(text: str, what: str = "count") -> int:
    """A whole count, allowing ``_`` separators and k/M/G suffixes (``1M`` = 1,000,000)."""
    m = _COUNT_RE.fullmatch(text.replace("_", "").replace(",", ""))
    if not m:
        raise UsageError(f"{what} {text!r} is not a whole number (like 1000, 100k or 1M)")
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[m.group(2).lower()]
    value = Decimal(m.group(1)) * scale
    if value != value.to_integral_value():
        raise UsageError(f"{what} {text!r} is not a whole number")
    return int(value)


def format_bytes(n: float) -> str:
    """``1536`` -> ``1.5 KiB``; binary units, at most one decimal."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


_IRREGULAR = {"LO": "LOs", "OID": "OIDs", "entry": "entries", "was": "were", "is": "are",
              "this": "these", "that": "those", "it": "they"}  # fmt: skip


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``, ``1,000 LOs``: ``n`` with thousands separators and ``word``
    in the number ``n`` asks for (``many``, else ``word`` + s, else a known irregular)."""
    return f"{n:,} {noun(n, word, many)}"


def noun(n: int, word: str, many: str | None = None) -> str:
    """``word`` as ``n`` of it are called: ``difference`` or ``differences``."""
    if n == 1:
        return word
    if many is not None:
        return many
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.endswith(("s", "x", "ch", "sh")):
        return word + "es"
    return word + "s"


def format_duration(seconds: float) -> str:
    """``3600`` -> ``1 h``, ``5400`` -> ``90 min``, ``90`` -> ``90 s``, ``172800`` -> ``2 d``:
    the largest unit that holds it whole."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|)\s*", re.IGNORECASE)
_SECONDS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, what: str = "duration") -> float:
    """Seconds in ``text``: a number with an optional unit (s, m/min, h, d): ``90s``,
    ``30m``, ``1.5h``, ``0``."""
    m = _DURATION_RE.fullmatch(text)
    if not m:
        raise UsageError(f"{what} {text!r} is not a duration; use a number with s, m, h or d"
                         " like 90s, 30m, 1h, 0")  # fmt: skip
    return float(m.group(1)) * _SECONDS[m.group(2).lower()]
